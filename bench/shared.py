"""What the benchmarks share: the repository, the quickstart's work as both trainers run it, the prompts in
grpo's order, and the machine's name."""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Work:
    problems_per_step: int = 8
    samples_per_problem: int = 8
    max_new_tokens: int = 40
    temperature: float = 1.0
    lr: float = 1e-5
    micro_batch_size: int = 32
    seed: int = 0


def prompts(work: Work, count: int) -> list[dict]:
    """The first `count` training problems in grpo's order, as the chat messages grpo renders them."""
    from grpo.config import load_config
    from grpo.tasks import build_task
    from grpo.tasks.prompts import build_messages

    cfg = load_config("quickstart", [f"train.seed={work.seed}"])
    task = build_task(cfg.task, splits=("train",))
    rows = []
    for index in range(count):
        problem = task.train_problem(index, cfg.train.seed)
        rows.append({"messages": build_messages(problem, cfg.task), "gold": problem.gold})
    return rows


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return f"{model}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)"
