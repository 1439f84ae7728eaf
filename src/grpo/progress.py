"""Progress that moves inside long phases (generation, the update, evaluation), with an ETA: a status
line redrawn on a terminal, and a log line every `interval_s` when not on one (so train.log and a
job's log show a run is alive).

The loop names the phase (`with phase("rollout")`); code deep inside it reports with
`tick(done, total, unit)`, which costs a clock read when no report is due, and nothing when no
progress display is active (library use, tests).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Iterator

log = logging.getLogger("grpo.progress")


class Progress:
    def __init__(self, total_steps: int, interval_s: float = 30.0, tty: bool | None = None) -> None:
        self.total_steps, self.interval_s = total_steps, interval_s
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.step = 0
        self.step_times: list[float] = []
        self.step_started = time.monotonic()
        self.phase_name, self.phase_started = "", time.monotonic()
        self.last_draw = 0.0
        self.last_log = time.monotonic()

    def start_step(self, step: int) -> None:
        self.step, self.step_started = step, time.monotonic()

    def end_step(self) -> None:
        self.step_times.append(time.monotonic() - self.step_started)
        self.clear()

    def enter(self, phase: str) -> None:
        self.phase_name, self.phase_started = phase, time.monotonic()

    def update(self, done: int, total: int, unit: str) -> None:
        now = time.monotonic()
        if self.tty and now - self.last_draw >= 0.2:
            self.last_draw = now
            sys.stderr.write("\r\033[K" + self.describe(done, total, unit, now))
            sys.stderr.flush()
        elif not self.tty and now - self.last_log >= self.interval_s:
            self.last_log = now
            log.info("%s", self.describe(done, total, unit, now))

    def describe(self, done: int, total: int, unit: str, now: float) -> str:
        elapsed = now - self.phase_started
        rate = done / elapsed if elapsed > 0 else 0.0
        phase_eta = (total - done) / rate if rate > 0 else None
        where = f"step {self.step}/{self.total_steps} " if self.step else ""
        if done == 0:  # a stall reads as one, not as a rate of 0 with an ETA that never moves
            text = f"{where}{self.phase_name}: 0/{total} {unit} (none yet after {_minutes(elapsed)})"
        else:
            text = f"{where}{self.phase_name}: {done}/{total} {unit} ({rate:.1f} {unit}/s"
            text += f", {_minutes(phase_eta)} left)" if phase_eta is not None else ")"
        if self.step_times:
            # The median of the last steps: one skipped or cut-short step must not set the pace; the
            # step in progress counts with what is left of it.
            recent = sorted(self.step_times[-5:])
            typical = recent[len(recent) // 2]
            remaining = max(typical * (self.total_steps - self.step + 1) - (now - self.step_started), 0.0)
            text += f" | run eta {_minutes(remaining)}"
        return text

    def clear(self) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 90 else f"{seconds / 60:.1f} min"


_active: Progress | None = None


def activate(progress: Progress | None) -> None:
    global _active
    _active = progress


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    if _active is not None:
        _active.enter(name)
    try:
        yield
    finally:
        if _active is not None:  # what the phase prints next starts on a clean line
            _active.clear()


def tick(done: int, total: int, unit: str = "") -> None:
    # Generation ahead of the trainer (grpo.rollout.queue) runs on a worker thread: the display
    # follows the loop's own phase.
    if _active is not None and threading.current_thread() is threading.main_thread():
        _active.update(done, total, unit)
