"""What the doctor knows about a run, whatever wrote it: a grpo run directory, AReaL, verl or TRL.

Each source's reader turns its files into one `RunRecord`: metrics per step under canonical names
(below), the infrastructure's and the trainer's events as `Mark`s with the step they happened in,
and the checkpoints. The timeline and the cause are decided on the record alone, so every source
is judged by the same rules.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# Canonical metric names, shared by every reader, the timeline and the report.
REWARD = "reward"  # mean reward of the step's samples
REWARD_STD = "reward_std"
ACCURACY = "accuracy"  # fraction of samples fully correct
LOSS = "loss"
KL = "kl"
ENTROPY = "entropy"
GRAD_NORM = "grad_norm"
CRITIC_LOSS = "critic_loss"  # a value model's loss and gradient norm (PPO with a critic): a NaN there is one too
CRITIC_GRAD_NORM = "critic_grad_norm"
LENGTH = "length"  # mean response length in tokens
TRUNCATED = "truncated_frac"  # responses cut at the length limit
ZERO_VARIANCE = "zero_std_frac"  # groups whose rewards are all identical (the doctor says the older name)
ADVANTAGE_STD = "advantage_std"  # the advantages' spread: above 0, some group's rewards differ
FAILED = "failed_frac"  # generation attempts that failed, timed out or came back empty
LOST = "lost_frac"  # groups lost to failed generations after every retry (a retried failure costs nothing)
STEP_S = "step_s"
MEMORY_GIB = "memory_gib"
PHASE_PREFIX = "time/"  # per-phase seconds: time/rollout, time/update, ...
STATUS_PREFIX = "rollout/"  # samples by status: rollout/ok, rollout/failed, ...
EVAL_ACCURACY = "eval_accuracy"  # held-out evaluations, by step


class UnreadableRun(Exception):
    """The path is not a run the doctor can read: missing, unreadable, or of no known format."""


@dataclass(frozen=True)
class Evidence:
    file: str
    line: int  # 1-based; 0 when the evidence is a whole file (e.g. STOPPED.json)
    text: str


@dataclass(frozen=True)
class Crash:
    """A traceback or fatal line read from a console log (grpo.tools.doctor.crashes reads them)."""

    step: int  # the step in progress when it happened (the last logged step + 1)
    kind: str  # one of crashes.ORDER
    text: str  # the exception line or fatal line
    evidence: Evidence


@dataclass(frozen=True)
class Mark:
    """Something that happened at a step: a server death, a restart, a trip, a checkpoint save.

    kind is one of: server_failure, server_restart, rollout_error, samples_failed (a step's failed samples,
    retried or given up), restart (the trainer resumed), crash, trip, rollback, stop, nonfinite,
    reward_error, oom, interrupted."""

    step: int
    kind: str
    detail: str
    evidence: Evidence | None = None


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: str
    healthy: bool = True


@dataclass
class RunRecord:
    source: str  # grpo | areal | verl | trl
    path: str
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> canonical name -> value
    marks: list[Mark] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    evidence_by_step: dict[int, Evidence] = field(default_factory=dict)  # where each step's metrics were read
    total_steps: int | None = None
    finished: bool = False  # the source says the run ended normally
    running: bool = False  # a trainer holds the run now (grpo runs only can tell)
    console: bool = False  # read from a console log or a metrics file written a row a step: its last line is the
                           # last the run printed (a checkpoint's trainer_state.json is a snapshot, never the run's end)
    stop_checkpoint: str | None = None  # the last good checkpoint the guard named when it stopped the run
    notes: list[str] = field(default_factory=list)  # torn lines skipped, files missing: said, never fatal
    crashes: list[Crash] = field(default_factory=list)  # tracebacks and fatal lines read from a console log
    progress: int = 0  # the last step a progress bar showed (a log whose metrics went elsewhere)
    # Earlier attempts' steps from where the run was restarted on (a resume, or the step count going back):
    # kept apart as history, so only the current attempt is judged. Each: (restart step, its metrics, marks).
    earlier: list[tuple[int, dict[int, dict[str, float]], list[Mark]]] = field(default_factory=list)
    _order: tuple[int, list[int]] | None = field(default=None, init=False, repr=False, compare=False)

    def steps(self) -> list[int]:
        """The training steps logged (a step with only an evaluation, e.g. verl's step 0, is not one)."""
        return [s for s in self._sorted() if len(self.metrics[s]) > 1 or EVAL_ACCURACY not in self.metrics[s]]

    def series(self, name: str) -> list[tuple[int, float]]:
        metrics = self.metrics
        return [(s, metrics[s][name]) for s in self._sorted() if name in metrics[s]]

    def _sorted(self) -> list[int]:
        """The logged steps in order, sorted again only when steps came or went since."""
        if self._order is None or self._order[0] != len(self.metrics):
            self._order = (len(self.metrics), sorted(self.metrics))
        return self._order[1]

    def finite_series(self, name: str) -> list[tuple[int, float]]:
        """The series without its NaN and infinite values (the anomalies that read them judge those apart)."""
        return [(s, v) for s, v in self.series(name) if math.isfinite(v)]

    def put(self, step: int, name: str, value: float) -> None:
        self.metrics.setdefault(step, {})[name] = value

    def renumber(self, old: int, new: int) -> None:
        """The step read as `old` was step `new` (a log copied from mid-run, whose steps were counted from 1
        until a progress bar said which they were)."""
        self.metrics[new] = self.metrics.pop(old)
        if old in self.evidence_by_step:
            self.evidence_by_step[new] = self.evidence_by_step.pop(old)
        self._order = None

    def restart(self, mark: Mark) -> None:
        """The run restarted at `mark.step`: the steps and marks from there on belonged to an earlier
        attempt (its bad steps must not judge the attempt now running) and move to `earlier`."""
        gone = {s: self.metrics.pop(s) for s in [s for s in self.metrics if s >= mark.step]}
        self._order = None
        marks = [m for m in self.marks if m.step >= mark.step and m.kind != "restart"]
        self.finished = False  # an earlier attempt's end (or another trainer's in the same log) is not this one's
        if gone or marks:
            self.earlier.append((mark.step, gone, marks))
            self.marks = [m for m in self.marks if not (m.step >= mark.step and m.kind != "restart")]
            for s in gone:
                self.evidence_by_step.pop(s, None)
        self.marks.append(mark)


@dataclass(frozen=True)
class Anomaly:
    step: int
    kind: str  # reward_collapse, reward_zero, zero_variance, loss_zero, failures, nonfinite, restart, ...
    detail: str
    evidence: Evidence | None = None
    from_event: bool = False  # read from an event (a trip, a log line), not from the step's metrics


@dataclass
class Diagnosis:
    source: str
    status: str  # healthy | problem
    cause: str
    first_bad_step: int | None
    explanation: str
    evidence: list[Evidence]
    last_good_checkpoint: str | None
    resume: str | None
    timeline: list[Anomaly]
    history: list[str] = field(default_factory=list)  # earlier attempts' problems (a run restarted since)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "status": self.status, "cause": self.cause, "first_bad_step": self.first_bad_step,
            "explanation": self.explanation, "evidence": [asdict(e) for e in self.evidence],
            "last_good_checkpoint": self.last_good_checkpoint, "resume": self.resume,
            "timeline": [{"step": a.step, "kind": a.kind, "detail": a.detail} for a in self.timeline],
            "history": list(self.history),
        }
