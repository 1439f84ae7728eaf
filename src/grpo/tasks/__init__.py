"""Tasks: where problems come from. A task yields `Problem`s by index, so a data position is one integer."""

from __future__ import annotations

from pathlib import Path

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.base import Problem, Task, reward_columns, reward_inputs


def build_task(cfg: TaskConfig, splits: tuple[str, ...] = ("train", "test")) -> Task:
    """The task with its data read and checked, and the chat template loaded: every data and prompt error
    surfaces here, before a model is loaded. `splits`: which of train and test to read (an evaluation
    needs only its own). Relative paths in `cfg` are made absolute in place, so the config a run saves
    reads the same files when resumed from another folder."""
    from grpo.tasks.prompts import load_chat_template

    absolute_paths(cfg)
    load_chat_template(cfg.chat_template)
    if cfg.name == "arith":
        from grpo.tasks.arith import ArithTask

        return ArithTask(cfg.arith)
    if cfg.name == "gsm8k":
        from grpo.tasks.gsm8k import GSM8KTask

        return GSM8KTask(cfg, splits)
    if cfg.name == "dataset":
        from grpo.tasks.dataset import DatasetTask

        return DatasetTask(cfg, splits=splits)
    raise ConfigError(f"task.name={cfg.name!r} is unknown; valid: arith, gsm8k, dataset")


def absolute_paths(cfg: TaskConfig) -> None:
    """task.path, task.train_files, task.test_files and a task.chat_template file, made absolute."""
    def absolute(path: str) -> str:
        return str(Path(path).expanduser().absolute())

    if cfg.path is not None and cfg.path != "hub" and ":" not in cfg.path:
        cfg.path = absolute(cfg.path)
    cfg.train_files = [absolute(p) for p in cfg.train_files]
    cfg.test_files = [absolute(p) for p in cfg.test_files]
    template = cfg.chat_template
    if template is not None and "{{" not in template and "{%" not in template and Path(template).expanduser().is_file():
        cfg.chat_template = absolute(template)


__all__ = ["Problem", "Task", "build_task", "reward_columns", "reward_inputs"]
