"""Advice to the user: the first time a step trains on nothing for a reason, say why and what to change,
loudly, once per reason."""

from __future__ import annotations

from typing import Any

from grpo import metric_keys as k
from grpo.console import alert


class SkipAdvice:
    def __init__(self) -> None:
        self.explained: set[str] = set()  # skip reasons already explained

    def after_step(self, step: int, applied: bool, reason: str | None, m: dict[str, Any]) -> None:
        if applied or reason is None or reason in self.explained or reason.startswith("breaker"):
            return
        self.explained.add(reason)
        if reason == "no learning signal":
            mean, truncated = m.get(k.REWARD_MEAN), m.get(k.TRUNCATED_FRAC) or 0.0
            why = ("every answer was wrong" if mean == 0 else "every answer was right" if mean == m.get(k.REWARD_MAX)
                   and mean else "in every group all answers got the same reward")
            remedy = ("more samples per problem (rollout.samples_per_problem) so some answers differ, "
                      "dynamic sampling (rollout.filter_zero_variance=true) to refill with groups that disagree, "
                      "a task matched to the model, or a small format bonus in the reward")
            if truncated > 0.3:
                remedy = f"longer answers (rollout.max_new_tokens: {truncated:.0%} were cut off), " + remedy
            alert(f"step {step}: NO UPDATE: {why} (mean reward {mean:.3g}), so GRPO has no signal. Try {remedy}.")
        elif reason == "no trainable groups":
            alert(f"step {step}: NO UPDATE: no group had every sample generated and scored "
                  f"({m.get(k.FAILED, 0)} failed, {m.get(k.UNSCORABLE, 0)} unscorable); "
                  "the guard's breakers watch this (grpo doctor shows the failures).")
