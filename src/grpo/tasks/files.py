"""Reading a split's rows from JSONL, JSON, Parquet or CSV files, or from a `datasets` dataset on the hub.

Every row keeps where it came from (`FILE:LINE`, `FILE row N`), so a bad value is reported at its place.
"""

from __future__ import annotations

import csv
import glob
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.errors import ConfigError

FORMATS = (".jsonl", ".json", ".parquet", ".csv")
# Open-Reasoner-Zero's rows are arrays ([{"from": "human", ...}, {"from": "assistant", ...}]); pandas reads them so.
ARRAY_ROWS = "rows that are JSON arrays read item i as column i"


@dataclass
class Table:
    source: str  # what was read: a file, files joined by ", ", or hub:NAME[:CONFIG] with its split
    columns: list[str] = field(default_factory=list)  # every column, in first-seen order
    rows: list[dict[str, Any]] = field(default_factory=list)  # each row has every column (None where absent)
    where: list[str] = field(default_factory=list)  # per row: FILE:LINE (JSONL, CSV) or FILE row N (JSON, Parquet)
    notes: list[str] = field(default_factory=list)  # how rows were read where it is not plain, said once at load

    def add(self, row: dict[str, Any], where: str) -> None:
        for key in row:
            if key not in self.columns:
                self.columns.append(key)
        self.rows.append(row)
        self.where.append(where)

    def fill_missing(self) -> None:
        """JSONL lines may leave keys out; a reward function still gets one value per row for every column."""
        for row in self.rows:
            for key in self.columns:
                row.setdefault(key, None)


def _add_json_row(row: Any, where: str, table: Table) -> None:
    if isinstance(row, list):
        row = {str(i): item for i, item in enumerate(row)}
        if ARRAY_ROWS not in table.notes:
            table.notes.append(ARRAY_ROWS)
    elif not isinstance(row, dict):
        raise ConfigError(f"{where}: each row must be a JSON object of columns (or an array, read as columns 0, 1, "
                          f"...), got {type(row).__name__}")
    table.add(row, where)


def _read_jsonl(path: Path, table: Table) -> None:
    with path.open(encoding="utf-8") as f:
        try:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{line_no}: not valid JSON ({exc})") from exc
                _add_json_row(row, f"{path}:{line_no}", table)
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc


def _read_json_file(path: Path, table: Table) -> None:
    """One JSON array of rows (Open-Reasoner-Zero's, json.dump's), or JSON Lines: what `datasets`' to_json writes
    under a .json name."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc
    if not text.lstrip().startswith("["):
        _read_jsonl(path, table)
        return
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # a complete array, then more: JSON Lines whose rows are arrays
            _read_jsonl(path, table)
            return
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    for i, row in enumerate(rows, 1):
        _add_json_row(row, f"{path} row {i}", table)


def _read_csv(path: Path, table: Table) -> None:
    with path.open(encoding="utf-8", newline="") as f:
        try:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            duplicated = sorted({name for name in header if header.count(name) > 1})
            if duplicated:
                raise ConfigError(f"{path}:1: the header names {', '.join(map(repr, duplicated))} more than once")
            table.columns.extend(name for name in header if name not in table.columns)
            start = reader.line_num + 1
            for row in reader:
                if None in row:  # DictReader puts fields beyond the header under None
                    raise ConfigError(f"{path}:{start}: {len(header) + len(row[None])} fields but the header names "
                                      f"{len(header)}")
                table.add(row, f"{path}:{start}")
                start = reader.line_num + 1
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc
        except csv.Error as exc:
            raise ConfigError(f"{path}:{reader.line_num}: not valid CSV ({exc})") from exc


def _read_parquet(path: Path, table: Table) -> None:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigError(f"{path}: reading Parquet needs pyarrow: pip install 'grpo[data]'") from exc
    try:
        parquet = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types (ArrowInvalid, OSError) for a file it cannot read
        raise ConfigError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0] if str(exc) else exc!r})"
                          ) from exc
    table.columns.extend(name for name in parquet.column_names if name not in table.columns)
    for i, row in enumerate(parquet.to_pylist(), 1):
        table.add(row, f"{path} row {i}")


def _read_arrow(path: Path, table: Table) -> None:
    """An Arrow stream, as `datasets`' save_to_disk writes each shard."""
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise ConfigError(f"{path}: reading a folder written by datasets' save_to_disk needs pyarrow: "
                          "pip install 'grpo[data]'") from exc
    try:
        with pa.memory_map(str(path)) as source:
            arrow = pa.ipc.open_stream(source).read_all()
    except Exception as exc:  # ArrowInvalid, OSError: a shard it cannot read
        raise ConfigError(f"{path}: not a readable Arrow file ({str(exc).splitlines()[0] if str(exc) else exc!r})"
                          ) from exc
    table.columns.extend(name for name in arrow.column_names if name not in table.columns)
    for i, row in enumerate(arrow.to_pylist(), 1):
        table.add(row, f"{path} row {i}")


_READERS = {".jsonl": _read_jsonl, ".json": _read_json_file, ".csv": _read_csv, ".parquet": _read_parquet,
            ".arrow": _read_arrow}
DATASET_DICT = "dataset_dict.json"  # what datasets' DatasetDict.save_to_disk writes beside its split folders
DATASET_STATE = "state.json"  # what Dataset.save_to_disk writes beside its Arrow shards


def read_files(paths: list[Path]) -> Table:
    """The rows of `paths`, in order, as one table."""
    table = Table(source=", ".join(map(str, paths)))
    for path in paths:
        _READERS[path.suffix](path, table)
    table.fill_missing()
    return table


def expand_files(patterns: list[str], key: str) -> list[Path]:
    """Files named by `key` (e.g. task.train_files): paths or glob patterns, relative to the working directory."""
    paths: list[Path] = []
    for pattern in patterns:
        pattern = str(Path(pattern).expanduser())
        if any(ch in pattern for ch in "*?["):
            matches = sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_file())
            if not matches:
                raise ConfigError(f"{key}: {pattern} matches no file")
            paths.extend(matches)
        elif not Path(pattern).is_file():
            raise ConfigError(f"{key}: no file {Path(pattern).resolve()}")
        else:
            paths.append(Path(pattern))
    unsupported = [p for p in paths if p.suffix not in FORMATS]
    if unsupported:
        raise ConfigError(f"{key}: {unsupported[0]} is not a supported file; use {', '.join(FORMATS)}")
    return paths


def split_files(directory: Path, split: str, key: str) -> list[Path]:
    """A split's files in `directory` (or its `data/`, as the hub lays datasets out): `SPLIT.EXT`, or shards
    `SPLIT-*.EXT` in name order; or the Arrow shards of a folder `datasets`' save_to_disk wrote."""
    if not directory.is_dir():
        raise ConfigError(f"task.path: no directory {directory.resolve()}; set it to a directory with {split}.jsonl, "
                          f"{split}.parquet or {split}.csv")
    saved = _saved_dataset_files(directory, split, key)
    if saved is not None:
        return saved
    for folder in (directory, directory / "data"):
        found = sorted(p for p in folder.glob(f"{split}*") if p.is_file() and p.suffix in FORMATS
                       and (p.stem == split or p.name.startswith(f"{split}-")))
        if found:
            return found
    raise ConfigError(f"no {split} split in {directory.resolve()}: expected {split}.jsonl, {split}.json, "
                      f"{split}.parquet, {split}.csv or shards {split}-*.parquet there or in data/ (or set {key}"
                      + (", or task.held_out=N: N problems drawn out of the training data" if key == "task.test_files"
                         else "") + ")")


def _saved_dataset_files(directory: Path, split: str, key: str) -> list[Path] | None:
    """`split`'s Arrow shards in a folder written by save_to_disk: a DatasetDict's split, or a plain Dataset,
    which has no splits, read as the training split. None: not such a folder. `key`: task.train_files or
    task.test_files, the role of `split`."""
    split_key = key.replace("_files", "_split")
    if (directory / DATASET_DICT).is_file():
        splits = _read_json(directory / DATASET_DICT).get("splits") or []
        if split not in splits:
            raise ConfigError(f"task.path={directory} is a datasets DatasetDict (save_to_disk) with the splits "
                              f"{', '.join(map(repr, splits)) or 'none'} and no {split!r}: set {split_key} to one "
                              f"of them, or give {key}")
        return _saved_shards(directory / split)
    if _is_saved_dataset(directory):
        if key != "task.train_files":
            raise ConfigError(f"task.path={directory} is a datasets Dataset (save_to_disk), which has no splits: it is "
                              f"read as the training split, and has no held-out {split!r} split; save a DatasetDict "
                              f"with one, or give {key}")
        return _saved_shards(directory)
    return None


def _saved_shards(folder: Path) -> list[Path]:
    shards = [folder / entry["filename"] for entry in _read_json(folder / DATASET_STATE).get("_data_files") or []]
    missing = [p for p in shards if not p.is_file()]
    if not shards or missing:
        raise ConfigError(f"{folder} was written by datasets' save_to_disk, but its {DATASET_STATE} names "
                          + (f"{missing[0].name}, which is not there" if missing else "no data files"))
    return shards


def _is_saved_dataset(directory: Path) -> bool:
    """A plain Dataset's folder: its state.json lists its shards (a state.json of anything else does not)."""
    try:
        return isinstance(state := json.loads((directory / DATASET_STATE).read_text()), dict) and "_data_files" in state
    except (OSError, ValueError):
        return False


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def read_hub(spec: str, split: str) -> Table:
    """`spec` is `hub:ORG/NAME` or `hub:ORG/NAME:CONFIG`; needs the `datasets` package and the network."""
    name, _, config = spec.removeprefix("hub:").partition(":")
    if not name:
        raise ConfigError(f"task.path={spec!r} names no dataset; use hub:ORG/NAME or hub:ORG/NAME:CONFIG")
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise ConfigError(f"task.path={spec} needs the `datasets` package: pip install 'grpo[data]'") from exc
    try:
        rows = load_dataset(name, config or None, split=split)
    except Exception as exc:  # network, missing dataset or split, auth: all reported as one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"task.path={spec}: cannot load split {split!r} ({first})") from exc
    table = Table(source=f"{spec} {split}", columns=list(rows.column_names))
    for i, row in enumerate(rows, 1):
        table.add(dict(row), f"{spec} {split} row {i}")
    return table


_MEMORY: dict[str, dict[str, list[dict[str, Any]]]] = {}


def register_memory(name: str, splits: dict[str, list[dict[str, Any]]]) -> str:
    """Rows held in memory (the Python API's datasets), by split, read like files as `memory:NAME`."""
    _MEMORY[name] = splits
    return f"memory:{name}"


def read_memory(spec: str, split: str) -> Table:
    name = spec.removeprefix("memory:")
    if name not in _MEMORY:
        raise ConfigError(f"task.path={spec}: no in-memory dataset {name!r} in this process (a dataset given to "
                          "grpo.api lives only in its own Python process; for the command line, write it to files)")
    if split not in _MEMORY[name]:
        raise ConfigError(f"task.path={spec} has no {split} split; it has: {', '.join(_MEMORY[name]) or 'none'}")
    table = Table(source=f"{spec} {split}")
    for i, row in enumerate(_MEMORY[name][split], 1):
        if not isinstance(row, dict):
            raise ConfigError(f"{spec} {split} row {i}: each row must be a dict of columns, got {type(row).__name__}")
        table.add(dict(row), f"{spec} {split} row {i}")
    table.fill_missing()
    return table
