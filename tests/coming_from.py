"""Checks shared by the pages for users of other trainers (docs/coming-from-verl.md, coming-from-areal.md,
coming-from-openrlhf.md, coming-from-swift.md) and the one-line refusals behind them (grpo.config.foreign_names):
the names tables against the code, every grpo key and setting a page gives, the defaults a page states."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from grpo.cli import main
from grpo.config import RunConfig, load_config
from grpo.config.foreign_names import ForeignName
from grpo.errors import ConfigError
from tests.docs import grpo_settings_load, in_backticks, table_under

COMMAND_LINE = frozenset({"resume_from"})  # grpo train's override that is not a config key


def grpo_defaults(section: object = None, prefix: str = "") -> dict[str, object]:
    """Every dotted key of grpo's config -> its default; a key whose value is a mapping
    (task.chat_template_kwargs) is one key, not a section."""
    out: dict[str, object] = {}
    config = RunConfig() if section is None else section
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            out |= grpo_defaults(value, f"{prefix}{field.name}.")
        else:
            out[prefix + field.name] = value
    return out


def refusal(*overrides: str, config: str = "tiny") -> str:
    """The one-line ConfigError `overrides` get."""
    with pytest.raises(ConfigError) as info:
        load_config(config, list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


def told(argv: list[str], capsys) -> str:
    """What `grpo` says, in one line, refusing `argv` (exit 2, argparse's refusals included), without the
    "config error: " before it."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    assert status == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message
    return message.removeprefix("config error: ")


def written(message: str, page: str) -> dict[str, str]:
    """The overrides a message (ending with its `page`) writes -> the names that say them."""
    section = message.partition("write them as grpo's: ")[2].partition("; set by hand: ")[0]
    section = section.partition("; grpo has no key for: ")[0].removesuffix(f" ({page})")
    return dict(re.findall(r"([^()]+?) \(([\w.+, ]+)\)(?:, |$)", section))


def check_names_table(page: Path, heading: str, table: Mapping[str, ForeignName]) -> None:
    """The rows under `heading` give, for each name, the keys grpo names for it, and list every name of `table`."""
    rows = table_under(page, heading)[1:]
    assert len(rows) >= 2
    listed: set[str] = set()
    for names, grpo, _ in rows:
        assert in_backticks(grpo) or grpo == "—", grpo
        for name in in_backticks(names):
            assert set(table[name].keys) == set(in_backticks(grpo)), name
            listed.add(name)
    assert listed == set(table)


def check_grpo_settings(page: Path, headings: tuple[str, ...], others: frozenset[str] = frozenset(),
                        at_least: int = 3) -> None:
    """Every grpo key the tables under `headings` give is grpo's (or grpo train's command line's, or one of `others`:
    another trainer's names under grpo's sections), and every `key=value` among them loads."""
    cells = [cell for heading in headings for row in table_under(page, heading)[1:] for cell in row[1:]]
    assert grpo_settings_load(cells, grpo_defaults(), COMMAND_LINE | others) >= at_least


def check_defaults_table(page: Path) -> None:
    """The grpo defaults the page's defaults table states are grpo's."""
    keys = grpo_defaults()
    rows = table_under(page, "## Defaults that differ")[1:]
    assert len(rows) >= 8
    for _, _, grpo, default, _ in rows:
        if in_backticks(grpo):
            (key,), (value,) = in_backticks(grpo), in_backticks(default)
            assert yaml.safe_load(value) == keys[key], (key, value, keys[key])
