"""The metrics files a run's logger wrote or a user exported, read as the run's record: CSV tables (`csvtable`: a
trainer's own, wandb's chart export or run history, TensorBoard's Download CSV) and JSON (`jsonl`: verl's file
logger, tinker-cookbook's and prime-rl's metrics.jsonl), compressed or not (`compressed`).

Given one file, it is read. Given a folder, its metrics files (`*.csv`, `*.tsv`, `*.jsonl`, and those compressed)
are found by their names and read as one run's: their rows joined by step (wandb's chart exports, one metric a
file; a trainer's and an orchestrator's JSONL), a file that holds no step skipped and said. Their metric names are
read by `scalars`, as TensorBoard's and wandb's are: a framework's where they are one's, else by their words.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grpo.tools.doctor import csvtable, jsonl, trl
from grpo.tools.doctor.record import RunRecord, UnreadableRun
from grpo.tools.doctor.scalars import Row, Start, Table, build, shown
from grpo.tools.doctor.textlog import log_suffix

_READERS = {".csv": csvtable.read, ".tsv": csvtable.read, ".jsonl": jsonl.read, ".json": jsonl.read}
IN_FOLDERS = (".csv", ".tsv", ".jsonl")  # a folder's .json files are configs and summaries, not steps


def is_metrics_file(path: Path) -> bool:
    """A file the doctor reads as metrics by its name (TRL's trainer_state.json has a reader of its own)."""
    return path.name != trl.STATE and _kind(path) in _READERS and path.is_file()


def find(folder: Path) -> list[Path]:
    """The metrics files directly in `folder`, in name order."""
    try:
        return sorted(p for p in folder.iterdir() if _kind(p) in IN_FOLDERS and p.is_file())
    except OSError as exc:
        raise UnreadableRun(f"{folder} cannot be listed ({exc.strerror or exc}): check its permissions") from None


def read_record(path: Path, files: list[Path] | None = None) -> RunRecord:
    """The run whose metrics these files hold (`path`: what the user named; files: a folder's, else the file)."""
    tables, skipped = [], []
    for file in files or [path]:
        try:
            tables.append((file, _READERS[_kind(file)](file)))
        except UnreadableRun as exc:
            if files is None or len(files) == 1:
                raise
            skipped.append(str(exc))
    tables = [(file, table) for file, table in tables if table.rows]
    if not tables:
        raise UnreadableRun(skipped[0] if skipped else f"{path} holds no step's metrics")
    kinds = {_kind(file) for file, _ in tables}
    source = "jsonl" if kinds <= {".jsonl", ".json"} else "csv" if kinds <= {".csv", ".tsv"} else "metrics"
    record = build(source, "keys" if source == "jsonl" else "columns", str(path), [_start(path, tables)])
    record.total_steps = max((table.total_steps for _, table in tables if table.total_steps), default=None)
    record.console = True  # written a row a step, it ends where the run's logging ended, as a console log does
    record.notes += [note for _, table in tables for note in table.notes]
    record.notes += [f"skipped, as not a run's steps: {why}" for why in skipped]
    return record


def _start(path: Path, tables: list[tuple[Path, Table]]) -> Start:
    """One file's rows as it wrote them (a resume's step going back is seen), or several files' joined by step."""
    if len(tables) == 1:
        file, table = tables[0]
        return Start(str(file), table.rows)
    joined: dict[int, Row] = {}
    for _, table in tables:
        for row in table.rows:
            held = joined.get(row.step)
            if held is None:
                joined[row.step] = row
            else:
                values = held.values | row.values
                joined[row.step] = Row(row.step, values, replace(held.evidence, text=shown(row.step, values)))
    return Start(str(path), [joined[step] for step in sorted(joined)])


def _kind(path: Path) -> str:
    return log_suffix(path).lower()
