"""How a stopped run is resumed: the command, and `STOPPED.json`, which says why the guard stopped the
run and names that command. A run started by several ranks resumes as it was launched: LAUNCH_FILE
records how (torchrun's shape, or Ray's launcher and cluster), so the command given is one that works."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

import yaml

from grpo.rundir.files import atomic_write_json, read_json

LAUNCH_FILE = "launch.json"
LAUNCHER_ENV = "GRPO_LAUNCHER"  # set by `grpo train --launcher ray` for its ranks: {"launcher": "ray", ...}
RAY_STRATEGY_ENV = "GRPO_RAY_STRATEGY"  # ... and its --ray-strategy, where not the default PACK


def record_launch(run_dir: Path, world: int) -> None:
    """By rank 0 at every start: how this start was launched; a single process leaves no file."""
    path = run_dir / LAUNCH_FILE
    launch: dict[str, Any] | None = None
    if os.environ.get(LAUNCHER_ENV):
        launch = {"launcher": "ray", "nproc": world, "ray_address": os.environ[LAUNCHER_ENV].partition(":")[2] or None}
        if os.environ.get(RAY_STRATEGY_ENV):
            launch["ray_strategy"] = os.environ[RAY_STRATEGY_ENV]
    elif world > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        launch = {"launcher": "torchrun", "nproc_per_node": per_node, "nnodes": max(1, world // per_node),
                  "rendezvous": f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"}
    if launch is not None:
        atomic_write_json(path, launch)
    else:
        path.unlink(missing_ok=True)


def _launch_prefix(run_dir: Path) -> list[str]:
    launch, _ = read_json(run_dir / LAUNCH_FILE)
    if not isinstance(launch, dict):
        return ["grpo", "train"]
    if launch.get("launcher") == "ray":
        address = ["--ray-address", str(launch["ray_address"])] if launch.get("ray_address") else []
        strategy = ["--ray-strategy", str(launch["ray_strategy"])] if launch.get("ray_strategy") else []
        return ["grpo", "train", "--launcher", "ray", "--nproc", str(launch.get("nproc", 1)), *address, *strategy]
    nodes = int(launch.get("nnodes", 1))
    multi = ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", str(launch.get("rendezvous"))]
    return ["torchrun", *(multi if nodes > 1 else []), "--nproc-per-node", str(launch.get("nproc_per_node", 1)),
            "-m", "grpo", "train"]


def resume_command(run_dir: Path, checkpoint: Path | None) -> str:
    """The command that resumes the run; for a run whose data or rewards live only in the Python process
    that started it (grpo.api's), which the command line cannot read, the API call."""
    held = _held_in_python(run_dir)
    if held:
        overrides = [f"run_dir={run_dir}", *([f"resume_from={checkpoint}"] if checkpoint is not None else [])]
        return (f"grpo.api.train(...) again in Python, with the same config, dataset, rewards and overrides "
                f"({', '.join(overrides)}): this run's {' and '.join(held)} live only in Python, where the "
                "command line cannot read them")
    parts = [*_launch_prefix(run_dir), "--config", str(run_dir / "config.yaml")]
    if checkpoint is not None:
        parts.append(f"resume_from={checkpoint}")
    return shlex.join(parts)


def _held_in_python(run_dir: Path) -> list[str]:
    """What of the run's saved config names in-memory data (`memory:...`) or Python reward functions
    (`python:NAME`), as the Python API registers them."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    if not isinstance(config, dict):
        return []
    task, evaluation = config.get("task") or {}, config.get("eval") or {}
    held = []
    if str(task.get("path") or "").startswith("memory:"):
        held.append(f"dataset (task.path={task['path']})")
    rewards = [r for value in (task.get("reward"), evaluation.get("reward"))
               for r in (value if isinstance(value, list) else [value]) if str(r).startswith("python:")]
    if rewards:
        held.append(f"reward functions ({', '.join(map(str, dict.fromkeys(rewards)))})")
    return held


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
