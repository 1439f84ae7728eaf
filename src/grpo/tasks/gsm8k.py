"""GSM8K: the dataset task with GSM8K's columns (`question`; `answer` with the gold after `####`), found from
any working directory when task.path is not set."""

from __future__ import annotations

import os
import re
from pathlib import Path

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.dataset import Columns, DatasetTask

COLUMNS = Columns("question", "answer", re.compile(r"####\s*(.*)"), ("GSM8K's question", "GSM8K's answer"),
                  "GSM8K's gold pattern")
HUB = "hub:openai/gsm8k:main"
# Keys that choose other files or columns: a GSM8K run that set them would silently not use them.
DATASET_KEYS = ("train_files", "test_files", "train_split", "test_split", "prompt_column", "prompt_template",
                "answer_column", "gold_pattern", "held_out")


def checkout_dir() -> Path | None:
    """The repository checkout grpo runs from (an editable install or PYTHONPATH=src), if it is one."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() else None


def search_places() -> list[tuple[str, Path]]:
    """Where GSM8K is looked for, in order. $GRPO_DATA, when set, is the only place: an explicit choice that
    is wrong must be an error, not a fallback to a guess."""
    data_root = os.environ.get("GRPO_DATA")
    if data_root:
        return [("$GRPO_DATA/gsm8k", Path(data_root).expanduser() / "gsm8k")]
    places = [("../shared/data/gsm8k from the working directory", Path.cwd().parent / "shared" / "data" / "gsm8k")]
    checkout = checkout_dir()
    if checkout is not None:
        places.append(("../shared/data/gsm8k from the checkout", checkout.parent / "shared" / "data" / "gsm8k"))
    return places


def find_gsm8k() -> Path:
    places = search_places()
    for _, path in places:
        if path.is_dir():
            return path.resolve()
    looked = "; ".join(f"{label}: {path.resolve()}" for label, path in places)
    raise ConfigError(f"GSM8K not found; looked in {looked}. Set task.path to a directory with train.jsonl and "
                      "test.jsonl, GRPO_DATA to a directory holding gsm8k/, or task.path=hub")


class GSM8KTask(DatasetTask):
    name = "gsm8k"

    def __init__(self, cfg: TaskConfig, splits: tuple[str, ...] = ("train", "test")) -> None:
        defaults = TaskConfig()
        changed = [key for key in DATASET_KEYS if getattr(cfg, key) != getattr(defaults, key)]
        if changed:
            raise ConfigError(f"task.{changed[0]} is for task.name=dataset; gsm8k reads GSM8K's question and answer "
                              "columns: for other files or columns use task.name=dataset")
        source = HUB if cfg.path == "hub" else str(find_gsm8k()) if cfg.path is None else cfg.path
        super().__init__(cfg, source, COLUMNS, splits)
