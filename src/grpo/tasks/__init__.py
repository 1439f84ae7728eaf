"""Tasks: where problems come from. A task yields `Problem`s by index, so a data position is one integer."""

from __future__ import annotations

from grpo.config import ConfigError, TaskConfig
from grpo.tasks.base import Problem, Task


def build_task(cfg: TaskConfig) -> Task:
    if cfg.name == "arith":
        from grpo.tasks.arith import ArithTask

        return ArithTask(cfg.arith)
    if cfg.name == "gsm8k":
        from grpo.tasks.gsm8k import GSM8KTask

        return GSM8KTask(cfg.path, max_train_problems=cfg.max_train_problems)
    raise ConfigError(f"task.name={cfg.name!r} is unknown; valid: arith, gsm8k")


__all__ = ["Problem", "Task", "build_task"]
