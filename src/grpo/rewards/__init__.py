"""Rewards: answer extraction, math scoring, a registry of reward functions, and the harness that
scores a batch with any of them.

A reward is ``None`` when a sample cannot be scored (unusable gold answer, or the reward function
failed on it); such samples are left out of training, never scored 0.

Modules: ``extraction`` (the final answer in a completion, the number an answer denotes),
``math_score`` (is an answer equal to the gold), ``registry`` (rewards by name or import path),
``builtin`` (``math``, ``math_format``, ``digits``), ``harness`` (scoring a batch, checking what a
reward function returned).

Adding a reward: write a function that takes the completions and the data's columns as keywords and
returns one float (or ``None``) per completion, e.g.::

    def exact_label(completions, label, **kwargs):
        return [float(c.strip() == l) for c, l in zip(completions, label)]

then either name it by import path (``task.reward=my_rewards:exact_label``) or register it under a
name (``register_reward("exact_label", exact_label)``, or ``@register_reward("exact_label")``). A
built-in reward goes in ``builtin.py``, registered there, with a test in ``tests/unit/test_rewards.py``.
"""

from __future__ import annotations

from grpo.rewards.builtin import FORMAT_BONUS, digit_fraction_reward, math_batch_reward, math_format_reward
from grpo.rewards.extraction import extract_answer, parse_number
from grpo.rewards.harness import (
    ExtraColumns,
    Reward,
    RewardError,
    Scores,
    TrainerState,
    call_reward,
    check_golds,
    check_rewards,
    score,
    score_completions,
)
from grpo.rewards.math_score import gsm8k_gold, math_reward
from grpo.rewards.registry import RewardFn, get_reward, register_reward, registered_rewards, resolve_rewards

__all__ = [
    "ExtraColumns",
    "FORMAT_BONUS",
    "Reward",
    "RewardError",
    "RewardFn",
    "Scores",
    "TrainerState",
    "call_reward",
    "check_golds",
    "check_rewards",
    "digit_fraction_reward",
    "extract_answer",
    "get_reward",
    "gsm8k_gold",
    "math_batch_reward",
    "math_format_reward",
    "math_reward",
    "parse_number",
    "register_reward",
    "registered_rewards",
    "resolve_rewards",
    "score",
    "score_completions",
]
