"""A row's column by name, or a field inside a column by a dotted path: verl keeps the gold in
`reward_model.ground_truth`, Open-Reasoner-Zero in `1.ground_truth.value`, a ShareGPT conversation its answer in
`conversations.-1.value` (its last message). A column whose own name has a dot
(a flattened export's `extra_info.index`) is found by its name first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_NOT_FOUND = object()
_MAX_PATHS = 12  # fields named in an error message; a wide nested column would drown the message


def _walk(row: Mapping[str, Any], name: str) -> Any:
    if name in row:
        return row[name]
    value: Any = row
    for part in name.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, (list, tuple)) and (index := position(part, len(value))) is not None:
            value = value[index]
        else:
            return _NOT_FOUND
    return value


def position(part: str, length: int) -> int | None:
    """The position among `length` list items that a path part names: `0`, `1`, ..., or `-1` for the last, as Python
    counts; None where it names none."""
    if not part.removeprefix("-").isdigit():
        return None
    index = int(part)
    return index if -length <= index < length else None


def lookup(row: Mapping[str, Any], name: str) -> Any:
    """`row`'s column `name`, or the field its dotted path leads to (through dicts, and list items by position, -1 the
    last); None where a row lacks it, as a JSONL line that leaves a key out."""
    value = _walk(row, name)
    return None if value is _NOT_FOUND else value


def found(rows: list[dict[str, Any]], name: str) -> bool:
    """Whether `name` is a column or a field of at least one of `rows`."""
    return any(_walk(row, name) is not _NOT_FOUND for row in rows)


def leaf_paths(value: Mapping[str, Any], prefix: str) -> list[str]:
    """The dotted paths to the fields of a dict column that are not dicts themselves (`reward_model.ground_truth`)."""
    paths = []
    for key, item in value.items():
        path = f"{prefix}.{key}"
        paths.extend(leaf_paths(item, path) if isinstance(item, Mapping) and item else [path])
    return paths


def describe(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """`columns` for an error message, each dict column with its fields: `prompt, reward_model (reward_model.ground_truth,
    reward_model.style)`."""
    described = []
    for column in columns:
        sample = next((row[column] for row in rows if isinstance(row.get(column), Mapping) and row[column]), None)
        if sample is None:
            described.append(column)
            continue
        paths = leaf_paths(sample, column)
        more = f", and {len(paths) - _MAX_PATHS} more" if len(paths) > _MAX_PATHS else ""
        described.append(f"{column} ({', '.join(paths[:_MAX_PATHS])}{more})")
    return ", ".join(described)


def short(value: Any) -> str:
    """`value` as an error message shows it: its repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def name_a_field(where: str, column: str, value: Mapping[str, Any], key: str, holds: str) -> str:
    """The error for a dict where text was needed: the fields it has, as the values `key` could take instead."""
    paths = leaf_paths(value, column) if value else []
    fix = f": name one of its fields, {key}={' or '.join(paths)}" if paths else ""
    return f"{where}: column {column!r} holds a dict, not {holds}{fix}"
