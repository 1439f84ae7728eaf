"""A run's metrics as a CSV table, one row a step, in the shapes users hand over:

- a trainer's own CSV, or a wandb run's history saved with pandas (`run.history().to_csv(...)`, its unnamed
  index column first): a step column and a column per metric;
- wandb's chart "Export CSV": the chart's x axis (`Step`, or the metric it was set to, `train/global_step`), then
  for each run drawn `<run> - <metric>` with its band `<run> - <metric>__MIN` and `__MAX` (a band is not a metric);
  of several runs in one chart the one with the most values is read, and the others are named;
- TensorBoard's "Download CSV": `Wall time,Step,Value`, one file per scalar, its tag in the file's name
  (`run-<run>-tag-train_reward.csv`: TensorBoard writes the tag's `/` as `_`).

The step is a framework's own count where the table has one (`train/global_step`, which TRL logs beside wandb's
`_step` that counts its calls), else `step`, `iteration` or wandb's `_step`. Columns of wandb's own (`_runtime`,
`_timestamp`) and wall times are not metrics, and a cell that is not a number (an empty cell of a metric not
logged at that step, a phase's name) is skipped. A table without a step column is an `UnreadableRun` that says what
to give instead.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from grpo.tools.doctor import compressed
from grpo.tools.doctor.record import Evidence, UnreadableRun
from grpo.tools.doctor.scalars import Row, Table, shown
from grpo.tools.doctor.textlog import as_step, iter_lines

# Step columns, the run's own count first (names compared lower-cased).
STEP_COLUMNS = ("train/global_step", "trainer/global_step", "training/global_step", "global_step", "step", "steps",
                "iteration", "iter", "_step")
_TENSORBOARD = ["wall time", "step", "value"]
_WALL_TIMES = frozenset({"wall time", "wall_time", "walltime", "timestamp", "time", "relative time (process)",
                         "relative time (wall)"})
_BAND = re.compile(r"__(?:MIN|MAX)$")
_RUN_METRIC = " - "  # wandb's chart export: "<run> - <metric>"
_TAG = re.compile(r"-tag-(.+)$")


@dataclass(frozen=True)
class _Column:
    at: int
    run: str  # the run a wandb chart export's column is of ("" elsewhere)
    name: str


def read(path: Path) -> Table:
    lines = _lines(path)
    leading = []  # the lines up to the header, the first that is not empty
    for line in lines:
        leading.append(line)
        if line.strip():
            break
    else:
        raise UnreadableRun(f"{path} is empty: give the doctor the run's metrics (a CSV with a step column) or its log")
    delimiter = "\t" if "\t" in leading[-1] and "," not in leading[-1] else ","
    reader = csv.reader(itertools.chain(leading, lines), delimiter=delimiter)
    try:
        return _table(path, reader)
    except csv.Error as exc:  # a quote never closed swallows the lines after it until a cell is too long
        raise UnreadableRun(f"{path} is not a CSV the doctor can read past line {reader.line_num} ({exc}): give it "
                            "as the trainer or the export wrote it") from None


def _table(path: Path, reader) -> Table:
    header = next(cells for cells in reader if cells)
    step_at, columns = _columns(path, [cell.strip() for cell in header])
    by_run: dict[str, list[Row]] = {}
    for cells in reader:
        step = _step(cells[step_at]) if len(cells) > step_at else None
        if step is None:
            continue
        values: dict[str, dict[str, float]] = {}
        for column in columns:
            number = _number(cells[column.at]) if column.at < len(cells) else None
            if number is not None:
                values.setdefault(column.run, {})[column.name] = number
        for run, numbers in values.items():
            by_run.setdefault(run, []).append(Row(step, numbers, Evidence(str(path), reader.line_num,
                                                                          shown(step, numbers))))
    if len(by_run) <= 1:
        return Table(next(iter(by_run.values()), []))
    chosen = max(by_run, key=lambda run: sum(len(row.values) for row in by_run[run]))
    others = ", ".join(run for run in by_run if run != chosen)
    return Table(by_run[chosen], [f"{path} is a chart export of {len(by_run)} runs: {chosen} was read (it has the "
                                  f"most values), not {others}; export one run's chart to read another"])


def _lines(path: Path) -> Iterator[str]:
    """The file's lines (one a row: the reader counts them as editors do), without a spreadsheet's byte-order mark
    or Windows line ends."""
    for number, line in enumerate(iter_lines(path)):
        line = line.rstrip("\r")
        yield line.lstrip("\ufeff") if number == 0 else line


def _columns(path: Path, header: list[str]) -> tuple[int, list[_Column]]:
    """(the step column, the metric columns) of a header."""
    lower = [cell.lower() for cell in header]
    if lower == _TENSORBOARD:
        stem = Path(compressed.inner_name(path)).stem
        tag = _TAG.search(stem)
        return 1, [_Column(2, "", tag.group(1) if tag else stem)]
    step_at = next((lower.index(name) for name in STEP_COLUMNS if name in lower), None)
    if step_at is None:
        shown_cells = ", ".join(header[:6]) + (" ..." if len(header) > 6 else "")
        raise UnreadableRun(f"{path} has no step column (its columns: {shown_cells}): give a CSV whose rows are steps, "
                            "with a column step, global_step, iteration or _step (a wandb chart exported with Step "
                            "as its x axis, TensorBoard's Download CSV)")
    named = [(at, cell) for at, cell in enumerate(header) if at != step_at and cell]
    panel = bool(named) and all(_RUN_METRIC in cell for _, cell in named)
    columns = []
    for at, cell in named:
        run, name = cell.rsplit(_RUN_METRIC, 1) if panel else ("", cell)
        if _BAND.search(name) or name.startswith("_") or name.lower() in _WALL_TIMES:
            continue
        columns.append(_Column(at, run, name))
    return step_at, columns


def _step(cell: str) -> int | None:
    number = _number(cell)
    if number is None or not math.isfinite(number) or number != int(number):
        return None
    return as_step(number)


def _number(cell: str) -> float | None:
    """A cell's number (`0.5`, `1e-3`, `nan`, `inf`), or None for an empty cell or text."""
    cell = cell.strip()
    if not cell or not (cell[0].isdigit() or cell[0] in "+-.nNiI"):
        return None
    try:
        return float(cell)
    except (ValueError, OverflowError):
        return None
