"""A training step's record: what each phase produced, typed, and the one metrics line made from it.

The guard reads the record's metrics twice per step (after the rollout, and after the update) under
the names in grpo.guard.inputs; `metrics.jsonl` gets the whole line once the step is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo.guard import inputs as k
from grpo.guard.breakers import Trip
from grpo.policy.update import UpdateResult


@dataclass
class StepRecord:
    step: int
    rollout: dict[str, Any] = field(default_factory=dict)  # the batch's counts, rewards, lengths (rollout_metrics)
    trips: list[Trip] = field(default_factory=list)  # every breaker that tripped this step, in order
    prepared: dict[str, Any] = field(default_factory=dict)  # old/reference log-prob statistics before the update
    no_signal: bool = False  # rows to train on, but every advantage zero on every rank
    update: UpdateResult | None = None  # None: blocked by a rollout breaker before the update phase
    sync: dict[str, Any] = field(default_factory=dict)  # weight sync to the engine and its verification
    evaluation: dict[str, Any] | None = None  # a held-out evaluation due this step
    timings: dict[str, float] = field(default_factory=dict)  # time/<phase>_s and memory/<phase>_peak_gib
    state: dict[str, Any] = field(default_factory=dict)  # lr, data index, policy version, rollbacks after the step
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

    def update_metrics(self) -> dict[str, Any]:
        """What the update breakers read: the rollout's metrics and the update's outcome."""
        m = {**self.rollout, **self.prepared, k.NO_SIGNAL: int(self.no_signal)}
        if self.update is not None:
            m.update({f"actor/{name}": value for name, value in self.update.metrics.items()})
            m[k.APPLIED] = int(self.update.applied)
            m[k.NONFINITE] = int(self.update.skip_reason is not None and "non-finite" in self.update.skip_reason)
        return m

    def metrics(self) -> dict[str, Any]:
        """The step's line in metrics.jsonl."""
        m = self.update_metrics()
        m.update(self.sync)
        if self.evaluation is not None:
            m.update({f"eval/{name}": value for name, value in self.evaluation.items()})
        m.update(self.timings)
        m.update({k.APPLIED: int(self.applied), k.SKIP_REASON: self.skip_reason, **self.state,
                  "guard/trips": [t.breaker for t in self.trips], "time/step_s": self.step_s})
        m["perf/tokens_per_s"] = m["perf/generated_tokens"] / self.step_s
        return m
