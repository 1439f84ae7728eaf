"""The dataset task: problems from the rows of any JSONL, JSON, Parquet or CSV files or hub dataset, through a
column mapping (which column or nested field is the prompt, or a template of several, which the answer, how the gold
is read from the answer)."""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.base import RESERVED_COLUMNS, ListTask, Problem
from grpo.tasks.fields import describe, found, lookup, name_a_field, position, short
from grpo.tasks.files import Table, expand_files, read_files, read_hub, read_memory, split_files
from grpo.tasks.gold import GoldReader
from grpo.tasks.held_out import hold_out, trained_on
from grpo.tasks.messages import SHAREGPT_NOTE, chat_messages, prefill_note, prefills
from grpo.tasks.scorable import math_cannot_score, scores_with_math
from grpo.tasks.template import PromptTemplate, alpaca_input_left_out, wordless_note

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Columns:
    """Which columns hold the prompt and the answer, and how the gold is read from the answer."""

    prompt: str  # a column, or a dotted path to a field inside one (grpo.tasks.fields)
    answer: str | None  # likewise; None: the data has no gold answer
    gold_pattern: re.Pattern[str] | None  # None: the formats grpo.tasks.gold knows, else the whole answer
    keys: tuple[str, str]  # where the prompt and answer columns were set, for error messages
    pattern_key: str = "task.gold_pattern"  # where the gold pattern was set, likewise
    # The answer column is task.answer_column's default, which data made for TRL lacks (TRL has no gold column):
    # where it is absent there is no gold, said at load, rather than a refusal.
    answer_optional: bool = False
    template: PromptTemplate | None = None  # a text prompt made of several columns, instead of the prompt column

    @classmethod
    def from_config(cls, cfg: TaskConfig) -> Columns:
        pattern = None
        if cfg.gold_pattern is not None:
            try:
                pattern = re.compile(cfg.gold_pattern)
            except re.error as exc:
                raise ConfigError(f"task.gold_pattern={cfg.gold_pattern!r} is not a valid regular expression: {exc}"
                                  ) from exc
        template = PromptTemplate(cfg.prompt_template) if cfg.prompt_template is not None else None
        return cls(cfg.prompt_column, cfg.answer_column, pattern, ("task.prompt_column", "task.answer_column"),
                   answer_optional=cfg.answer_column == TaskConfig().answer_column, template=template)

    def for_table(self, table: Table) -> Columns:
        """These columns as `table` has them: without an answer column where the default one is absent."""
        if self.answer_optional and self.answer not in table.columns:
            return dataclasses.replace(self, answer=None)
        return self

    def gold_reader(self) -> GoldReader | None:
        return GoldReader(self.answer, self.gold_pattern, self.keys[1]) if self.answer is not None else None

    @property
    def prompt_read(self) -> str | None:
        """The prompt's column as read; None where task.prompt_template makes the prompt instead."""
        return self.prompt if self.template is None else None

    def gold_message(self) -> str | None:
        """Where the gold is read from a message of the prompt's own messages (`conversations.-1.value`: a ShareGPT
        conversation's answer, its last turn), that message's position: the prompt is the messages before it."""
        if self.prompt_read is None or self.answer is None or not self.answer.startswith(f"{self.prompt}."):
            return None
        part = self.answer[len(self.prompt) + 1:].partition(".")[0]
        return part if part.removeprefix("-").isdigit() else None


# TRL has no answer column: rewards written for it read their own columns (solution, ground_truth, ...).
_NO_ANSWER = ("set task.answer_column to the column holding the gold answer, or task.answer_column=null if your "
              "reward functions read their own columns (as TRL's do)")


def _check_columns(table: Table, columns: Columns) -> None:
    if columns.template is not None:
        columns.template.check(table)
    else:
        alpaca_input_left_out(table, columns.prompt)
    for column, key in ((columns.prompt_read, columns.keys[0]), (columns.answer, columns.keys[1])):
        if column is not None and not found(table.rows, column):
            fix = f"; {_NO_ANSWER}" if key == "task.answer_column" else ""
            read = f" ({'; '.join(table.notes)})" if table.notes else ""
            raise ConfigError(f"{table.source} has no column {column!r} ({key}); its columns{read}: "
                              f"{describe(table.columns, table.rows)}{fix}")
    for name in RESERVED_COLUMNS:
        if name in table.columns and not (name == "gold" and columns.answer == "gold"):
            fix = " or set task.answer_column=gold" if name == "gold" else ""
            raise ConfigError(f"{table.source}: column {name!r} clashes with the {name!r} keyword reward functions "
                              f"are given; rename the column{fix}")


@dataclass
class Split:
    """A split's problems, what the load says of how they were read, and how their golds were read."""

    problems: list[Problem]
    notes: list[str]
    golds: GoldReader | None


def to_problems(table: Table, columns: Columns, id_prefix: str, system_prompt: str | None) -> Split:
    if not table.rows:
        raise ConfigError(f"{table.source} has no problems: it has no rows")
    columns = columns.for_table(table)
    _check_columns(table, columns)
    golds = columns.gold_reader()
    gold_message = columns.gold_message()
    problems = []
    sharegpt = False
    for i, (row, where) in enumerate(zip(table.rows, table.where)):
        value = columns.template.render(row) if columns.template is not None else lookup(row, columns.prompt)
        if gold_message is not None and isinstance(value, (list, tuple)):
            cut = position(gold_message, len(value))
            value = value[:cut] if cut is not None else value
        messages = None
        if isinstance(value, str) and value.strip():
            question = value
        elif isinstance(value, (list, tuple)):
            messages, from_sharegpt = chat_messages(value, where, columns.prompt)
            sharegpt = sharegpt or from_sharegpt
            if system_prompt:
                raise ConfigError(f"{where}: task.system_prompt applies to text prompts, but column "
                                  f"{columns.prompt!r} holds chat messages, used as given: put the system message "
                                  "in the data")
            users = [m["content"] for m in messages if m["role"] == "user"]
            question = users[-1] if users else messages[-1]["content"]
        elif value is None or isinstance(value, str):
            empty = ("task.prompt_template gives empty text" if columns.template is not None
                     else f"column {columns.prompt!r} is empty")
            raise ConfigError(f"{where}: no prompt ({empty})")
        elif isinstance(value, dict):
            raise ConfigError(name_a_field(where, columns.prompt, value, columns.keys[0], "the prompt"))
        else:
            raise ConfigError(f"{where}: column {columns.prompt!r} must hold the prompt as text or a list of "
                              f"{{role, content}} messages, got {type(value).__name__}")
        gold = golds.read(lookup(row, columns.answer), where) if golds is not None else ""
        # TRL gives reward functions every column but `prompt` (passed as `prompts`) and `completion`; a prompt
        # read from a field inside a column, or made from a template, leaves every column whole.
        left_out = ("completion",) if columns.template is not None else (columns.prompt, "completion")
        kept = {name: v for name, v in row.items() if name not in left_out}
        problems.append(Problem(f"{id_prefix}-{i}", question, gold, messages, kept))
    prefilled = [where for problem, where in zip(problems, table.where) if prefills(problem)]
    told = (f"golds read from message {gold_message} of column {columns.prompt!r}, left out of the prompt with the "
            "messages after it") if gold_message is not None else None
    notes = [*table.notes, *([SHAREGPT_NOTE] if sharegpt else []),
             *(wordless_note(problems, columns.prompt) if columns.template is None else []),
             *([prefill_note(len(prefilled), prefilled[0])] if prefilled else []),
             *(golds.notes() if golds is not None else []), *([told] if told else [])]
    return Split(problems, notes, golds)


def _load_notes(problems: list[Problem], table: Table, columns: Columns, notes: list[str]) -> str:
    """The load-time report's note on how the rows were read and on rows without a gold answer; a gold pattern that
    matches no row is refused (every answer would be unscorable, found only steps into a run)."""
    notes = list(notes)
    if columns.answer is None and columns.answer_optional:
        notes.append(f"no column {TaskConfig().answer_column!r}, so no gold answers, as in TRL: the reward functions "
                     "read their own columns; task.answer_column=COLUMN names the gold's column")
    elif columns.answer is None:
        notes.append("no answer column: every gold is empty")
    else:
        missing = [i for i, p in enumerate(problems) if not p.gold]
        if columns.gold_pattern is not None and len(missing) == len(problems):
            answer = [lookup(row, columns.answer) for row in table.rows]
            answered = next((i for i in missing if answer[i] not in (None, "")), missing[0])
            fix = ("Fix the pattern (its first group is the gold), or set task.gold_pattern=null to use the whole "
                   "answer" if columns.pattern_key == "task.gold_pattern"
                   else "For data in another format use task.name=dataset")
            raise ConfigError(f"{columns.pattern_key} '{columns.gold_pattern.pattern}' matches no answer in "
                              f"{table.source} (column {columns.answer!r}); e.g. {table.where[answered]}: "
                              f"{short(answer[answered])}. {fix}")
        if missing:
            notes.append(f"{len(missing)} without a gold answer, e.g. {table.where[missing[0]]}: unscorable (None, "
                         "never 0) for rewards that compare with the gold")
    return f" ({'; '.join(notes)})" if notes else ""


def read_split(source: str | None, split: str, files: list[str], files_key: str) -> Table:
    """A split from explicit files (`files_key`), else from `source`: a directory, or hub:NAME[:CONFIG]."""
    if files:
        return read_files(expand_files(files, files_key))
    if source is None:
        held_out = (" (or task.held_out=N: N problems drawn out of the training data)"
                    if files_key == "task.test_files" else "")
        raise ConfigError(f"no {split} data: set task.path to a directory with the split files or to "
                          f"hub:ORG/NAME, or set {files_key}{held_out}")
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
        if cfg.held_out and cfg.test_files:
            raise ConfigError("task.held_out draws the held-out problems out of the training data, and "
                              "task.test_files names held-out data too: keep one")
        if cfg.held_out:  # the training split is read either way: which problems are held out depends on all of it
            splits = ("train", *splits)
        loaded: dict[str, list[Problem]] = {"train": [], "test": []}
        report = []
        for which, split, files, key in (("train", cfg.train_split, cfg.train_files, "task.train_files"),
                                         ("test", cfg.test_split, cfg.test_files, "task.test_files")):
            if which not in splits or (which == "test" and cfg.held_out):
                continue
            table = read_split(source, split, files, key)
            read = to_problems(table, columns, f"{self.name}-{split}", cfg.system_prompt)
            if scores_with_math(cfg):
                read.notes.extend(math_cannot_score(table, read.problems, columns.prompt_read,
                                                    columns.for_table(table).answer, read.golds))
            problems = read.problems
            if which == "train" and cfg.held_out:
                problems, loaded["test"] = hold_out(problems, cfg.held_out, table.source)
            if which == "train" and cfg.max_train_problems:
                problems = problems[: cfg.max_train_problems]
            held = (f", {cfg.held_out} more drawn out of them as held-out problems (task.held_out)" if cfg.held_out
                    else "")
            report.append(f"{len(problems)} {'training' if which == 'train' else 'held-out'} problems from "
                          f"{table.source}{held}{_load_notes(problems, table, columns.for_table(table), read.notes)}")
            loaded[which] = problems
        super().__init__(train=loaded["train"], test=loaded["test"])
        # Logged once every split loaded, so a data error stays the only line a failed start prints.
        log.info("%s: %s%s", self.name, "; ".join(report), text_prompt_note(loaded["train"] + loaded["test"], cfg))
        shared = trained_on(loaded["train"], loaded["test"])
        if shared:
            log.warning("%s: %d of the %d held-out problems are also training problems (the same prompt, e.g. %s): "
                        "their evaluation measures what was trained on, not held-out accuracy; give held-out data of "
                        "its own (task.test_files; the Python API's eval_dataset), or task.held_out=N to draw N "
                        "problems out of the training data", self.name,
                        len(shared), len(loaded["test"]), shared[0].id)


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
