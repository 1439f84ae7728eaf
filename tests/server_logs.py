"""Real logs of failed SGLang and vLLM servers: tests/data/server_logs/ (made here, its SOURCE says how) and
tests/data/server_logs/real/ (from public issue threads, with the cause each must read as in its EXPECTED)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LOGS = Path(__file__).resolve().parent / "data" / "server_logs"
REAL = LOGS / "real"


def server_log(name: str) -> list[str]:
    """The lines of one start's part of a real server's log, as the supervisor reads them."""
    return (LOGS / f"{name}.log").read_text().splitlines()


@dataclass(frozen=True)
class Expected:
    """A real log from elsewhere and what grpo must read in it: the cause and a part of the line it quotes."""

    log: str
    cause: str
    quote: str

    def lines(self) -> list[str]:
        return (REAL / f"{self.log}.log").read_text().splitlines()


def expected_real() -> list[Expected]:
    """REAL/EXPECTED's rows: `log cause quote...` (the quote runs to the line's end), # for comments."""
    rows = [line.split(maxsplit=2) for line in (REAL / "EXPECTED").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return [Expected(*row) for row in rows]
