"""Advice to the user: the first time a step trains on nothing for a reason, say why and what to change,
loudly, once per reason."""

from __future__ import annotations

from typing import Any

from grpo import metric_keys as k
from grpo.console import alert

# The skip reason of a step whose every row algo.mask_truncated left out of the loss.
ALL_MASKED = "every completion truncated (algo.mask_truncated)"


class SkipAdvice:
    def __init__(self) -> None:
        self.explained: set[str] = set()  # skip reasons already explained

    def after_step(self, step: int, applied: bool, reason: str | None, m: dict[str, Any]) -> None:
        if applied or reason is None or reason in self.explained or reason.startswith("breaker"):
            return
        self.explained.add(reason)
        if reason == "no learning signal":
            why, remedy = _why_no_signal(m)
            alert(f"step {step}: NO UPDATE: {why} (mean reward {m.get(k.REWARD_MEAN):.3g}), so GRPO has no signal. "
                  f"Try {remedy}.")
        elif reason == "no trainable groups":
            alert(f"step {step}: NO UPDATE: no group had every sample generated and scored "
                  f"({m.get(k.FAILED, 0)} failed, {m.get(k.UNSCORABLE, 0)} unscorable); "
                  "the guard's breakers watch this (grpo doctor shows the failures).")
        elif reason == ALL_MASKED:
            limit = m.get(k.LENGTH_MAX)
            alert(f"step {step}: NO UPDATE: every completion ran to rollout.max_new_tokens"
                  f"{f' ({limit:g} tokens)' if limit is not None else ''} without ending, and algo.mask_truncated "
                  "leaves truncated completions out of the loss. Raise rollout.max_new_tokens, or set "
                  "algo.mask_truncated=false to train on them.")


SPREAD = ("more samples per problem (rollout.samples_per_problem) so some answers differ, dynamic sampling "
          "(rollout.filter_zero_variance=true) to refill with groups that disagree, a task matched to the model, "
          "or a small format bonus in the reward")


def _why_no_signal(m: dict[str, Any]) -> tuple[str, str]:
    """What is true of a step whose every group got one reward for all its answers, told from the rewards
    and the accuracy (the share at task.correct_threshold or above), and what to change."""
    accuracy, low, high = m.get(k.ACCURACY), m.get(k.REWARD_MIN), m.get(k.REWARD_MAX)
    if low is not None and low == high and low != 0 and accuracy == 0:
        return (f"every answer got the same reward, {low:.3g}, and none reached task.correct_threshold",
                "a reward that tells answers apart (task.reward gives every answer the same value)")
    if accuracy == 1:
        why = "every answer was right"
    elif accuracy == 0:
        why = "every answer was wrong"
    else:
        why = "in every group all answers got the same reward"
    truncated = m.get(k.TRUNCATED_FRAC) or 0.0
    if truncated > 0.3:
        return why, f"longer answers (rollout.max_new_tokens: {truncated:.0%} were cut off), {SPREAD}"
    return why, SPREAD
