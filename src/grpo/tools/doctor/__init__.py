"""`grpo doctor PATH`: explain a GRPO run after the fact, from the files it left behind, whatever
trained it: a grpo run directory, an AReaL `trainer.log` (with `llm_server.log` beside it), a verl
console log, a TRL output directory or console log, an Open-Reasoner-Zero or prime-rl console log, any
other framework's console log whose lines show steps and their metrics (`generic`), the TensorBoard event
files or wandb run directory any of them logged to, or a metrics file (`metricfiles`: a CSV with a step column,
wandb's chart export, TensorBoard's Download CSV, JSON lines such as verl's file logger's). A compressed log or
metrics file (`.gz`, `.bz2`, `.xz`, a `.zip` of one) is read as what it holds (`compressed`).

Each source has its reader (`grpo_run`, `areal`, `verl`, `trl`, `orz`, `primerl`, `tensorboard`, `wandb_run`,
`metricfiles`) that turns its files into one `RunRecord`; `timeline` finds every anomaly with its first step, and
`cause` decides what went wrong, infrastructure before the model. It only reads, and never crashes on what it
reads: a path it cannot read at all is an `UnreadableRun` (one line, exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo.tools.doctor import (
    areal,
    cause,
    grpo_run,
    logreader,
    metricfiles,
    orz,
    primerl,
    scalars,
    tensorboard,
    timeline,
    trl,
    verl,
    wandb_run,
)
from grpo.tools.doctor.record import Diagnosis, RunRecord, UnreadableRun
from grpo.tools.doctor.textlog import iter_lines

__all__ = ["Diagnosis", "RunRecord", "UnreadableRun", "diagnose", "examine", "explain", "judge", "read", "render"]


def read(path: Path) -> RunRecord:
    """The run at `path`, by whichever reader recognises it."""
    path = Path(path)
    try:
        return _read(path)
    except PermissionError as exc:
        raise UnreadableRun(f"{exc.filename or path} cannot be read (permission denied)") from None
    except OSError as exc:
        raise UnreadableRun(f"{exc.filename or path} cannot be read ({exc.strerror or exc})") from None


def _read(path: Path) -> RunRecord:
    if not path.exists():
        raise UnreadableRun(f"{path} does not exist")
    if grpo_run.is_run_dir(path):
        return grpo_run.read_record(path)
    run = wandb_run.find_run(path)
    if run is not None:
        return _wandb(run)
    if tensorboard.is_event_file(path):
        return tensorboard.read_record(path, [path])
    if metricfiles.is_metrics_file(path):
        return metricfiles.read_record(path)
    record = _read_logs(path)
    if record is not None and (record.steps() or not path.is_dir()):
        return record
    # A directory whose console log shows no step (its logger wrote them elsewhere), or that holds no log at all:
    # the metrics its TensorBoard, wandb or file logger wrote beside it.
    logged = _logged_in(path)
    if logged is not None:
        return scalars.merge(record, logged, str(path)) if record is not None else logged
    if record is not None:
        return record
    raise UnreadableRun(f"{path} is not a run directory or log the doctor knows: {KNOWN}")


def _read_logs(path: Path) -> RunRecord | None:
    """The run at `path` as its console log or TRL output directory shows it, or None."""
    log = areal.find_trainer_log(path)
    if log is not None:
        return areal.read_record(log)
    root = trl.find_root(path)
    if root is not None:
        return _with_events(trl.read_record(root), root)
    log = verl.find_log(path)
    if log is not None:
        return verl.read_record(log)
    log = trl.find_log(path)
    if log is not None:
        return trl.read_log_record(log)
    found = logreader.find_console_log(path)
    if found is not None:
        log, source = found
        if source == "areal":
            return areal.read_record(log)
        return console_reader(log, source).feed_all(iter_lines(log)).result()
    return None


def _wandb(run: Path) -> RunRecord:
    """A wandb run: its history, with the crashes and end its captured console (files/output.log) shows."""
    logged = wandb_run.read_record(run)
    console = _read_logs(run / wandb_run.CONSOLE) if (run / wandb_run.CONSOLE).is_file() else None
    return scalars.merge(console, logged, str(run)) if console is not None else logged


def _with_events(record: RunRecord, root: Path) -> RunRecord:
    """A TRL output directory's record, with the steps its TensorBoard logger wrote to runs/ (every logged step;
    trainer_state.json holds those up to the last checkpoint)."""
    files = tensorboard.find_event_files(root / "runs") if (root / "runs").is_dir() else []
    if not files:
        return record
    try:
        return scalars.merge(record, tensorboard.read_record(root / "runs", files), str(root))
    except UnreadableRun as exc:
        record.notes.append(f"{exc}: its checkpoints' trainer_state.json read instead")
        return record


def _logged_in(folder: Path) -> RunRecord | None:
    """The run's metrics as its TensorBoard logger (event files under `folder`), its wandb logger (the latest
    run in `folder`/wandb) or a file logger (metrics files in `folder`: CSV, JSON lines) wrote them, or None."""
    if not folder.is_dir():
        return None
    files = tensorboard.find_event_files(folder)
    if files:
        return tensorboard.read_record(folder, files)
    run = wandb_run.find_run(folder / "wandb") if (folder / "wandb").is_dir() else None
    if run is not None:
        return wandb_run.read_record(run)
    files = metricfiles.find(folder)
    return metricfiles.read_record(folder, files) if files else None


READERS = {"verl": verl.VerlReader, "trl": trl.TrlLogReader, orz.SOURCE: orz.OrzReader,
           primerl.SOURCE: primerl.PrimeRlReader}


def console_reader(log: Path, source: str) -> logreader.LogReader:
    """The reader of a log that named its framework before showing a step: that framework's, which takes
    the steps when they come; any other framework's log is read by the console reader (its crash, and its
    steps in any shape `generic` reads)."""
    return READERS[source](log) if source in READERS else logreader.ConsoleReader(log, source)


KNOWN = ("a grpo run directory (config.yaml, metrics.jsonl, events.jsonl or checkpoints/), an AReaL trainer.log, a "
         "verl console log (step:N - key:value lines), a TRL output directory (trainer_state.json, checkpoint-N/) "
         "or a TRL console log ({'loss': ..., 'reward': ...} lines), an Open-Reasoner-Zero or prime-rl console log, "
         "a console log of any framework whose lines show a step and its metrics (step 12 | loss: 0.3 | reward: 0.5), "
         "any of their console logs that ended in a traceback or shows a trainer's client refused or left waiting by "
         "its inference server, a TensorBoard log directory (events.out.tfevents.*), "
         "a wandb run directory (wandb/run-*/, or wandb/ for its latest run), "
         "or a metrics file or a folder of them (a .csv with a step column, wandb's chart export, TensorBoard's "
         "Download CSV, a .jsonl of one object per step); any of these files may be .gz, .bz2, .xz or a .zip of one")


def examine(path: Path) -> tuple[Diagnosis, RunRecord]:
    record = read(path)
    return judge(record), record


def judge(record: RunRecord) -> Diagnosis:
    """The diagnosis of a record, however it was read (`grpo watch` judges a live run's record as it
    grows: `record.running` says its last step is not the run's last)."""
    found = timeline.anomalies(record)
    what, first_bad, explanation, backing = cause.decide(record, found)
    # Logged every N steps, the first bad logged step says only that trouble began after the entry before
    # it: a checkpoint saved in between may already hold bad updates.
    interval = timeline.logging_interval(record)
    checkpoint = cause.last_checkpoint_before(record, None if first_bad is None else first_bad - interval + 1)
    if record.stop_checkpoint and what != "healthy":  # the guard's own choice when it stopped the run
        checkpoint = next((c for c in record.checkpoints if c.path == record.stop_checkpoint), checkpoint)
    diagnosis = Diagnosis(
        source=record.source, status=what if what in ("healthy", "unknown") else "problem", cause=what,
        first_bad_step=first_bad, explanation=explanation, evidence=cause.evidence_of(backing),
        last_good_checkpoint=checkpoint.path if checkpoint else None,
        resume=_resume(record, checkpoint, what), timeline=found, history=_history(record))
    return diagnosis


def _history(record: RunRecord) -> list[str]:
    """What went wrong in the attempts before the last restart: said, never the verdict on the run now."""
    said = []
    for restart_step, metrics, marks in record.earlier:
        attempt = RunRecord(record.source, record.path, metrics={s: v for s, v in record.metrics.items()
                                                                  if s < restart_step} | metrics,
                            marks=marks)  # it ended where the restart cut it off
        found = timeline.anomalies(attempt)
        what, first_bad, explanation, _ = cause.decide(attempt, found)
        if what not in ("healthy", "unknown"):
            said.append(f"an earlier attempt (to step {max(metrics, default=restart_step)}) had {what} from step "
                        f"{first_bad}; the run restarted from step {restart_step}")
    return said


def _resume(record: RunRecord, checkpoint, what: str) -> str | None:
    if record.source == "grpo":
        command = grpo_run.resume_command(Path(record.path), Path(checkpoint.path) if checkpoint else None)
        cleared = [f"testing.faults.{name}={_yaml(getattr(grpo_run.default_faults(), name))}"
                   for name in grpo_run.faults_set(Path(record.path))]
        return " ".join([command, *cleared])
    if checkpoint is None or what == "healthy":
        return None
    if record.source == "verl":
        return f"(verl) add trainer.resume_mode=resume_path trainer.resume_from_path={checkpoint.path}"
    if record.source == "trl":
        return f"(TRL) trainer.train(resume_from_checkpoint={checkpoint.path!r})"
    if record.source == "areal":
        return (f"(AReaL) restart from {checkpoint.path} (the state after step {checkpoint.step}); AReaL's own "
                "recover would resume from its newest recover checkpoint instead")
    return None


def _yaml(value) -> str:
    return json.dumps(value)  # JSON is YAML: [] null 1.0


def _no_good_checkpoint(d: Diagnosis, record: RunRecord) -> str:
    """Why no checkpoint is named: none saved, none healthy, or every healthy one is from the bad step on."""
    healthy = [c for c in record.checkpoints if c.healthy]
    if not record.checkpoints:
        return "none (no checkpoint was saved)"
    if not healthy:
        return f"none ({len(record.checkpoints)} saved, none healthy)"
    return (f"none before step {d.first_bad_step} (the {len(healthy)} healthy checkpoint(s) were saved from that "
            f"step on, e.g. {healthy[0].path})")


def render(diagnosis: Diagnosis, record: RunRecord, details: list[str] | None = None) -> list[str]:
    """The doctor's printed account: the diagnosis first, then the timeline, then (grpo runs) the
    detailed sections."""
    d = diagnosis
    out = [f"{d.source} run {record.path}",
           f"DIAGNOSIS {d.status}" + (f": {d.cause}" if d.cause != "healthy" else "")
           + (f" from step {d.first_bad_step}" if d.first_bad_step is not None else ""),
           f"          {d.explanation}"]
    for e in d.evidence[:6]:
        out.append(f"          evidence {e.file}:{e.line}: {e.text[:160]}")
    out.append(f"          last good checkpoint: {d.last_good_checkpoint or _no_good_checkpoint(d, record)}")
    for line in d.history:
        out.append(f"HISTORY  {line}")
    if d.resume:
        out.append(f"          resume: {d.resume}")
    if d.timeline:
        out.append("TIMELINE " + f"{len(d.timeline)} anomal{'y' if len(d.timeline) == 1 else 'ies'}")
        for a in d.timeline[:30]:
            out.append(f"         step {a.step:>6}  {a.kind:<18} {a.detail[:140]}")
        if len(d.timeline) > 30:
            out.append(f"         ... and {len(d.timeline) - 30} more (--json lists all)")
    else:
        out.append("TIMELINE no anomaly")
    steps = record.steps()
    if record.source != "grpo":
        out.append(f"STEPS    {len(steps)} logged" + (f", {steps[0]}-{steps[-1]}" if steps else "")
                   + (f" of {record.total_steps}" if record.total_steps else ""))
        out.append("CHECKPTS " + (", ".join(f"{c.step}" for c in record.checkpoints[-8:]) or "none found"))
    out += details or []
    for note in record.notes:
        out.append(f"NOTE     {note}")
    return out


def explain(path: Path) -> tuple[Diagnosis, list[str]]:
    """-> (the diagnosis, the printed account of the run at `path`); raises UnreadableRun."""
    diagnosis, record = examine(path)
    try:
        details = grpo_run.details(Path(record.path)) if record.source == "grpo" else None
    except OSError as exc:  # a file of the run directory this user may not open
        raise UnreadableRun(f"{exc.filename or record.path} cannot be read ({exc.strerror or exc})") from None
    return diagnosis, render(diagnosis, record, details)


def diagnose(path: Path) -> list[str]:
    """The printed account of the run at `path` (raises UnreadableRun)."""
    return explain(path)[1]
