"""The dataset task: problems from the rows of any JSONL, Parquet or CSV files or hub dataset, through a
column mapping (which column is the prompt, which the answer, how the gold is read from the answer)."""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.base import RESERVED_COLUMNS, ListTask, Problem
from grpo.tasks.files import Table, expand_files, read_files, read_hub, read_memory, split_files

log = logging.getLogger(__name__)

GSM8K_MARK = "####"  # read by default when task.gold_pattern is null


@dataclass(frozen=True)
class Columns:
    """Which columns hold the prompt and the answer, and how the gold is read from the answer."""

    prompt: str
    answer: str | None  # None: the data has no gold answer
    gold_pattern: re.Pattern[str] | None  # None: the whole answer is the gold
    keys: tuple[str, str]  # where the prompt and answer columns were set, for error messages
    pattern_key: str = "task.gold_pattern"  # where the gold pattern was set, likewise
    # The answer column is task.answer_column's default, which data made for TRL lacks (TRL has no gold column):
    # where it is absent there is no gold, said at load, rather than a refusal.
    answer_optional: bool = False

    @classmethod
    def from_config(cls, cfg: TaskConfig) -> Columns:
        pattern = None
        if cfg.gold_pattern is not None:
            try:
                pattern = re.compile(cfg.gold_pattern)
            except re.error as exc:
                raise ConfigError(f"task.gold_pattern={cfg.gold_pattern!r} is not a valid regular expression: {exc}"
                                  ) from exc
        return cls(cfg.prompt_column, cfg.answer_column, pattern, ("task.prompt_column", "task.answer_column"),
                   answer_optional=cfg.answer_column == TaskConfig().answer_column)

    def for_table(self, table: Table) -> Columns:
        """These columns as `table` has them: without an answer column where the default one is absent."""
        if self.answer_optional and self.answer not in table.columns:
            return dataclasses.replace(self, answer=None)
        return self

    def gold(self, value: Any, where: str) -> str:
        if value is None:
            return ""
        if isinstance(value, (dict, list, tuple)):
            raise ConfigError(f"{where}: column {self.answer!r} must hold the answer as text or a number, "
                              f"got {type(value).__name__}")
        text = str(value)
        if self.gold_pattern is None:
            # GSM8K's answers are a worked solution ending in `#### N`: the gold is N, not the prose.
            return text.rpartition(GSM8K_MARK)[2].strip() if GSM8K_MARK in text else text.strip()
        matches = list(self.gold_pattern.finditer(text))
        if not matches:
            return ""  # the math reward cannot score an empty gold: such samples are unscorable, never 0
        gold = matches[-1].group(1 if self.gold_pattern.groups else 0)
        return (gold or "").strip()  # an optional group that did not take part is None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def chat_messages(value: list | tuple, where: str, column: str) -> tuple[dict[str, Any], ...]:
    if not value:
        raise ConfigError(f"{where}: column {column!r} holds an empty list of chat messages")
    for i, message in enumerate(value):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise ConfigError(f"{where}: column {column!r} holds chat messages, but message {i} is {_short(message)}; "
                              'each must be {"role": "...", "content": "..."} with text values')
    return tuple(dict(message) for message in value)


# TRL has no answer column: rewards written for it read their own columns (solution, ground_truth, ...).
_NO_ANSWER = ("set task.answer_column to the column holding the gold answer, or task.answer_column=null if your "
              "reward functions read their own columns (as TRL's do)")


def _check_columns(table: Table, columns: Columns) -> None:
    for column, key in ((columns.prompt, columns.keys[0]), (columns.answer, columns.keys[1])):
        if column is not None and column not in table.columns:
            fix = f"; {_NO_ANSWER}" if key == "task.answer_column" else ""
            raise ConfigError(f"{table.source} has no column {column!r} ({key}); its columns: "
                              f"{', '.join(table.columns)}{fix}")
    for name in RESERVED_COLUMNS:
        if name in table.columns and not (name == "gold" and columns.answer == "gold"):
            fix = " or set task.answer_column=gold" if name == "gold" else ""
            raise ConfigError(f"{table.source}: column {name!r} clashes with the {name!r} keyword reward functions "
                              f"are given; rename the column{fix}")


def to_problems(table: Table, columns: Columns, id_prefix: str, system_prompt: str | None) -> list[Problem]:
    if not table.rows:
        raise ConfigError(f"{table.source} has no problems: it has no rows")
    columns = columns.for_table(table)
    _check_columns(table, columns)
    problems = []
    for i, (row, where) in enumerate(zip(table.rows, table.where)):
        value = row[columns.prompt]
        messages = None
        if isinstance(value, str) and value.strip():
            question = value
        elif isinstance(value, (list, tuple)):
            messages = chat_messages(value, where, columns.prompt)
            if system_prompt:
                raise ConfigError(f"{where}: task.system_prompt applies to text prompts, but column "
                                  f"{columns.prompt!r} holds chat messages, used as given: put the system message "
                                  "in the data")
            users = [m["content"] for m in messages if m["role"] == "user"]
            question = users[-1] if users else messages[-1]["content"]
        elif value is None or isinstance(value, str):
            raise ConfigError(f"{where}: no prompt (column {columns.prompt!r} is empty)")
        else:
            raise ConfigError(f"{where}: column {columns.prompt!r} must hold the prompt as text or a list of "
                              f"{{role, content}} messages, got {type(value).__name__}")
        gold = columns.gold(row[columns.answer], where) if columns.answer is not None else ""
        # TRL gives reward functions every column but `prompt` (passed as `prompts`) and `completion`.
        kept = {name: v for name, v in row.items() if name not in (columns.prompt, "completion")}
        problems.append(Problem(f"{id_prefix}-{i}", question, gold, messages, kept))
    return problems


def _without_gold(problems: list[Problem], table: Table, columns: Columns) -> str:
    """The load-time report's note on rows without a gold answer; a gold pattern that matches no row is refused
    (every answer would be unscorable, found only steps into a run)."""
    if columns.answer is None and columns.answer_optional:
        return (f" (no column {TaskConfig().answer_column!r}, so no gold answers, as in TRL: the reward functions read "
                "their own columns; task.answer_column=COLUMN names the gold's column)")
    if columns.answer is None:
        return " (no answer column: every gold is empty)"
    missing = [i for i, p in enumerate(problems) if not p.gold]
    if columns.gold_pattern is not None and len(missing) == len(problems):
        answered = next((i for i in missing if table.rows[i][columns.answer] not in (None, "")), missing[0])
        fix = ("Fix the pattern (its first group is the gold), or set task.gold_pattern=null to use the whole answer"
               if columns.pattern_key == "task.gold_pattern" else "For data in another format use task.name=dataset")
        raise ConfigError(f"{columns.pattern_key} '{columns.gold_pattern.pattern}' matches no answer in "
                          f"{table.source} (column {columns.answer!r}); e.g. {table.where[answered]}: "
                          f"{_short(table.rows[answered][columns.answer])}. {fix}")
    notes = []
    if columns.gold_pattern is None and columns.answer is not None:
        marked = sum(GSM8K_MARK in str(row[columns.answer]) for row in table.rows if row[columns.answer] is not None)
        if marked:
            notes.append(f"{marked} golds read after '{GSM8K_MARK}' (GSM8K's format)")
    if missing:
        notes.append(f"{len(missing)} without a gold answer, e.g. {table.where[missing[0]]}: unscorable (None, "
                     "never 0) for rewards that compare with the gold")
    return f" ({'; '.join(notes)})" if notes else ""


def read_split(source: str | None, split: str, files: list[str], files_key: str) -> Table:
    """A split from explicit files (`files_key`), else from `source`: a directory, or hub:NAME[:CONFIG]."""
    if files:
        return read_files(expand_files(files, files_key))
    if source is None:
        raise ConfigError(f"no {split} data: set task.path to a directory with the split files or to "
                          f"hub:ORG/NAME, or set {files_key}")
    if source == "hub":
        raise ConfigError("task.path=hub is GSM8K's shorthand; name the dataset: hub:ORG/NAME or hub:ORG/NAME:CONFIG")
    if source.startswith("hub:"):
        return read_hub(source, split)
    if source.startswith("memory:"):
        return read_memory(source, split)
    return read_files(split_files(Path(source).expanduser(), split, files_key))


class DatasetTask(ListTask):
    name = "dataset"

    def __init__(self, cfg: TaskConfig, source: str | None = None, columns: Columns | None = None,
                 splits: tuple[str, ...] = ("train", "test")) -> None:
        """`source` and `columns` default to task.path and the task.*_column keys; named tasks pass their own.
        `splits`: which of train and test to read; the other is left empty."""
        source = cfg.path if source is None else source
        columns = columns or Columns.from_config(cfg)
        loaded: dict[str, list[Problem]] = {"train": [], "test": []}
        report = []
        for which, split, files, key in (("train", cfg.train_split, cfg.train_files, "task.train_files"),
                                         ("test", cfg.test_split, cfg.test_files, "task.test_files")):
            if which not in splits:
                continue
            table = read_split(source, split, files, key)
            problems = to_problems(table, columns, f"{self.name}-{split}", cfg.system_prompt)
            if which == "train" and cfg.max_train_problems:
                problems = problems[: cfg.max_train_problems]
            report.append(f"{len(problems)} {'training' if which == 'train' else 'held-out'} problems from "
                          f"{table.source}{_without_gold(problems, table, columns.for_table(table))}")
            loaded[which] = problems
        super().__init__(train=loaded["train"], test=loaded["test"])
        # Logged once every split loaded, so a data error stays the only line a failed start prints.
        log.info("%s: %s%s", self.name, "; ".join(report), text_prompt_note(loaded["train"] + loaded["test"], cfg))


def text_prompt_note(problems: list[Problem], cfg: TaskConfig) -> str:
    """What is done to text prompts (TRL sends them as they are), said where users look first."""
    if not any(p.messages is None for p in problems):
        return ""
    if cfg.text_prompts == "raw":
        return ". Text prompts are sent as they are (task.text_prompts=raw), as TRL sends them"
    template = "task.chat_template's" if cfg.chat_template else "the tokenizer's"
    added = (f"task.instruction {cfg.instruction!r} appended (task.instruction='' for none)" if cfg.instruction
             else "no instruction appended")
    return (f". Text prompts are sent as a user message through {template} chat template, with {added}; TRL "
            "sends them as they are: task.text_prompts=raw")
