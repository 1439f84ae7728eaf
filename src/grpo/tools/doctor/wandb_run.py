"""A wandb run directory (`wandb/run-<time>-<id>/`, `wandb/offline-run-<time>-<id>/`), read without wandb.

Its history (every `wandb.log` call) is in `run-<id>.wandb`, wandb's datastore: a 7-byte header (":W&B", 0xBEE1,
version 0), then LevelDB-log blocks of 32 KiB, each a run of chunks (CRC-32 of the chunk's type and data, as
zlib computes it; length, uint16; type: full, or first/middle/last of a record split over blocks), a block's last
bytes zero when no header fits. Each record is a `Record` protobuf (wandb_internal.proto): `history` (2: items
of key or nested_key, and value_json), `summary` (3), `config` (5, and the `run` record's own, 17.4), `exit` (18:
the exit code, left out when 0). Online runs also write `files/wandb-summary.json` and `files/config.yaml`; every
run writes the console it captured to `files/output.log`, which the console readers read (`grpo.tools.doctor`).

The step: TRL and OpenRLHF log `train/global_step` (wandb's own `_step` counts their calls, tables included);
verl and AReaL pass theirs as wandb's `_step`. A torn last chunk (a run still writing, or killed) ends the file; a
chunk whose CRC does not match anywhere else is an `UnreadableRun` naming the file and the byte it starts at.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import yaml

from grpo.tools.doctor.protowire import Message, WireError, double, fields, first, int64, sint64, text
from grpo.tools.doctor.record import Evidence, Mark, RunRecord, UnreadableRun
from grpo.tools.doctor.scalars import Row, Start, build, shown
from grpo.tools.doctor.textlog import as_step, open_regular

RUN_DIR = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-[A-Za-z0-9]+$")
CONSOLE = Path("files") / "output.log"
_HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
_BLOCK = 32 * 1024
_CHUNK = 7  # CRC (4), length (2), type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_STEP_KEYS = ("train/global_step",)  # a framework's own step, where it logs one (TRL, OpenRLHF)


@dataclass
class Logged:
    """What one datastore (and the run's own files) hold, as the doctor needs it."""

    rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # (byte, numbers) per history record
    trained_to_the_end: bool = False  # TRL's train_runtime in the summary: the Trainer's last log came
    total_steps: int | None = None  # the config's (TRL's max_steps, verl's trainer.total_training_steps)
    exit_code: int | None = None  # None: no exit record (still running, or killed before wandb could write one)


def find_run(path: Path) -> Path | None:
    """The run directory `path` names: itself, the one its `.wandb` file is in, or, for a `wandb/` directory of
    runs, its latest (wandb's `latest-run` link, else the newest by the time in its name)."""
    if path.is_file():
        return path.parent if path.suffix == ".wandb" and path.name.startswith("run-") else None
    if not path.is_dir():
        return None
    if datastore(path) is not None or (RUN_DIR.match(path.name) and (path / "files").is_dir()):
        return path
    latest = path / "latest-run"
    if latest.is_dir() and datastore(latest) is not None:
        return latest
    try:
        runs = [p for p in path.iterdir() if RUN_DIR.match(p.name) and p.is_dir()]
    except OSError as exc:
        raise UnreadableRun(f"{path} cannot be listed ({exc.strerror or exc}): check its permissions") from None
    return max(runs, key=lambda p: (RUN_DIR.match(p.name).group(1), p.name), default=None)


def datastore(run: Path) -> Path | None:
    found = sorted(run.glob("run-*.wandb"))
    return found[-1] if found else None


def read_record(run: Path) -> RunRecord:
    store = datastore(run)
    if store is None:
        raise UnreadableRun(f"{run} has no run-*.wandb file, which holds the run's history (its metrics at every "
                            "step): give the doctor the whole run directory")
    logged = read_datastore(store)
    _read_files(run, logged)
    key = next((k for k in _STEP_KEYS if any(k in values for _, values in logged.rows)), "_step")
    start = Start(str(store))
    for offset, values in logged.rows:
        step = as_step(values[key]) if key in values else None
        numbers = {k: v for k, v in values.items() if not k.startswith("_") and k not in _STEP_KEYS}
        if step is not None and numbers:
            start.rows.append(Row(step, numbers, Evidence(str(store), 0, f"byte {offset}: {shown(step, numbers)}")))
    record = build("wandb", "history", str(run), [start])
    record.total_steps = record.total_steps or logged.total_steps
    record.finished = record.finished or logged.trained_to_the_end
    if logged.exit_code:
        last = max(record.metrics, default=0)
        record.marks.append(Mark(last + 1, "crash", f"the process exited with code {logged.exit_code} (wandb's exit "
                                 "record)", Evidence(str(store), 0, f"exit_code: {logged.exit_code}")))
    elif logged.exit_code is None:
        record.notes.append(f"{store.name} has no exit record: the run was still going when it was copied, or its "
                            "process was killed before wandb could finish")
    return record


def read_datastore(store: Path) -> Logged:
    logged = Logged()
    with open_regular(store) as stream:
        block = stream.read(_BLOCK)
        if len(block) < len(_HEADER):
            return logged  # a run that has just begun
        if block[:len(_HEADER)] != _HEADER:
            raise UnreadableRun(f"{store} is not a wandb datastore (it does not begin with :W&B, version 0)")
        for offset, payload in _records(store, stream, block):
            try:
                _take(logged, offset, fields(payload))
            except WireError as exc:
                raise UnreadableRun(f"{store}: the record at byte {offset} is not a wandb Record ({exc})") from None
    return logged


def _records(store: Path, stream, block: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of each whole record, block by block (a chunk never crosses one); stops at a torn last
    chunk. `block`: the first block, already read."""
    base, pos, pending, began = 0, len(_HEADER), bytearray(), None
    while block:
        whole = len(block) == _BLOCK
        if len(block) - pos < _CHUNK:
            if not whole:
                return  # torn inside a chunk's header
            base, pos, block = base + _BLOCK, 0, stream.read(_BLOCK)  # the block's zero trailer
            continue
        crc, length, kind = struct.unpack_from("<IHB", block, pos)
        end = pos + _CHUNK + length
        if crc == 0 and length == 0 and kind == 0:  # the rest of the block zeroed
            base, pos, block = base + _BLOCK, 0, stream.read(_BLOCK)
            continue
        if end > len(block) and not whole:
            return  # torn inside a chunk's data
        at = base + pos
        if end > len(block) or kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            raise UnreadableRun(f"{store}: the chunk at byte {at} is corrupt (its header is not a chunk's): the file "
                                "is damaged there")
        if zlib.crc32(block[pos + 6:end]) != crc:
            raise UnreadableRun(f"{store}: the chunk at byte {at} is corrupt (its CRC does not match): the file is "
                                "damaged there (only a torn last chunk, as a killed writer leaves, is skipped)")
        if (kind in (_FULL, _FIRST)) != (began is None):
            raise UnreadableRun(f"{store}: the chunk at byte {at} is out of order (a record's middle or end without "
                                "its start, or a start inside one): the file is damaged there")
        if began is None:
            began = at
        pending += block[pos + _CHUNK:end]
        if kind in (_FULL, _LAST):
            yield began, bytes(pending)
            pending.clear()
            began = None
        pos = end


def _take(logged: Logged, offset: int, record: Message) -> None:
    if isinstance(first(record, 2), bytes):
        items = fields(first(record, 2)).get(1, [])
        logged.rows.append((offset, {key: number for key, value in map(_item, items)
                                     if (number := _number(value)) is not None}))
    if isinstance(first(record, 3), bytes):
        keys = {key for key, _ in map(_item, fields(first(record, 3)).get(1, []))}
        logged.trained_to_the_end = logged.trained_to_the_end or "train_runtime" in keys
    for config in [first(record, 5)] + [first(fields(run), 4) for run in record.get(17, []) if isinstance(run, bytes)]:
        if isinstance(config, bytes):
            for key, value in map(_item, fields(config).get(1, [])):
                logged.total_steps = _total_steps(key, value) or logged.total_steps
    if isinstance(first(record, 18), bytes):
        logged.exit_code = int64(first(fields(first(record, 18)), 1, 0))


def _item(raw) -> tuple[str, object]:
    """(key, value) of a HistoryItem, SummaryItem or ConfigItem: key (1) or nested_key (2, joined with "."),
    value_json (16; NaN and Infinity as Python's json reads them), or a typed number (5 integer, 6 number)."""
    item = fields(raw) if isinstance(raw, bytes) else {}
    key = text(item, 1) or ".".join(v.decode("utf-8", "replace") for v in item.get(2, []) if isinstance(v, bytes))
    if 6 in item:
        return key, double(first(item, 6))
    if 5 in item:
        return key, sint64(first(item, 5))
    try:
        return key, json.loads(text(item, 16) or "null")
    except (ValueError, RecursionError):  # not JSON, or nested past any metric: not a number the doctor reads
        return key, None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # a table, an image, a histogram, a text
    try:
        return float(value)
    except OverflowError:  # an integer no float holds: not a metric
        return None


def _read_files(run: Path, logged: Logged) -> None:
    """An online run's own files: the summary as the run ended, the config (`key: {value: ...}`)."""
    summary, config = run / "files" / "wandb-summary.json", run / "files" / "config.yaml"
    try:
        if summary.is_file():
            found = json.loads(summary.read_text(errors="replace"))
            logged.trained_to_the_end |= isinstance(found, dict) and "train_runtime" in found
        if config.is_file() and logged.total_steps is None:
            found = yaml.safe_load(config.read_text(errors="replace"))
            for key, entry in (found.items() if isinstance(found, dict) else ()):
                value = entry.get("value") if isinstance(entry, dict) else None
                logged.total_steps = logged.total_steps or _total_steps(key, value)
    except (ValueError, yaml.YAMLError) as exc:
        raise UnreadableRun(f"{run}/files holds a torn summary or config ({type(exc).__name__}): remove it (the "
                            f"datastore holds the same)") from None


def _total_steps(key: str, value: object) -> int | None:
    """The total steps a config entry names: TRL's max_steps, verl's trainer.total_training_steps."""
    if key == "trainer" and isinstance(value, dict):
        key, value = "trainer.total_training_steps", value.get("total_training_steps")
    if key not in ("max_steps", "trainer.total_training_steps"):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return as_step(value)
