"""A TRL GRPOTrainer output directory, or one of its `checkpoint-N/` directories.

Each `checkpoint-N/trainer_state.json` holds `log_history`, every logged step so far (`reward`,
`reward_std`, `frac_reward_zero_std`, `loss`, `grad_norm`, `completions/mean_length`,
`completions/clipped_ratio`, `kl`, `entropy`, ...), and `global_step`; the output directory's own
`trainer_state.json` is written only when training ends. The longest history found is read; a torn
file is skipped and said. `checkpoint-N` holds the state after step N.

Or TRL's console log (below), which shows every logged step as it happens.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from grpo.tools.doctor.record import (ENTROPY, EVAL_ACCURACY, GRAD_NORM, KL, LENGTH, LOSS, REWARD, REWARD_STD, STEP_S,
                                TRUNCATED, ZERO_STD, ACCURACY, Checkpoint, Evidence, Mark, RunRecord, UnreadableRun)
from grpo.tools.doctor.textlog import number, read_head, read_lines

STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_KEYS = {"reward": REWARD, "reward_std": REWARD_STD, "frac_reward_zero_std": ZERO_STD, "loss": LOSS,
         "grad_norm": GRAD_NORM, "kl": KL, "entropy": ENTROPY, "completions/mean_length": LENGTH,
         "completions/clipped_ratio": TRUNCATED, "step_time": STEP_S}
_ACCURACY = re.compile(r"^rewards/.*accura.*/mean$")


def find_root(path: Path) -> Path | None:
    """The output directory (or the single checkpoint) to read, if `path` is a TRL one."""
    if path.is_file() and path.name == STATE:
        path = path.parent
    if not path.is_dir():
        return None
    if (path / STATE).is_file() or _checkpoints(path):
        return path
    return None


def _checkpoints(root: Path) -> list[Path]:
    try:
        return sorted((p for p in root.iterdir() if _CHECKPOINT.match(p.name) and p.is_dir()),
                      key=lambda p: int(p.name.split("-")[1]))
    except OSError as exc:
        raise UnreadableRun(f"{root} cannot be listed ({exc.strerror or exc}): check its permissions") from None


def checkpoints_in(root: Path) -> list[Checkpoint]:
    """The checkpoint-N directories of an output directory (none while it does not exist)."""
    return [Checkpoint(int(p.name.split("-")[1]), str(p)) for p in _checkpoints(root)] if root.is_dir() else []


def read_record(root: Path) -> RunRecord:
    record = RunRecord("trl", str(root))
    single = _CHECKPOINT.match(root.name) is not None
    checkpoint_dirs = _checkpoints(root.parent) if single else _checkpoints(root)
    record.checkpoints = [Checkpoint(int(p.name.split("-")[1]), str(p)) for p in checkpoint_dirs]
    candidates = [root / STATE] + ([] if single else [p / STATE for p in checkpoint_dirs])
    best: tuple[Path, dict[str, Any], list[str]] | None = None
    for path in candidates:
        if not path.is_file():
            continue
        lines = read_lines(path)
        try:
            state = json.loads("\n".join(lines))
        except json.JSONDecodeError as exc:
            record.notes.append(f"{path} is torn or not JSON ({exc.msg} at line {exc.lineno}): skipped")
            continue
        if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
            record.notes.append(f"{path} has no log_history: skipped")
            continue
        if best is None or _last_step(state) >= _last_step(best[1]):
            best = (path, state, lines)
    if best is None:
        raise UnreadableRun(f"{root} has no readable {STATE} (the output directory's, or a checkpoint-N/ one's)")
    path, state, lines = best
    if isinstance(state.get("max_steps"), int) and state["max_steps"] > 0:
        record.total_steps = state["max_steps"]
    step_lines = _step_lines(lines)
    for entry in state["log_history"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
            continue
        step = entry["step"]
        if "train_runtime" in entry:
            record.finished = record.total_steps is None or step >= record.total_steps
            continue
        shown = ", ".join(f"{k}: {entry[k]}" for k in _SHOWN if k in entry)
        put_entry(record, step, entry, Evidence(str(path), step_lines.get(step, 0), f'"step": {step}: {shown}'))
    return record


def put_entry(record: RunRecord, step: int, entry: dict[str, Any], evidence: Evidence) -> None:
    """One logged step of TRL's (what `Trainer.log` passes its callbacks and keeps in `log_history`)
    into the record, under canonical names; values that are not numbers are skipped."""
    for key, value in entry.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key in _KEYS:
            record.put(step, _KEYS[key], float(value))
        elif _ACCURACY.match(key):
            record.put(step, ACCURACY, float(value))
        elif key in ("eval_reward", "eval_accuracy"):
            record.put(step, EVAL_ACCURACY, float(value))
    if step in record.metrics and step not in record.evidence_by_step:
        record.evidence_by_step[step] = evidence
    if any(isinstance(entry.get(k), float) and not math.isfinite(entry[k]) for k in ("loss", "grad_norm")):
        record.marks.append(Mark(step, "nonfinite", f"loss {entry.get('loss')}, grad_norm {entry.get('grad_norm')}",
                                 record.evidence_by_step.get(step)))


# TRL's console log: what `Trainer.log` prints for each logged step (ProgressCallback into tqdm's bar,
# PrinterCallback without it): the logs as a Python dict, floats formatted as strings since
# transformers 4.5x, e.g. {'loss': '2.98e-07', 'grad_norm': '1.5', ..., 'reward': '0.7375', 'epoch': '0.03'}.
# The dict has no step: the training bar's `N/M` drawn just before it gives it; without a bar, the
# count of training entries does (the step itself when logging_steps=1).
_LOG_ENTRY = re.compile(r"\{'[\w/.-]+': .*'(?:reward|frac_reward_zero_std)': ", re.MULTILINE)
_PAIR = re.compile(r"'([^']+)': (?:'([^']*)'|([^,}]+))")
_BAR = re.compile(r"^\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[")
_SHOWN = ("loss", "grad_norm", "reward", "reward_std", "frac_reward_zero_std")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


def looks_like_log(path: Path) -> bool:
    """A training entry anywhere in the head, however the log ends."""
    return bool(_LOG_ENTRY.search(read_head(path, 4 << 20)))


def find_log(path: Path) -> Path | None:
    """A TRL console log: the file itself, or the first in a directory."""
    if path.is_file():
        return path if looks_like_log(path) else None
    if path.is_dir():
        for candidate in sorted(p for p in path.iterdir() if p.suffix in LOG_SUFFIXES):
            if candidate.is_file() and looks_like_log(candidate):
                return candidate
    return None


def read_log_record(log: Path, lines: list[str] | None = None) -> RunRecord:
    """A TRL console log (`lines`: the log's lines, when the caller has read them already). Checkpoints
    are the checkpoint-N directories beside the log, or one folder down (the output directory)."""
    record = RunRecord("trl", str(log))
    lines = read_lines(log) if lines is None else lines
    bar_step, counted, current = None, 0, 0
    for line_no, line in enumerate(lines, 1):
        bar = _BAR.match(line)
        if bar:
            bar_step, record.total_steps = int(bar.group(1)), int(bar.group(2))
            continue
        start = line.find("{'")
        if start < 0:
            continue
        entry = {}
        for key, quoted, bare in _PAIR.findall(line[start:]):
            value = number(quoted if quoted else bare)
            if value is not None:
                entry[key] = value
        if "train_runtime" in entry:
            record.finished = True
            continue
        if not any(k in entry for k in _KEYS) or all(k.startswith("eval_") for k in entry if k != "epoch"):
            continue
        counted += 1
        step = bar_step if bar_step is not None else counted
        if step <= current:
            if bar_step is not None and step == current:
                continue  # a second entry at the same step: not a training step
            record.marks.append(Mark(step, "restart", f"the step count went back from {current} to {step}",
                                     Evidence(str(log), line_no, line.strip()[:300])))
        current = step
        shown = ", ".join(f"{k}: {entry[k]:g}" for k in _SHOWN if k in entry)
        put_entry(record, step, entry, Evidence(str(log), line_no, f"step {step}: {shown}"))
    for path in _checkpoints_near(log.parent):
        record.checkpoints.append(Checkpoint(int(path.name.split("-")[1]), str(path)))
    record.checkpoints.sort(key=lambda c: c.step)
    return record


def _checkpoints_near(root: Path) -> list[Path]:
    """checkpoint-N directories in `root` and in its folders (a folder that cannot be listed has none)."""
    found = []
    try:
        folders = [root] + sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                                  and not _CHECKPOINT.match(p.name))
    except OSError:
        return []
    for folder in folders:
        try:
            found += _checkpoints(folder)
        except UnreadableRun:
            continue
    return found


def _last_step(state: dict[str, Any]) -> int:
    steps = [e.get("step") for e in state["log_history"] if isinstance(e, dict) and isinstance(e.get("step"), int)]
    return max(steps, default=-1)


def _step_lines(lines: list[str]) -> dict[int, int]:
    """step -> the line of its first `"step": N` in the file (json.dump with indent puts one per line)."""
    found: dict[int, int] = {}
    pattern = re.compile(r'"step":\s*(\d+)')
    for number, line in enumerate(lines, 1):
        for match in pattern.finditer(line):
            found.setdefault(int(match.group(1)), number)
    return found
