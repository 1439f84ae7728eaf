"""The reward of huggingface/trl issue #4358's reproduction script (https://github.com/huggingface/trl/issues/4358),
in its shape: chat completions read by `completion[0]["content"]`, scored by how many distinct characters they
hold. Written here, not copied."""

from __future__ import annotations


def distinct_characters_reward(completions, **kwargs) -> list[float]:
    return [float(len(set(completion[0]["content"]))) for completion in completions]
