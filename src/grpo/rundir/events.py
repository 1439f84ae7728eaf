"""`RUN_DIR/events.jsonl`: every trip, retry burst, rollback, restart, interruption and stop, with evidence.

Unlike the metrics, events are never rewound on a resume: they are the history of what happened.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from grpo.rundir.files import JsonlLog

log = logging.getLogger(__name__)


class EventLog:
    def __init__(self, path: Path, writes: bool = True) -> None:
        self.log = JsonlLog(path, writes)
        self.path = self.log.path

    def record(self, kind: str, step: int, message: str, **evidence: Any) -> dict[str, Any]:
        event = {"time": time.time(), "step": step, "kind": kind, "message": message, "evidence": evidence}
        self.log.append(event)
        return event

    def read(self) -> list[dict[str, Any]]:
        return self.log.read()[0]


class StepInProgress:
    """The step that events of no step of their own are recorded under: set on the loop's thread as each
    step begins, read on the threads that record a server's events (its watchers, the engine's pool)."""

    def __init__(self, step: int = 0) -> None:
        self._lock = threading.Lock()
        self._step = step

    def set(self, step: int) -> None:
        with self._lock:
            self._step = step

    def get(self) -> int:
        with self._lock:
            return self._step


class ServerEvents:
    """A server's events, from any thread: each one line under the step in progress (as its trips), and
    said, trouble as a warning."""

    TROUBLE = ("server_failed", "server_gave_up", "weight_sync_mismatch")

    def __init__(self, events: EventLog, step: StepInProgress) -> None:
        self.events, self.step = events, step

    def record(self, kind: str, message: str, **evidence: Any) -> None:
        self.events.record(kind, self.step.get(), message, **evidence)
        (log.warning if kind in self.TROUBLE else log.info)("%s", message)
