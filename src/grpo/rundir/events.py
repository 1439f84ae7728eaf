"""`RUN_DIR/events.jsonl`: every trip, retry burst, rollback, restart, interruption and stop, with evidence.

Unlike the metrics, events are never rewound on a resume: they are the history of what happened.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from grpo.rundir.files import JsonlLog


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
