"""Rewards in the shapes of the examples on TRL's GRPO page ("Using a custom reward function"): strings for
text prompts with a `ground_truth` column, chat message lists for conversational ones, an `async def`, and
one taking `completions_ids`, the keyword that page writes where TRL passes `completion_ids`, so that in TRL
it fails for a missing argument (kept so: grpo must refuse it at start in one line). Modelled on
https://github.com/huggingface/trl/blob/010dd23f91b8cb007849ad94dbf336379aea0750/docs/source/grpo_trainer.md;
written here, not copied."""

from __future__ import annotations

import asyncio


def token_count_reward(completions_ids, **kwargs) -> list[float]:
    """One point per token: the page's keyword, not the one TRL passes."""
    return [float(len(token_ids)) for token_ids in completions_ids]


def compact_format_reward(completions, **kwargs) -> list[float]:
    """1.0 for a one-line <think>...</think><answer>...</answer> with nothing between or around the blocks."""
    rewards = []
    for completion in completions:
        text = completion[0]["content"]
        think, joint, answer = text.partition("</think><answer>")
        compact = "\n" not in text and think.startswith("<think>") and answer.endswith("</answer>")
        rewards.append(1.0 if joint and compact else 0.0)
    return rewards


def _last_boxed(text: str) -> str | None:
    """The contents of the last \\boxed{...}, braces inside it balanced; None without one."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return None
    depth, begin = 0, start + len("\\boxed")
    for end in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[begin + 1:end]
    return None


def boxed_ground_truth_reward(completions, ground_truth, **kwargs) -> list[float]:
    """1.0 where the last boxed answer is the `ground_truth` column's text."""
    return [1.0 if _last_boxed(text) == truth.strip() else 0.0
            for text, truth in zip(completions, ground_truth, strict=True)]


async def _nonblank(text: str) -> float:
    await asyncio.sleep(0)  # stands for an I/O-bound judge: the call yields to the event loop
    return 1.0 if text.strip() else 0.0


async def nonblank_async_reward(prompts, completions, **kwargs) -> list[float]:
    """1.0 for a completion with any text, each judged by an awaited call, all at once."""
    return list(await asyncio.gather(*(_nonblank(text) for text in completions)))
