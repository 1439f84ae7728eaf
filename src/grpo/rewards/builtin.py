"""The built-in rewards: ``math``, ``math_format`` and ``digits``."""

from __future__ import annotations

from typing import Any

from grpo.rewards.extraction import extract_answer
from grpo.rewards.math_score import math_reward
from grpo.rewards.registry import register_reward


def completion_texts(completions: list[Any]) -> list[str]:
    """The text of each completion: given as text, or (chat data, as TRL passes it) as a list of messages."""
    return [c if isinstance(c, str) else c[-1]["content"] for c in completions]


def math_batch_reward(
    completions: list[Any], gold: list[str | None], **unused_columns: Any
) -> list[float | None]:
    """Built-in ``"math"`` reward: :func:`math_reward` per sample."""
    if len(gold) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(gold)} gold answers")
    return [math_reward(c, g) for c, g in zip(completion_texts(completions), gold)]


register_reward("math", math_batch_reward)


FORMAT_BONUS = 0.1


@register_reward("math_format")
def math_format_reward(completions: list[Any], gold: list[str | None], **unused_columns: Any) -> list[float | None]:
    """``"math"`` plus a small format bonus: a wrong answer that still states a final answer the
    extractor can read (\\boxed{}, "the answer is", ####) scores FORMAT_BONUS instead of 0. A weak
    model whose answers are almost all wrong then still gets a signal (finish, and say the answer
    plainly) from its first steps. Evaluate with plain ``"math"`` (eval.reward=math)."""
    texts = completion_texts(completions)
    rewards = math_batch_reward(texts, gold)
    return [r if r is None or r >= 1.0 or extract_answer(c) is None else FORMAT_BONUS
            for r, c in zip(rewards, texts)]


@register_reward("digits")
def digit_fraction_reward(completions: list[Any], **unused_columns: Any) -> list[float | None]:
    """A deliberately easy toy reward, the fraction of characters that are digits: a randomly
    initialised tiny model gets a graded signal from its first step, so smoke tests see learning."""
    return [sum(c.isdigit() for c in text) / len(text) if text else 0.0 for text in completion_texts(completions)]
