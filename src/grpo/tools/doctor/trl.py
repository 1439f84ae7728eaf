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

from grpo.tools.doctor.logreader import LOG_SUFFIXES, LogReader
from grpo.tools.doctor.record import (
    ACCURACY,
    ENTROPY,
    EVAL_ACCURACY,
    GRAD_NORM,
    KL,
    LENGTH,
    LOSS,
    REWARD,
    REWARD_STD,
    STEP_S,
    TRUNCATED,
    ZERO_VARIANCE,
    Checkpoint,
    Evidence,
    Mark,
    RunRecord,
    UnreadableRun,
)
from grpo.tools.doctor.textlog import MAX_LINE, as_step, log_suffix, number, read_ends, read_lines

STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_KEYS = {"reward": REWARD, "reward_std": REWARD_STD, "frac_reward_zero_std": ZERO_VARIANCE, "loss": LOSS,
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
    # The newest history, not the longest: after a resume from checkpoint-16, a stale checkpoint-24 of
    # the attempt before holds more steps, but the run now is the one writing.
    best: tuple[Path, dict[str, Any], list[str], int] | None = None
    for path in candidates:
        if not path.is_file():
            continue
        try:
            lines = read_lines(path)
        except UnreadableRun as exc:
            record.notes.append(f"{exc}: skipped")
            continue
        try:
            state = json.loads("\n".join(lines))
        except json.JSONDecodeError as exc:
            record.notes.append(f"{path} is torn or not JSON ({exc.msg} at line {exc.lineno}): skipped")
            continue
        except (RecursionError, ValueError) as exc:  # nested past any real state; a 5,000-digit integer
            record.notes.append(f"{path} is not a trainer state the doctor can read ({type(exc).__name__}): skipped")
            continue
        if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
            record.notes.append(f"{path} has no log_history: skipped")
            continue
        written = _mtime_ns(path)
        if best is None or (written, _last_step(state)) >= (best[3], _last_step(best[1])):
            best = (path, state, lines, written)
    if best is None:
        raise UnreadableRun(f"{root} has no readable {STATE} (the output directory's, or a checkpoint-N/ one's)")
    path, state, lines, _ = best
    if isinstance(state.get("max_steps"), int) and 0 < state["max_steps"] < 10**12:
        record.total_steps = state["max_steps"]
    step_lines = _step_lines(lines)
    for entry in state["log_history"]:
        if not isinstance(entry, dict) or as_step(entry.get("step")) is None or not isinstance(entry["step"], int):
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
    for key, raw in entry.items():
        value = _float(raw)
        if value is None:
            if key == "reward" and (raw is None or isinstance(raw, str)):  # a reward TRL could not average
                record.put(step, REWARD, math.nan)
            continue
        if key in _KEYS:
            record.put(step, _KEYS[key], value)
        elif _ACCURACY.match(key):
            record.put(step, ACCURACY, value)
        elif key in ("eval_reward", "eval_accuracy"):
            record.put(step, EVAL_ACCURACY, value)
    if step in record.metrics and step not in record.evidence_by_step:
        record.evidence_by_step[step] = evidence
    if any(isinstance(entry.get(k), float) and not math.isfinite(entry[k]) for k in ("loss", "grad_norm", "reward")):
        record.marks.append(Mark(step, "nonfinite", f"loss {entry.get('loss')}, grad_norm {entry.get('grad_norm')}, "
                                 f"reward {entry.get('reward')}", record.evidence_by_step.get(step)))


def knows(key: str) -> bool:
    """A metric's name as TRL's GRPOTrainer logs it (its reward functions' `rewards/<name>/mean` among them)."""
    return key in _KEYS or bool(_ACCURACY.match(key)) or key.startswith("rewards/")


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer no float holds: not a metric
        return None


# TRL's console log: what `Trainer.log` prints for each logged step (ProgressCallback into tqdm's bar,
# PrinterCallback without it): the logs as a Python dict, floats formatted as strings since
# transformers 4.5x, e.g. {'loss': '2.98e-07', 'grad_norm': '1.5', ..., 'reward': '0.7375', 'epoch': '0.03'}.
# The dict has no step. With the bar and unbuffered output, the bar's `N/M` drawn just before it is the
# step; the bar goes to stderr unbuffered while the dicts go to stdout, so under nohup or `> log`
# without PYTHONUNBUFFERED the dicts come in bursts after the bar has moved on: a burst of n dicts
# after steps `last` is spread evenly over (last, bar], at the logging interval learnt from dicts that
# came one per bar update. Without a bar, the count of dicts gives the step (at the interval learnt,
# else 1). ms-swift prints `'global_step/max_steps': '5/100'` in the dict itself: that is the step.
_LOG_ENTRY = re.compile(r"\{'[\w/.-]+': .*'(?:reward|frac_reward_zero_std|rewards/[^']*)': ")
_PAIR = re.compile(r"'([^']+)': (?:'([^']*)'|([^,}]+))")
# tqdm's bar, or its text without the bar glyphs as notebooks (Colab) print it: `  5% 5/100 [02:39<49:30, 31.26s/it]`
_BAR = re.compile(r"^\s*\d+%(?:\|[^|]*\|)?\s*(\d+)/(\d+) \[")
# Unsloth's notebooks print (and users paste) the logged steps as a table, one row per logged step:
#   Step | Training Loss | reward | reward_std | completion_length | kl | rewards / match_format_exactly | ...
#   1 | 0.000000 | -17.250000 | 1.500000 | 445.500000 | 0.000000 | 0.000000 | ...
# (or tab-separated, as Jupyter's HTML table copies). The header names the columns.
_TABLE_HEADER = re.compile(r"^\s*\|?\s*Step\s*(?:\||\t)\s*Training Loss\s*(?:\||\t)")
_COLUMNS = {"training loss": "loss", "completion_length": "completions/mean_length", "kl": "kl", "reward": "reward",
            "reward_std": "reward_std", "frac_reward_zero_std": "frac_reward_zero_std", "grad_norm": "grad_norm",
            "completions / clipped_ratio": "completions/clipped_ratio", "entropy": "entropy"}
_RESUMED = re.compile(r"Continuing training from global step (\d+)")
_SWIFT_STEP = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_SHOWN = ("loss", "grad_norm", "reward", "reward_std", "frac_reward_zero_std")
_WRAPPED_MAX = 20000  # characters of one dict put back together: a dict, never a whole file


class _Unwrapper:
    """A logged dict printed over several lines is put back on one: `pprint` breaks it before each key
    (`{'loss': 0.0,` then ` 'grad_norm': 0.0,` ... `'epoch': 0.01}`), and users paste it wrapped the
    same way. A line whose last `{'` is not closed on it is held while the next lines begin with a
    quoted key, until one closes it; any other line releases it as it stands (a dict cut off)."""

    def __init__(self) -> None:
        self.held: tuple[int, str] | None = None

    def feed(self, number_: int, line: str) -> list[tuple[int, str]]:
        """The whole lines that `line` completes (number: the first line of each)."""
        out = []
        if self.held is not None:
            at, text = self.held
            if line.lstrip().startswith("'") and len(text) < _WRAPPED_MAX:
                text = f"{text} {line.strip()}"
                if "}" in line:
                    self.held = None
                    return [(at, text)]
                self.held = (at, text)
                return []
            out.append(self.flush())
        start = line.rfind("{'")
        if start >= 0 and "}" not in line[start:]:
            self.held = (number_, line.rstrip())
        else:
            out.append((number_, line))
        return out

    def flush(self) -> tuple[int, str]:
        held, self.held = self.held, None
        return held


def looks_like_log(path: Path) -> bool:
    """A training entry (or Unsloth's table header) in the log's first or last megabytes, however it ends."""
    unwrap = _Unwrapper()
    lines = read_ends(path).splitlines()
    for number_, line in enumerate(lines, 1):
        for _, whole in unwrap.feed(number_, line[:MAX_LINE]):  # as the reader sees it
            if _is_entry_or_table(whole):
                return True
    return unwrap.held is not None and _is_entry_or_table(unwrap.flush()[1])


def _is_entry_or_table(line: str) -> bool:
    # The dict starts at the line's first `{'`, as the reader takes it: searching from every `{'` of a
    # long line (a dataset printed as a list of dicts) is quadratic.
    start = line.find("{'")
    return bool((start >= 0 and _LOG_ENTRY.match(line, start)) or ("Training Loss" in line and _TABLE_HEADER.match(line)))


def find_log(path: Path) -> Path | None:
    """A TRL console log: the file itself, or the first in a directory."""
    if path.is_file():
        return path if looks_like_log(path) else None
    if path.is_dir():
        for candidate in sorted(p for p in path.iterdir() if log_suffix(p) in LOG_SUFFIXES):
            if candidate.is_file() and looks_like_log(candidate):
                return candidate
    return None


class TrlLogReader(LogReader):
    """A TRL console log. Checkpoints are the checkpoint-N directories beside the log, or one folder
    down (the output directory)."""

    source = "trl"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.bar_step: int | None = None
        self.bar_moved = False  # the bar was drawn since the last dict
        self.interval: int | None = None  # steps between logged dicts, once learnt
        self.burst: list[tuple[dict[str, float], int, str, int | None]] = []  # dicts not placed yet
        self.bursts = 0  # bursts of several dicts in one flush: buffered output
        self.columns: list[str] | None = None  # Unsloth's table: the header's column names
        self.unwrap = _Unwrapper()

    def line(self, number_: int, line: str) -> None:
        for at, whole in self.unwrap.feed(number_, line):
            self._line(at, whole)

    def _line(self, number_: int, line: str) -> None:
        if "Continuing training from global step" in line:
            resumed = _RESUMED.search(line)
            if resumed:
                self._close_burst()
                step = int(resumed.group(1)[:12])
                self.record.restart(Mark(step + 1, "restart", f"resumed from the checkpoint of step {step}",
                                              Evidence(str(self.path), number_, line.strip()[:300])))
                self.current = min(self.current, step)
                self.bar_step, self.bar_moved = None, False
        if self.columns is not None or "Training Loss" in line:
            if self._table(number_, line):
                return
        for segment in line.split("\r") if "\r" in line else (line,):
            bar = _BAR.match(segment)
            if bar:
                step, total = as_step(int(bar.group(1)[:12])), as_step(int(bar.group(2)[:12]))
                if step is not None and step != self.bar_step:
                    self._close_burst()
                    self.bar_step, self.bar_moved = step, True
                self.record.total_steps = total or self.record.total_steps
            # buffered stdout's flush lands right after the bar stderr drew last, on the same segment
            start = segment.find("{'", bar.end() if bar else 0)
            if start >= 0:
                self._entry(number_, segment[start:])

    def _table(self, number_: int, line: str) -> bool:
        """Unsloth's table: its header, its separator, its rows; -> whether the line was one of them."""
        if _TABLE_HEADER.match(line):
            self.columns = [c.strip().lower() for c in re.split(r"\||\t", line.strip().strip("|"))]
            return True
        cells = [c.strip() for c in re.split(r"\||\t", line.strip().strip("|"))]
        if len(cells) != len(self.columns or ()) or not cells[0].isdigit():
            return set(line.strip()) <= set("-|: \t") and bool(line.strip())  # the separator row
        entry = {}
        for name, text in zip(self.columns[1:], cells[1:]):
            value = number(text)
            if name in _COLUMNS and value is not None:
                entry[_COLUMNS[name]] = value
        step = as_step(int(cells[0][:12]))
        if step is not None and entry:
            self._put(step, entry, number_, line)
        return True

    def _entry(self, number_: int, text: str) -> None:
        entry: dict[str, float] = {}
        swift_step = None
        for key, quoted, bare in _PAIR.findall(text[:20000]):
            if key == "global_step/max_steps":
                swift = _SWIFT_STEP.match(quoted or bare)
                swift_step = as_step(int(swift.group(1)[:12])) if swift else None
                continue
            value = number(quoted if quoted else bare)
            if value is not None:
                entry[key] = value
            elif key == "reward" and (bare.strip() in ("None", "nan") or quoted in ("None", "nan")):
                entry[key] = math.nan
        if "train_runtime" in entry:
            self._close_burst()
            self.record.finished = True
            return
        if not any(k in entry for k in _KEYS) or all(k.startswith("eval_") for k in entry if k != "epoch"):
            return
        if swift_step is not None:
            self._put(swift_step, entry, number_, text)
        elif self.bar_step is None:
            self._put(self.current + (self.interval or 1), entry, number_, text)
        else:
            # held until the next bar update says whether it came alone (its step is the bar's) or in a burst
            self.burst.append((entry, number_, text, self.bar_step if self.bar_moved else None))
            self.bar_moved = False

    def _close_burst(self) -> None:
        """Place the dicts since the last bar update: one that came alone right after the bar moved is at
        the bar's step; a flush of several is spread over the steps up to the bar."""
        if not self.burst:
            return
        if len(self.burst) == 1 and self.burst[0][3] is not None:
            entry, number_, text, bar_step = self.burst[0]
            if 0 < self.current < bar_step and self.interval is None:
                self.interval = bar_step - self.current
            self._put(bar_step, entry, number_, text)
            self.burst = []
            return
        n = len(self.burst)
        if n > 1:
            self.bursts += 1
        start = self.current
        end = self.bar_step if self.bar_step is not None and self.bar_step >= start + n else None
        for k, (entry, number_, text, _) in enumerate(self.burst, 1):
            step = start + k * self.interval if self.interval else (
                start + round(k * (end - start) / n) if end is not None else self.current + 1)
            self._put(max(step, self.current + 1), entry, number_, text)
        self.burst = []

    def _put(self, step: int, entry: dict[str, float], number_: int, text: str) -> None:
        if step <= self.current:
            self.record.restart(Mark(step, "restart", f"the step count went back from {self.current} to {step}",
                                          Evidence(str(self.path), number_, text.strip()[:300])))
        self.current = step
        shown = ", ".join(f"{k}: {entry[k]:g}" for k in _SHOWN if k in entry)
        put_entry(self.record, step, entry, Evidence(str(self.path), number_, f"step {step}: {shown}"))

    def finish(self, final: bool) -> None:
        if final:  # live, dicts not yet placed (or not yet whole) wait for the lines that place them
            if self.unwrap.held is not None:
                self._line(*self.unwrap.flush())
            self._close_burst()
        record = self.record
        record.notes = [n for n in record.notes if not n.startswith("buffered output")]
        if self.bursts:
            record.notes.append(f"buffered output: {self.bursts} time(s) several logged steps came in one flush, "
                                "so their steps are spread between the progress bar's; run with PYTHONUNBUFFERED=1 "
                                "(or python -u) for exact steps")
        record.checkpoints = sorted((Checkpoint(int(p.name.split("-")[1]), str(p))
                                     for p in _checkpoints_near(self.path.parent)), key=lambda c: c.step)


def read_log_record(log: Path, lines=None) -> RunRecord:
    return TrlLogReader.read(log, lines)


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


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _last_step(state: dict[str, Any]) -> int:
    steps = [e.get("step") for e in state["log_history"] if isinstance(e, dict) and isinstance(e.get("step"), int)]
    return max(steps, default=-1)


def _step_lines(lines: list[str]) -> dict[int, int]:
    """step -> the line of its first `"step": N` in the file (json.dump with indent puts one per line)."""
    found: dict[int, int] = {}
    pattern = re.compile(r'"step":\s*(\d+)')
    for line_no, line in enumerate(lines, 1):
        for match in pattern.finditer(line):
            found.setdefault(int(match.group(1)), line_no)
    return found
