"""A training step's record: what each phase produced, typed, and the one metrics line made from it.

The guard reads the record's metrics twice per step (after the rollout, and after the update) under
the names in grpo.metric_keys; `metrics.jsonl` gets the whole line once the step is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo import metric_keys as k
from grpo.guard.breakers import Trip
from grpo.policy.update import PrepareStats, UpdateResult
from grpo.rollout.collector import RolloutStats


@dataclass
class StepState:
    """Where the run stands once the step is done."""

    lr: float
    data_index: int
    policy_version: int
    rollbacks: int

    def metrics(self) -> dict[str, Any]:
        return {k.LR: self.lr, k.DATA_INDEX: self.data_index, k.POLICY_VERSION: self.policy_version,
                k.ROLLBACKS: self.rollbacks}


@dataclass
class StepRecord:
    step: int
    rollout: RolloutStats | None = None  # None until the rollout phase is done
    trips: list[Trip] = field(default_factory=list)  # every breaker that tripped this step, in order
    prepared: PrepareStats = field(default_factory=PrepareStats)  # old/reference log-probs before the update
    no_signal: bool = False  # rows to train on, but every advantage zero on every rank
    masked_frac: float | None = None  # with algo.mask_truncated: of the rows to train on, those left out of the loss
    update: UpdateResult | None = None  # None: blocked by a rollout breaker before the update phase
    sync: dict[str, Any] = field(default_factory=dict)  # weight sync to the engine and its verification
    evaluation: dict[str, Any] | None = None  # a held-out evaluation due this step
    timings: dict[str, float] = field(default_factory=dict)  # time/<phase>_s and memory/<phase>_peak_gib
    state: StepState | None = None  # set once the step is done
    step_s: float = 0.0

    @property
    def blocking_trip(self) -> Trip | None:
        """The first breaker that does more than warn: the update must not run, nor a checkpoint be saved."""
        return next((t for t in self.trips if t.action != "warn"), None)

    @property
    def skip_reason(self) -> str | None:
        if self.update is None:
            blocking = self.blocking_trip
            return f"breaker {blocking.breaker} tripped" if blocking else None
        return self.update.skip_reason

    @property
    def applied(self) -> bool:
        return self.update is not None and self.update.applied

    def rollout_metrics(self) -> dict[str, Any]:
        """What the rollout breakers read."""
        return self.rollout.metrics() if self.rollout is not None else {}

    def update_metrics(self) -> dict[str, Any]:
        """What the update breakers read: the rollout's metrics and the update's outcome."""
        m = {**self.rollout_metrics(), **self.prepared.metrics(), k.NO_SIGNAL: int(self.no_signal)}
        if self.masked_frac is not None:
            m[k.MASKED_TRUNCATED_FRAC] = self.masked_frac
        if self.update is not None:
            m.update(self.update.metrics)
            m[k.APPLIED] = int(self.update.applied)
            m[k.NONFINITE] = int(self.update.nonfinite)
        return m

    def metrics(self) -> dict[str, Any]:
        """The step's line in metrics.jsonl."""
        m = self.update_metrics()
        m.update(self.sync)
        if self.evaluation is not None:
            m.update({k.EVAL_PREFIX + name: value for name, value in self.evaluation.items()})
        m.update(self.timings)
        m.update({k.APPLIED: int(self.applied), k.SKIP_REASON: self.skip_reason,
                  **(self.state.metrics() if self.state is not None else {}),
                  k.TRIPS: [t.breaker for t in self.trips], k.STEP_S: self.step_s})
        m[k.TOKENS_PER_S] = m[k.GENERATED_TOKENS] / self.step_s
        return m
