"""Reading the gold answer out of an answer column's value, and counting how each was read so that the load says it.

Without task.gold_pattern a value is read by the formats datasets ship: a GSM8K answer is a worked solution ending in
`#### N` (the gold is N), a MATH solution boxes its answer (the gold is the last `\\boxed{}`), verl's and AReaL's
ground truths are often one-element lists (the gold is the item), ASDiv's answers carry their unit in parentheses
after the number (`9 (apples)`: the gold is 9, as a completion states it). A list of several answers is refused:
which of them a single gold should be cannot be known."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grpo.errors import ConfigError
from grpo.rewards.extraction import last_boxed
from grpo.tasks.fields import name_a_field, short

GSM8K_MARK = "####"
# How a gold was read, by name, and the load report's words for it.
WAYS = {
    "gsm8k": f"read after '{GSM8K_MARK}' (GSM8K's format)",
    "boxed": "read from the answer's last \\boxed{} (MATH's format; task.gold_pattern reads it otherwise)",
    "list": "read from one-element lists",
    "unit": "read without the unit in parentheses after the number (ASDiv's format, e.g. '9 (apples)' is 9)",
}
# A number, then only a word or a few in parentheses: a unit, which no completion boxes with its answer.
_UNIT_AFTER = re.compile(r"(-?[\d.,/]*\d)\s*\(\s*[A-Za-z][A-Za-z .'/-]*\)")


@dataclass
class GoldReader:
    """Reads golds from `column`'s values (task.answer_column, or a named task's column), by `pattern` if given."""

    column: str
    pattern: re.Pattern[str] | None
    key: str = "task.answer_column"
    ways: Counter[str] = field(default_factory=Counter)

    def read(self, value: Any, where: str) -> str:
        if isinstance(value, (list, tuple)):
            value = self._one_answer(value, where)
        if value is None:
            return ""
        if isinstance(value, Mapping):
            raise ConfigError(name_a_field(where, self.column, value, self.key, "the answer"))
        # An integral float is a JSON writer's int (pandas stores a column of ints with gaps as floats): 27.0 is 27.
        text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
        if self.pattern is not None:
            matches = list(self.pattern.finditer(text))
            if not matches:
                return ""  # the math reward cannot score an empty gold: such samples are unscorable, never 0
            gold = matches[-1].group(1 if self.pattern.groups else 0)
            return (gold or "").strip()  # an optional group that did not take part is None
        if GSM8K_MARK in text:
            self.ways["gsm8k"] += 1
            return text.rpartition(GSM8K_MARK)[2].strip()
        boxed = last_boxed(text)
        if boxed is not None:
            self.ways["boxed"] += 1
            return boxed
        unit = _UNIT_AFTER.fullmatch(text.strip())
        if unit is not None:
            self.ways["unit"] += 1
            return unit.group(1)
        return text.strip()

    def _one_answer(self, value: list | tuple, where: str) -> Any:
        distinct = list(dict.fromkeys(str(item) for item in value if item is not None))
        if len(distinct) > 1:
            raise ConfigError(f"{where}: column {self.column!r} holds {len(distinct)} answers ({short(value)}), and a "
                              f"gold is one answer: set {self.key} to a column holding one, or {self.key}=null and "
                              f"compare with the list in your reward function (it gets the column as "
                              f"`{self.column.partition('.')[0]}`)")
        if not distinct:
            return None
        self.ways["list"] += 1
        return next(item for item in value if item is not None)

    def notes(self) -> list[str]:
        return [f"{self.ways[way]} golds {WAYS[way]}" for way in WAYS if self.ways[way]]
