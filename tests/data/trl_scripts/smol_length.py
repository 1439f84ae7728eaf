"""The LLM course's GRPO exercise reward: completions close to a length held in a module-level setting. Modelled on
https://github.com/huggingface/course/blob/09fe66aabd2c19a4c885e4b7eb37efa13c317ac8/chapters/en/chapter12/5.mdx
(`reward_len`); written here, not copied."""

from __future__ import annotations

ideal_length = 50


def reward_len(completions, **kwargs) -> list[float]:
    return [-abs(ideal_length - len(text)) for text in completions]
