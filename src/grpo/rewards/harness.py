"""Scoring a batch of completions with any reward function, checking what it returns."""

from __future__ import annotations

import logging
import math
import numbers
from typing import Any

from grpo.rewards.registry import RewardFn

logger = logging.getLogger(__name__)


def _fn_name(fn: RewardFn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _validated(fn: RewardFn, out: Any, expected_len: int) -> list[float | None]:
    """The rewards as floats/None; a malformed return value is the reward author's bug."""
    if not isinstance(out, list):
        raise TypeError(
            f"reward function {_fn_name(fn)} must return a list, got {type(out).__name__}"
        )
    if len(out) != expected_len:
        raise TypeError(
            f"reward function {_fn_name(fn)} returned {len(out)} rewards for "
            f"{expected_len} completions"
        )
    rewards: list[float | None] = []
    for i, value in enumerate(out):
        if value is None:
            rewards.append(None)
        elif isinstance(value, numbers.Real):
            rewards.append(float(value))
        else:
            raise TypeError(
                f"reward function {_fn_name(fn)} returned {type(value).__name__} at index {i};"
                " rewards must be float, int, bool or None"
            )
    return rewards


def score_completions(
    fn: RewardFn, completions: list[str], columns: dict[str, list[Any]]
) -> tuple[list[float | None], list[str | None]]:
    """Rewards and per-sample error strings for a batch. If the batch call raises, each
    sample is scored alone, so one bad sample costs only its own reward (None)."""
    n = len(completions)
    for key, values in columns.items():
        if len(values) != n:
            raise ValueError(f"column {key!r} has {len(values)} rows for {n} completions")

    errors: list[str | None] = [None] * n
    try:
        out = fn(completions, **columns)
    except Exception as exc:  # user code: any failure falls back to per-sample scoring
        rewards, errors = _score_one_by_one(fn, completions, columns, exc)
    else:
        rewards = _validated(fn, out, n)

    for i, reward in enumerate(rewards):
        if reward is not None and not math.isfinite(reward):
            rewards[i] = None
            errors[i] = "non-finite reward"
    return rewards, errors


def _score_one_by_one(
    fn: RewardFn, completions: list[str], columns: dict[str, list[Any]], batch_exc: Exception
) -> tuple[list[float | None], list[str | None]]:
    logger.warning(
        "reward function %s failed on the batch (%s: %s); scoring samples one by one",
        _fn_name(fn),
        type(batch_exc).__name__,
        batch_exc,
    )
    rewards: list[float | None] = []
    errors: list[str | None] = []
    for i, completion in enumerate(completions):
        row = {key: [values[i]] for key, values in columns.items()}
        try:
            out = fn([completion], **row)
        except Exception as exc:  # user code: this sample's failure is recorded, not raised
            rewards.append(None)
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        rewards.append(_validated(fn, out, 1)[0])
        errors.append(None)
    return rewards, errors
