"""docs/coming-from-trl.md's tables, read as a test reads them: TRL's names and grpo's keys (GRPOConfig's, and
those TRL scripts use beyond it), and each side's stated defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.docs import DOCS, in_backticks, table_under

PAGE = DOCS / "coming-from-trl.md"
_TRAINER_ARG = re.compile(r"GRPOTrainer\((\w+)=\.\.\.\)")


@dataclass(frozen=True)
class TrlName:
    name: str
    trainer_argument: bool  # written `GRPOTrainer(name=...)`: an argument of GRPOTrainer, not a GRPOConfig field


def trl_names(cell: str) -> list[TrlName]:
    names = []
    for text in in_backticks(cell):
        argument = _TRAINER_ARG.fullmatch(text)
        names.append(TrlName(argument.group(1), True) if argument else TrlName(text, False))
    return names


def names_rows() -> list[tuple[list[TrlName], list[str], str]]:
    """(TRL's names, grpo's keys, the notes) of each row of the names table; no keys where grpo's cell is —."""
    return [(trl_names(trl), in_backticks(grpo), notes) for trl, grpo, notes in table_under(PAGE, "## Names")[1:]]


def script_names_rows() -> list[tuple[list[str], str, list[str], str]]:
    """(the names, where they come from, grpo's keys, the notes) of each row of the second names table, the
    names TRL scripts use beyond GRPOConfig; no keys where grpo's cell is —."""
    return [(in_backticks(names), origin, in_backticks(grpo), notes)
            for names, origin, grpo, notes in table_under(PAGE, "## Names in TRL scripts beyond GRPOConfig")[1:]]


def defaults_rows() -> list[tuple[str, str, str | None, str | None]]:
    """(TRL's field, its default as Python writes it, grpo's key, its default as YAML writes it) of each row of
    the defaults table; None where grpo's cells are —."""
    rows = []
    for trl, trl_default, grpo, grpo_default, _ in table_under(PAGE, "## Defaults that differ")[1:]:
        (name,), (value,) = in_backticks(trl), in_backticks(trl_default)
        key, default = in_backticks(grpo), in_backticks(grpo_default)
        rows.append((name, value, key[0] if key else None, default[0] if default else None))
    return rows


def defaults_header() -> list[str]:
    return table_under(PAGE, "## Defaults that differ")[0]
