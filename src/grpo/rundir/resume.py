"""How a stopped run is resumed: the command, and `STOPPED.json`, which says why the guard stopped the
run and names that command."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from grpo.rundir.files import atomic_write_json


def resume_command(run_dir: Path, checkpoint: Path | None) -> str:
    parts = ["grpo", "train", "--config", str(run_dir / "config.yaml")]
    if checkpoint is not None:
        parts.append(f"resume_from={checkpoint}")
    return shlex.join(parts)


def write_stop_report(run_dir: Path, cause: str, step: int, evidence: dict[str, Any], last_good: Path | None,
                      write: bool = True) -> dict:
    report = {
        "cause": cause,
        "step": step,
        "time": time.time(),
        "evidence": evidence,
        "last_good_checkpoint": str(last_good) if last_good else None,
        "resume_command": resume_command(run_dir, last_good),
    }
    if write:  # under torchrun, rank 0 writes it
        atomic_write_json(run_dir / "STOPPED.json", report)
    return report
