"""Tasks: where problems come from. A task yields `Problem`s by index, so a data position is one integer."""

from __future__ import annotations

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.base import Problem, Task, reward_columns


def build_task(cfg: TaskConfig) -> Task:
    """The task with its data read and checked, and the chat template loaded: every data and prompt error
    surfaces here, before a model is loaded."""
    from grpo.tasks.prompts import load_chat_template

    load_chat_template(cfg.chat_template)
    if cfg.name == "arith":
        from grpo.tasks.arith import ArithTask

        return ArithTask(cfg.arith)
    if cfg.name == "gsm8k":
        from grpo.tasks.gsm8k import GSM8KTask

        return GSM8KTask(cfg)
    if cfg.name == "dataset":
        from grpo.tasks.dataset import DatasetTask

        return DatasetTask(cfg)
    raise ConfigError(f"task.name={cfg.name!r} is unknown; valid: arith, gsm8k, dataset")


__all__ = ["Problem", "Task", "build_task", "reward_columns"]
