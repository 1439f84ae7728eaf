"""What the loop uses to carry out the guard's verdicts: notify, pause, and write the stop report."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any


log = logging.getLogger(__name__)


def notify(event: dict[str, Any], command: str | None, webhook: str | None) -> list[str]:
    """Call the user's hook(s) with the event as JSON; return errors instead of raising (a hook must
    never take the run down), so the caller can record them."""
    payload = json.dumps(event, default=str)
    errors = []
    if command:
        try:
            subprocess.run(command, shell=True, input=payload, text=True, timeout=30, check=True)
        except (subprocess.SubprocessError, OSError) as exc:
            errors.append(f"on_trip_command failed: {exc}")
    if webhook:
        request = urllib.request.Request(webhook, data=payload.encode(), headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except OSError as exc:
            errors.append(f"on_trip_webhook failed: {exc}")
    return errors


def wait_while_paused(pause_file: Path, poll_s: float, timeout_s: float,
                      stop: threading.Event | None = None) -> bool:
    """Block until the user deletes `pause_file` (True), or the timeout passes or `stop` is set (False)."""
    stop = stop or threading.Event()
    deadline = time.monotonic() + timeout_s
    while pause_file.exists():
        if time.monotonic() >= deadline or stop.is_set():
            return False
        stop.wait(min(poll_s, max(deadline - time.monotonic(), 0.0)))
    return True
