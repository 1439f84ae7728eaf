"""Circuit breakers: each watches one step metric, and trips after `patience` bad steps in a row.

Rollout breakers run before the update (a bad batch is never trained on), and so does the off-policy
breaker, once the proximal log-probs are known; update breakers run after it. The guard's streaks and baselines are part of the checkpointed state; the rollback count is not,
so rolling back can never reset the limit on rollbacks.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from grpo import metric_keys as k
from grpo.checks import GUARD_PHASES as PHASES
from grpo.checks import collapsed, kl_exploded, spiked
from grpo.config import BreakerConfig, GuardConfig
from grpo.rundir.checkpoints import CheckpointInfo

SEVERITY = {"warn": 0, "pause": 1, "rollback": 2, "stop": 3}


@dataclass
class Trip:
    breaker: str
    action: str
    step: int
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


def most_severe(trips: list[Trip]) -> Trip | None:
    return max(trips, key=lambda t: SEVERITY[t.action]) if trips else None


@dataclass(frozen=True)
class Verdict:
    """What the loop must do after a step's trips: the guard decides, the loop acts."""

    action: Literal["continue", "warn", "pause", "rollback", "stop"]
    trip: Trip | None = None  # the most severe trip behind the action
    reason: str = ""
    rollback_to: CheckpointInfo | None = None


class Guard:
    def __init__(self, cfg: GuardConfig) -> None:
        self.cfg = cfg
        self.streaks = {name: 0 for names in PHASES.values() for name in names}
        self.reward_history: list[float] = []
        self.grad_norm_history: list[float] = []
        self.rollbacks = 0

    def check(self, phase: str, step: int, m: dict[str, Any]) -> list[Trip]:
        if not self.cfg.enabled:
            return []
        trips = []
        for name in PHASES[phase]:
            breaker: BreakerConfig = getattr(self.cfg, name)
            if not breaker.enabled:
                continue
            verdict = getattr(self, f"_{name}")(breaker, m)
            if verdict is None:  # the metric does not apply this step (e.g. no reward without rollouts)
                continue
            bad, message, evidence = verdict
            self.streaks[name] = self.streaks[name] + 1 if bad else 0
            if self.streaks[name] >= breaker.patience:
                evidence = {**evidence, "consecutive_steps": self.streaks[name]}
                trips.append(Trip(name, breaker.action, step, message, evidence))
                self.streaks[name] = 0
        return trips

    def decide(self, trips: list[Trip], last_good: CheckpointInfo | None) -> Verdict:
        """The action for this step's trips. A rollback needs a healthy checkpoint and rollbacks left;
        without them it becomes a stop that says why."""
        worst = most_severe(trips)
        if worst is None:
            return Verdict("continue")
        if worst.action != "rollback":
            return Verdict(worst.action, worst, worst.message)  # type: ignore[arg-type]
        self.rollbacks += 1
        if last_good is None:
            return Verdict("stop", worst, f"{worst.message}; not rolling back: no healthy checkpoint to roll back to")
        if self.rollbacks > self.cfg.max_rollbacks:
            return Verdict("stop", worst,
                           f"{worst.message}; not rolling back: {self.cfg.max_rollbacks} rollbacks already done")
        return Verdict("rollback", worst, worst.message, rollback_to=last_good)

    def observe(self, m: dict[str, Any]) -> None:
        """Feed a step that tripped nothing into the moving baselines."""
        if m.get(k.REWARD_MEAN) is not None:
            self.reward_history = (self.reward_history + [m[k.REWARD_MEAN]])[-self.cfg.baseline_steps :]
        if m.get(k.APPLIED) and m.get(k.GRAD_NORM) is not None:
            self.grad_norm_history = (self.grad_norm_history + [m[k.GRAD_NORM]])[-self.cfg.baseline_steps :]

    @property
    def healthy(self) -> bool:
        """No breaker that would pause, roll back or stop is part-way to tripping."""
        return all(streak == 0 for name, streak in self.streaks.items() if getattr(self.cfg, name).action != "warn")

    def state_dict(self) -> dict[str, Any]:
        return {"streaks": dict(self.streaks), "reward_history": list(self.reward_history),
                "grad_norm_history": list(self.grad_norm_history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.streaks.update(state["streaks"])
        self.reward_history = list(state["reward_history"])
        self.grad_norm_history = list(state["grad_norm_history"])

    # Each breaker: (bad?, message, evidence), or None when its metric is absent this step.

    def _failed_rollouts(self, b: BreakerConfig, m: dict[str, Any]):
        # What the step lost, not what it retried: a sample a retry brought back (a restarted server's)
        # is trained on like any other, and a rollback would only redo a step that succeeded.
        frac = m.get(k.UNRECOVERED_FRAC)
        if frac is None:
            return None
        counts = {key: v for key, v in m.items() if key.startswith(k.ROLLOUT_PREFIX) and not key.endswith("_frac")}
        recovered = m.get(k.RECOVERED) or 0
        return frac >= b.threshold, (
            f"{frac:.0%} of samples still failed after every retry, their groups dropped (threshold "
            f"{b.threshold:.0%})" + (f"; {recovered} more recovered on a retry" if recovered else "")), {
            "unrecovered_frac": frac, "failed_frac": m.get(k.FAILED_FRAC), **counts}

    def _unscorable_rewards(self, b: BreakerConfig, m: dict[str, Any]):
        frac = m.get(k.UNSCORABLE_FRAC)
        if frac is None or not m.get(k.UNSCORABLE):
            return None
        return frac >= b.threshold, (
            f"{frac:.0%} of generated answers could not be scored: the task's gold answers or the reward "
            f"function are at fault, not the model, and rolling back cannot fix them; check the data "
            f"(task.path, and task.gold_pattern where it sets the gold) and task.reward (reward errors this step: {m.get(k.REWARD_ERRORS, 0)})"
        ), {"unscorable_frac": frac, "unscorable": m.get(k.UNSCORABLE),
            "reward_errors": m.get(k.REWARD_ERRORS)}

    def _zero_reward(self, b: BreakerConfig, m: dict[str, Any]):
        reward = m.get(k.REWARD_MEAN)
        if reward is None:
            return None
        return reward <= b.threshold, f"mean reward {reward:g} <= {b.threshold:g}", {
            "reward_mean": reward, "reward_max": m.get(k.REWARD_MAX)}

    def _reward_collapse(self, b: BreakerConfig, m: dict[str, Any]):
        reward = m.get(k.REWARD_MEAN)
        bad = None if reward is None else collapsed(reward, self.reward_history, b.threshold)
        if bad is None:  # no baseline yet, or none worth collapsing from
            return None
        baseline = statistics.fmean(self.reward_history)
        return bad, (
            f"mean reward {reward:.3f} fell below {b.threshold:g} x its baseline {baseline:.3f}"
        ), {"reward_mean": reward, "baseline": baseline, "recent": self.reward_history[-5:]}

    def _empty_responses(self, b: BreakerConfig, m: dict[str, Any]):
        frac = m.get(k.EMPTY_FRAC)
        if frac is None:
            return None
        return frac >= b.threshold, f"{frac:.0%} of responses empty", {"empty_frac": frac}

    def _truncated_responses(self, b: BreakerConfig, m: dict[str, Any]):
        frac = m.get(k.TRUNCATED_FRAC)
        if frac is None:
            return None
        return frac >= b.threshold, f"{frac:.0%} of responses truncated at max_new_tokens", {
            "truncated_frac": frac, "length_mean": m.get(k.LENGTH_MEAN)}

    def _nonfinite(self, b: BreakerConfig, m: dict[str, Any]):
        bad = bool(m.get(k.NONFINITE))
        return bad, m.get(k.SKIP_REASON) or "non-finite loss, gradients or parameters", {
            "loss": m.get(k.LOSS), "grad_norm": m.get(k.GRAD_NORM)}

    def _zero_loss(self, b: BreakerConfig, m: dict[str, Any]):
        if m.get(k.MASKED_TRUNCATED_FRAC) == 1:  # no update: every row truncated and masked, not rewards that agree
            return None
        no_signal = bool(m.get(k.NO_SIGNAL))
        loss = m.get(k.LOSS)
        bad = no_signal or (bool(m.get(k.APPLIED)) and loss is not None and loss == b.threshold)
        return bad, "loss exactly 0: every group's answers got the same reward (no learning signal)", {
            "loss": loss, "zero_std_frac": m.get(k.ZERO_VARIANCE_FRAC)}

    def _grad_norm_spike(self, b: BreakerConfig, m: dict[str, Any]):
        norm = m.get(k.GRAD_NORM)
        bad = None if norm is None else spiked(norm, self.grad_norm_history, b.threshold)
        if bad is None:
            return None
        median = statistics.median(self.grad_norm_history)
        return bad, f"grad norm {norm:.3g} > {b.threshold:g} x median {median:.3g}", {
            "grad_norm": norm, "median": median}

    def _kl_explosion(self, b: BreakerConfig, m: dict[str, Any]):
        kl = m.get(k.KL, m.get(k.APPROX_KL_OLD))
        if kl is None:
            return None
        return kl_exploded(kl, b.threshold), f"KL {kl:.3g} > {b.threshold:g}", {"kl": kl}

    def _offpolicy_kl(self, b: BreakerConfig, m: dict[str, Any]):
        kl = m.get(k.OFFPOLICY_KL)
        if kl is None:  # on policy: nothing generated ahead
            return None
        return (not math.isfinite(kl)) or kl > b.threshold, (
            f"the batch's sampler is {kl:.3g} nats per token (KL) from the policy about to train on it "
            f"(threshold {b.threshold:g}): the policy moves too far per step for samples this stale; a "
            "rollback lowers the learning rate, or lower rollout.max_staleness"), {
            "offpolicy_kl": kl, "staleness": m.get(k.STALENESS_MAX),
            "importance_weight_max": m.get(k.IMPORTANCE_WEIGHT_MAX)}
