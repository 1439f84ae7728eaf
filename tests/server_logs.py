"""Real logs of failed SGLang and vLLM servers (tests/data/server_logs/; its SOURCE says how each was made)."""

from __future__ import annotations

from pathlib import Path

LOGS = Path(__file__).resolve().parent / "data" / "server_logs"


def server_log(name: str) -> list[str]:
    """The lines of one start's part of a real server's log, as the supervisor reads them."""
    return (LOGS / f"{name}.log").read_text().splitlines()
