"""Metrics as the frameworks log them to TensorBoard and wandb, onto the `RunRecord`.

Each framework logs the same names there as it shows elsewhere, so each is read through its own reader's table:
TRL through `trl.put_entry` (transformers' TensorBoard and wandb callbacks prefix every key with `train/`, or
`eval/` for `eval_`), verl through `verl.metrics_of` (`critic/score/mean`, `actor/pg_loss`, ... as its console
prints them), AReaL through `areal.put_stat` (`grpo_actor/task_reward/avg`, ...). OpenRLHF's names (`train/
reward`, `train/policy_loss`, ...) are here, as no other reader of the doctor's reads them. Any other framework's
names (a metrics file of a trainer the doctor has no reader for, a TensorBoard tag like `train_reward`) are read by
their words, as `generic` reads a console's (`env/all/reward/total` is the reward).

A reader hands over its steps as `Start`s, one per trainer start (an event file, a wandb run): a start that
begins at or before a step already read, or whose own steps go back, resumed the run there, and the steps it
logs again replace the earlier start's (`RunRecord.restart`), as TensorBoard itself shows them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from grpo.tools.doctor import areal, generic, trl, verl
from grpo.tools.doctor.record import (
    CRITIC_LOSS,
    ENTROPY,
    KL,
    LENGTH,
    LOSS,
    REWARD,
    Evidence,
    Mark,
    RunRecord,
    UnreadableRun,
)

_OPENRLHF = {"train/reward": REWARD, "train/policy_loss": LOSS, "train/kl": KL, "train/response_length": LENGTH,
             "train/critic_loss": CRITIC_LOSS, "train/entropy_loss": ENTROPY}
_OPENRLHF_ONLY = ("train/policy_loss", "train/actor_lr")  # TRL logs train/reward and train/kl too
_SHOWN = ("reward", "score", "loss", "grad_norm", "kl")  # what a step's evidence names first
FRAMEWORKS = "TRL's train/reward, verl's critic/score/mean, AReaL's <actor>/task_reward/avg or OpenRLHF's"


@dataclass(frozen=True)
class Row:
    """The values one logging call wrote at one step, and where they are."""

    step: int
    values: dict[str, float]
    evidence: Evidence


@dataclass
class Table:
    """What one metrics file holds (a CSV table, JSON lines): its rows in the file's order, and what its reader says
    about it."""

    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    total_steps: int | None = None  # the run's steps, where the file says them


@dataclass
class Start:
    """What one trainer start logged, in order: one event file, or one wandb run."""

    name: str  # the file
    rows: list[Row] = field(default_factory=list)
    purge_step: int | None = None  # TensorBoard's purge_step: the steps from here on are this start's


def framework_of(tags: set[str]) -> str | None:
    """The framework whose metric names these are, or None."""
    if any(tag in _OPENRLHF_ONLY for tag in tags):
        return "openrlhf"
    if any(verl.knows(tag) for tag in tags):
        return "verl"
    if any(tag.startswith("train/") and trl.knows(tag[len("train/"):]) for tag in tags):
        return "trl"
    if any(areal.knows(tag) for tag in tags):
        return "areal"
    return None


def build(source: str, what: str, path: str, starts: list[Start]) -> RunRecord:
    """The record of the starts' rows, under the framework their names say (`source`, the files' kind, while
    nothing was logged yet or when no framework's names are among them). what: the files, in words."""
    tags = {tag for start in starts for row in start.rows for tag in row.values}
    framework = framework_of(tags)
    if not tags:
        return RunRecord(source, path)
    if framework is None and not generic.known([(tag, 0.0) for tag in tags]):
        shown = ", ".join(sorted(tags)[:8]) or "no scalar"
        raise UnreadableRun(f"{path}: its {what} hold none of a GRPO framework's metric names ({FRAMEWORKS}), "
                            f"only {shown}: give the doctor the run's console log instead")
    record = RunRecord(framework or source, path)
    last: int | None = None
    for start in starts:
        if start.purge_step is not None and last is not None:
            record.restart(Mark(start.purge_step, "restart", f"{start.name} starts again at step {start.purge_step} "
                                "(TensorBoard's purge_step: a resume)", Evidence(start.name, 0, "purge_step")))
        for n, row in enumerate(start.rows):
            if last is not None and (row.step < last or (n == 0 and row.step == last)):
                said = (f"{start.name} starts again at step {row.step} (a resume)" if n == 0 else
                        f"the step count went back from {last} to {row.step}")
                record.restart(Mark(row.step, "restart", said, row.evidence))
            _put(record, framework, row)
            last = row.step
    return record


def _put(record: RunRecord, framework: str | None, row: Row) -> None:
    step, values = row.step, row.values
    if framework == "trl":
        entry = {_trl_key(tag): value for tag, value in values.items()}
        if "train_runtime" in entry:  # the Trainer's last log, after its last step
            record.finished = True
        trl.put_entry(record, step, entry, row.evidence)
        return
    if framework == "verl":
        named, trained = verl.metrics_of(record, values.items())
        for name, value in named.items():
            record.put(step, name, value)
        if trained:
            record.evidence_by_step.setdefault(step, row.evidence)
        return
    if framework == "areal":
        for tag, value in values.items():
            areal.put_stat(record, step, tag, value, row.evidence)
        return
    if framework == "openrlhf":
        named = {_OPENRLHF[tag]: value for tag, value in values.items() if tag in _OPENRLHF}
    else:
        named = generic.known(list(values.items()))
    for name, value in named.items():
        record.put(step, name, value)
    if named:
        record.evidence_by_step.setdefault(step, row.evidence)


def _trl_key(tag: str) -> str:
    """transformers' rewrite_logs undone: train/x -> x, eval/x -> eval_x, test/x -> test_x."""
    head, _, rest = tag.partition("/")
    if head == "train" and rest:
        return rest
    return f"{head}_{rest}" if head in ("eval", "test") and rest else tag


def shown(step: int, values: dict[str, float]) -> str:
    """A step's evidence text: its NaN and infinite values first, then its reward, score, loss, gradient and KL."""
    telling = sorted(values, key=lambda tag: (math.isfinite(values[tag]),
                                              next((i for i, w in enumerate(_SHOWN) if w in tag), len(_SHOWN))))
    return f"step {step}: " + ", ".join(f"{tag} {values[tag]:.6g}" for tag in telling[:6])


def merge(console: RunRecord, logged: RunRecord, path: str) -> RunRecord:
    """The run at `path`: a console log's record (or a TRL output directory's) with the metrics its logger wrote
    to TensorBoard or wandb. The logged steps (exact, every one) replace the console's when they reach at least as
    far; the crashes, marks, checkpoints and end the console shows stay, a crash after its last step placed after
    the logged steps' last."""
    logged_steps, console_steps = logged.steps(), console.steps()
    if not logged_steps:
        return console
    if console_steps and logged_steps[-1] < console_steps[-1]:
        console.notes.append(f"{logged.path} ends at step {logged_steps[-1]}, before {console.path} (step "
                             f"{console_steps[-1]}): its metrics were not used")
        return console
    last_console = console_steps[-1] if console_steps else 0
    record = RunRecord(logged.source if console.source == "log" else console.source, path, metrics=logged.metrics,
                       evidence_by_step=logged.evidence_by_step, checkpoints=console.checkpoints,
                       total_steps=console.total_steps or logged.total_steps,
                       finished=console.finished or logged.finished, console=console.console,
                       notes=console.notes + logged.notes, progress=console.progress, earlier=logged.earlier)
    record.marks = [m for m in console.marks if m.kind not in ("nonfinite", "restart")] + logged.marks
    after = logged_steps[-1] + 1
    record.crashes = [replace(c, step=after) if c.step > last_console and c.step < after else c
                      for c in console.crashes]
    return record
