"""A run's metrics as JSON, one object a step: JSON lines (verl's file logger, `{"step": N, "data": {...}}` with
trainer.logger=['file']; tinker-cookbook's and prime-rl's metrics.jsonl; any trainer's own `{"iteration": 3,
"mean_reward": 0.8}`), or a JSON file holding a list of such objects.

An object's nested objects are flattened with `/` (`{"actor": {"pg_loss": 0.1}}` is `actor/pg_loss`), except a
logger's wrapper of the metrics (`data`, `metrics`), whose keys are the metrics' own names. The step is the run's
own count where a line has one (`train/global_step`, `training/global_step`), else `step`, `iteration` or wandb's
`_step` (LLaMA-Factory's `current_steps`, beside the run's `total_steps`). Numbers are read, NaN and Infinity as
JSON's Python dialect writes them; text, null and lists are not metrics. A line that is not a JSON object (a torn
last line) is skipped and counted; a file with no object that holds a step is an `UnreadableRun` that says what to
give instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from grpo.tools.doctor.record import Evidence, UnreadableRun
from grpo.tools.doctor.scalars import Row, Table, shown
from grpo.tools.doctor.textlog import as_step, iter_lines

STEP_KEYS = ("train/global_step", "trainer/global_step", "training/global_step", "global_step", "current_steps", "step",
             "iteration", "iter", "_step")
TOTAL_KEYS = ("total_steps", "max_steps")  # the run's steps beside each step (LLaMA-Factory's trainer_log.jsonl)
_WRAPPERS = frozenset({"data", "metrics", "scalars", "stats"})
MAX_ARRAY = 256 << 20  # characters of a JSON array read whole (JSON lines are streamed)
MAX_DEPTH = 8  # nested objects flattened, at most


def read(path: Path) -> Table:
    table, bad, objects = Table(), 0, 0
    for line, item in _objects(path):
        if not isinstance(item, dict):
            bad += 1
            continue
        objects += 1
        flat = dict(_flatten(item))
        key = next((k for k in STEP_KEYS if _number(flat.get(k)) is not None), None)
        step = as_step(flat[key]) if key is not None else None
        values = {k: number for k, v in flat.items() if k not in STEP_KEYS and k not in TOTAL_KEYS
                  and not k.startswith("_") and (number := _number(v)) is not None}
        total = next((as_step(flat[k]) for k in TOTAL_KEYS if _number(flat.get(k)) is not None), None)
        table.total_steps = total or table.total_steps
        if step is not None and values:
            table.rows.append(Row(step, values, Evidence(str(path), line, shown(step, values))))
    if not table.rows:
        what = f"{objects} JSON object(s)" + (f" and {bad} line(s) that are not one" if bad else "")
        raise UnreadableRun(f"{path} holds {what}, none with a step (step, global_step, iteration or _step) and a "
                            "number: give the doctor a file of one JSON object per step, or the run's console log")
    if bad:
        table.notes.append(f"{bad} line(s) of {path} are not JSON objects (a torn last line, or text): skipped")
    return table


def _number(value: object) -> float | None:
    """A metric's value as a float, or None for text, null, a list, or an integer no float holds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _objects(path: Path) -> Iterator[tuple[int, object]]:
    """(line, object) of each JSON line, or of each item of a file that is one JSON array (line 0)."""
    lines = iter_lines(path)
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        if text.lstrip().startswith("["):
            yield from ((0, item) for item in _array(path, text, lines))
            return
        try:
            yield number, json.loads(text)
        except (ValueError, RecursionError):
            yield number, None


def _array(path: Path, first: str, rest: Iterator[str]) -> list:
    parts, size = [first], len(first)
    for text in rest:
        size += len(text) + 1
        if size > MAX_ARRAY:
            raise UnreadableRun(f"{path} is a JSON array of more than {MAX_ARRAY >> 20} MiB: write it as JSON lines "
                                "(one object per step) for the doctor to stream it")
        parts.append(text)
    try:
        items = json.loads("\n".join(parts))
    except (ValueError, RecursionError) as exc:
        raise UnreadableRun(f"{path} is not valid JSON ({exc}): give the doctor the file as the trainer wrote "
                            "it") from None
    return items if isinstance(items, list) else []


def _flatten(item: dict, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, object]]:
    for key, value in item.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if depth < MAX_DEPTH:  # deeper is no logger's metric, and no reason to recurse without end
                yield from _flatten(value, prefix if key in _WRAPPERS and not prefix else f"{name}/", depth + 1)
        else:
            yield name, value
