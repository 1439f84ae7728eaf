"""GSM8K from local jsonl files (`{"question", "answer"}` with the gold after `####`) or the hub."""

from __future__ import annotations

import json
from pathlib import Path

from grpo.config import ConfigError
from grpo.rewards import gsm8k_gold
from grpo.tasks.base import ListTask, Problem


def read_gsm8k_jsonl(path: Path, split: str) -> list[Problem]:
    problems = []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                question, answer = row["question"], row["answer"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ConfigError(
                    f"{path}:{line_no}: each line must be JSON with 'question' and 'answer' keys ({exc})"
                ) from exc
            gold = gsm8k_gold(answer)
            # An answer with no '####' line keeps an empty gold: the reward marks it unscorable.
            problems.append(Problem(id=f"gsm8k-{split}-{line_no - 1}", question=question, gold=gold or ""))
    return problems


def load_gsm8k_split(source: str, split: str) -> list[Problem]:
    if source == "hub":
        try:
            from datasets import load_dataset
        except ImportError as exc:
            raise ConfigError("task.path=hub needs the `datasets` package: pip install 'grpo[hub]'") from exc
        rows = load_dataset("openai/gsm8k", "main", split=split)
        return [
            Problem(id=f"gsm8k-{split}-{i}", question=r["question"], gold=gsm8k_gold(r["answer"]) or "")
            for i, r in enumerate(rows)
        ]
    path = Path(source).expanduser() / f"{split}.jsonl"
    if not path.is_file():
        raise ConfigError(f"GSM8K split not found at {path}; set task.path to a directory with {split}.jsonl, or hub")
    problems = read_gsm8k_jsonl(path, split)
    if not problems:
        raise ConfigError(f"{path} has no problems: each line must be JSON with 'question' and 'answer' keys")
    return problems


class GSM8KTask(ListTask):
    name = "gsm8k"

    def __init__(self, source: str, max_train_problems: int | None = None) -> None:
        train = load_gsm8k_split(source, "train")
        if max_train_problems:
            train = train[:max_train_problems]
        super().__init__(train=train, test=load_gsm8k_split(source, "test"))
