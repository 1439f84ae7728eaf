"""`RUN_DIR/events.jsonl`: every trip, retry burst, rollback, restart and stop, with evidence."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class EventLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, kind: str, step: int, message: str, **evidence: Any) -> dict[str, Any]:
        event = {"time": time.time(), "step": step, "kind": kind, "message": message, "evidence": evidence}
        with self.path.open("a") as f:
            f.write(json.dumps(event, default=str) + "\n")
        return event

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
