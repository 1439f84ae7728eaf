"""TensorBoard event files (`events.out.tfevents.*`), read without TensorBoard: TFRecord framing (`grpo.tfrecord`)
around `Event` protobufs (tensorboard/compat/proto/event.proto), decoded with `protowire`.

An Event holds its `wall_time` (1, double), its `step` (2, int64), a `summary` (5) of `value`s (1), each a `tag`
(1) and either a `simple_value` (2, float: SummaryWriter.add_scalar's default) or a scalar `tensor` (8: tf.summary
and add_scalar(new_style=True)), and a `session_log` (7) whose START at a step is TensorBoard's purge_step (the
steps from there on are the new start's). Texts, histograms and images are skipped.

Where they are: TRL writes one directory per trainer start under its output directory's `runs/` (or one file per
start into its `logging_dir`), verl into `tensorboard_log/<project>/<experiment>/`, OpenRLHF into
`<use_tensorboard>/<run name>/`. Every event file under the path is read, each a start of the run, in the order
they began (their first event's time): a resume's file takes over from the step it starts at.

A torn last record (a writer killed mid-record, or one still writing) ends its file; a record whose CRC does not
match anywhere else is an `UnreadableRun` naming the file and the byte it starts at.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from grpo.tfrecord import CorruptRecord, records
from grpo.tools.doctor.protowire import Message, WireError, double, fields, first, float32, int64, text, varints
from grpo.tools.doctor.record import Evidence, RunRecord, UnreadableRun
from grpo.tools.doctor.scalars import Row, Start, build, shown
from grpo.tools.doctor.textlog import open_regular

PREFIX = "events.out.tfevents."
MAX_DEPTH = 4  # tensorboard_log/<project>/<experiment>/ under the directory a run was started from, and one more
_SKIPPED = ("checkpoint-", "global_step", ".")  # checkpoints hold weights, not event files
_START = 1  # SessionLog.SessionStatus.START
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_HALF = 1, 2, 3, 9, 19


def is_event_file(path: Path) -> bool:
    return path.name.startswith(PREFIX)


def find_event_files(path: Path) -> list[Path]:
    """The event files at `path`: the file itself, or every one in the directory and its folders (down to
    MAX_DEPTH), in path order."""
    if path.is_file():
        return [path] if is_event_file(path) else []
    found = []
    base = len(path.parts)
    for folder, dirnames, filenames in os.walk(path, onerror=lambda exc: None):
        depth = len(Path(folder).parts) - base
        dirnames[:] = [] if depth >= MAX_DEPTH else sorted(d for d in dirnames if not d.startswith(_SKIPPED))
        found += [Path(folder) / name for name in filenames if name.startswith(PREFIX)]
    return sorted(found)


def read_record(path: Path, files: list[Path]) -> RunRecord:
    """The run whose event files these are (`path`: what the user named)."""
    starts = sorted((read_file(file) for file in files), key=lambda started: (started[0], started[1].name))
    record = build("tensorboard", "event files", str(path), [start for _, start in starts])
    folders = sorted({str(file.parent) for file in files})
    if len(folders) > 1:
        record.notes.append(f"{len(folders)} TensorBoard directories under {path} were read as one run's starts, "
                            f"in the order they began: {', '.join(folders[:4])}" + (" ..." if len(folders) > 4 else ""))
    return record


def read_file(path: Path) -> tuple[float, Start]:
    """(the time its first event was written, what it logged)."""
    start = Start(str(path))
    began: float | None = None
    pending: tuple[int, int, dict[str, float]] | None = None  # (step, offset, values) of the row being read
    offset = 0
    with open_regular(path) as stream:
        try:
            for offset, data in records(stream):
                event = fields(data)
                began = double(first(event, 1)) if began is None and 1 in event else began
                step = int64(first(event, 2, 0))
                if _session_start(event) and step > 0 and not start.rows and pending is None:
                    start.purge_step = step
                for tag, value in _scalars(event):
                    if pending is not None and pending[0] != step:
                        start.rows.append(_row(path, *pending))
                        pending = None
                    pending = pending or (step, offset, {})
                    pending[2][tag] = value
        except CorruptRecord as exc:
            raise UnreadableRun(f"{path}: {exc}: the file is damaged there (only a torn last record, as a killed "
                                "writer leaves, is skipped)") from None
        except WireError as exc:
            raise UnreadableRun(f"{path}: the record at byte {offset} is not a TensorBoard event ({exc}): is it an "
                                "event file?") from None
    if pending is not None:
        start.rows.append(_row(path, *pending))
    return (began if began is not None else 0.0), start


def _row(path: Path, step: int, offset: int, values: dict[str, float]) -> Row:
    return Row(step, values, Evidence(str(path), 0, f"byte {offset}: {shown(step, values)}"))


def _session_start(event: Message) -> bool:
    log = first(event, 7)
    return isinstance(log, bytes) and first(fields(log), 1, 0) == _START


def _scalars(event: Message) -> list[tuple[str, float]]:
    summary = first(event, 5)
    if not isinstance(summary, bytes):
        return []
    found = []
    for raw in fields(summary).get(1, []):
        value = fields(raw) if isinstance(raw, bytes) else {}
        tag = text(value, 1) or text(value, 7)  # tag, or a TF1 summary's node_name
        if 2 in value:
            found.append((tag, float32(first(value, 2))))
        elif isinstance(first(value, 8), bytes):
            number = _tensor_scalar(fields(first(value, 8)))
            if number is not None:
                found.append((tag, number))
    return found


def _tensor_scalar(tensor: Message) -> float | None:
    """A TensorProto's one number, when it holds one number (shape [] or all ones) of a numeric type."""
    shape = first(tensor, 2, b"")
    dims = fields(shape).get(2, []) if isinstance(shape, bytes) else []
    if any(int64(first(fields(dim), 1, 0)) != 1 for dim in dims if isinstance(dim, bytes)):
        return None
    dtype, content = first(tensor, 1, 0), first(tensor, 4, b"")
    if not isinstance(content, bytes):
        return None
    if dtype in (_DT_FLOAT, _DT_DOUBLE):
        size, fmt, repeated = (4, "<f", 5) if dtype == _DT_FLOAT else (8, "<d", 6)
        raw = content or b"".join(v for v in tensor.get(repeated, []) if isinstance(v, bytes))
        return struct.unpack(fmt, raw)[0] if len(raw) == size else None
    if dtype in (_DT_INT32, _DT_INT64):
        if content:
            return float(int.from_bytes(content, "little", signed=True)) if len(content) in (4, 8) else None
        numbers = varints(tensor.get(7 if dtype == _DT_INT32 else 10, []))
        return float(int64(numbers[0])) if len(numbers) == 1 else None
    if dtype == _DT_HALF:
        bits = content or b"".join((n & 0xFFFF).to_bytes(2, "little") for n in varints(tensor.get(13, [])))
        return struct.unpack("<e", bits)[0] if len(bits) == 2 else None
    return None
