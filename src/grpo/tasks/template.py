"""A text prompt made of several columns (task.prompt_template): a question beside its options, Alpaca's instruction
beside its input, Countdown's numbers beside its target. Each `{COLUMN}` (or dotted path) is replaced by the row's
value: text as it is, a list of texts one item per line, anything else as JSON (`[44, 19, 35]`, `23`); the two
characters `\\n` are a new line, as a command line cannot type one."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from grpo.errors import ConfigError
from grpo.tasks.base import Problem
from grpo.tasks.fields import describe, found, lookup
from grpo.tasks.files import Table

_FIELD = re.compile(r"\{([^{}\s]+)\}")
_WORD = re.compile(r"[^\W\d_]{2,}")  # two letters in a row: a word, not a variable or a unit
# Alpaca's columns (LLaMA-Factory's `alpaca` formatting): its prompt is the instruction and the input together.
ALPACA = ("instruction", "input")


@dataclass(frozen=True)
class PromptTemplate:
    text: str

    @property
    def fields(self) -> list[str]:
        return list(dict.fromkeys(_FIELD.findall(self.text)))

    def check(self, table: Table) -> None:
        """Every field the template names is a column or field of the table's rows."""
        if not self.fields:
            raise ConfigError(f"task.prompt_template={self.text!r} names no column: write {{COLUMN}} where a row's "
                              "value goes, e.g. '{question}\\n{options}'")
        missing = [name for name in self.fields if not found(table.rows, name)]
        if missing:
            raise ConfigError(f"task.prompt_template names {{{missing[0]}}}, but {table.source} has no such column or "
                              f"field; its columns: {describe(table.columns, table.rows)}")

    def render(self, row: dict[str, Any]) -> str:
        text = self.text.replace("\\n", "\n")
        return _FIELD.sub(lambda match: _shown(lookup(row, match.group(1))), text).strip()


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(item, str) for item in value):
        return "\n".join(value)
    return json.dumps(value, ensure_ascii=False)


def alpaca_input_left_out(table: Table, prompt: str) -> None:
    """Alpaca data read with task.prompt_column=instruction would lose the `input` of the rows that have one: refused,
    naming the template that reads both."""
    if prompt != ALPACA[0] or ALPACA[1] not in table.columns:
        return
    given = [i for i, row in enumerate(table.rows) if isinstance(row.get(ALPACA[1]), str) and row[ALPACA[1]].strip()]
    if given:
        raise ConfigError(f"{table.source}: {len(given)} rows hold an 'input' beside their 'instruction' (e.g. "
                          f"{table.where[given[0]]}), Alpaca's format, whose prompt is both, but task.prompt_column="
                          "instruction reads the instruction alone: task.prompt_template='{instruction}\\n\\n{input}' "
                          "reads both")


def wordless_note(problems: list[Problem], prompt: str) -> list[str]:
    """The load's note where every text prompt holds numbers and no word (`30,100,93`: Countdown's numbers alone):
    the model sees bare values, with no task stated, unless a template states it around them."""
    texts = [p.question for p in problems if p.messages is None]
    if not texts or not all(any(ch.isdigit() for ch in text) and not _WORD.search(text) for text in texts):
        return []
    return [f"no prompt of column {prompt!r} holds a word (e.g. {texts[0][:40]!r}): the model sees the values alone, "
            f"with task.instruction; task.prompt_template='... {{{prompt}}} ...' states the task around them, and can "
            "show other columns too (a Countdown target)"]
