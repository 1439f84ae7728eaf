"""The README stays one page and shows the commands CI runs; the configuration reference lists every key."""

from __future__ import annotations

import dataclasses
import typing

from grpo.config import RunConfig
from tests.docs import DOCS, REPO, code_blocks, commands, config_reference

README = REPO / "README.md"


def test_readme_is_one_page():
    assert len(README.read_bytes()) < 10_240


def test_readme_shows_the_two_commands_and_ci_runs_the_test_command():
    shown = [commands(text) for lang, text in code_blocks(README) if lang == "bash"]
    quickstart, tests = shown[0], shown[1]
    assert len(quickstart) == 1 and quickstart[0].endswith("&& .venv/bin/grpo quickstart")
    assert tests == ["python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/pytest -q"]
    assert tests[0] in (REPO / ".ci" / "run").read_text().splitlines()
    # The getting-started page shows the same two commands, word for word.
    started = [c for lang, text in code_blocks(DOCS / "getting-started.md") if lang == "bash" for c in commands(text)]
    assert quickstart[0] in started and tests[0] in started


def test_readme_own_data_command_is_the_own_data_page_s():
    readme = [commands(text) for lang, text in code_blocks(README) if lang == "bash"][2]
    page = [commands(text) for lang, text in code_blocks(DOCS / "own-data.md") if lang == "bash"][0]
    assert readme == page and "task.name=dataset" in readme[0]


def _keys(cls: type, prefix: str = "") -> set[str]:
    hints = typing.get_type_hints(cls)
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys |= _keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            keys.add(prefix + f.name)
    return keys


def _documented(page: str) -> dict[str, str]:
    """key -> its row's meaning, from the page's tables: `key | default | meaning`, or for a table of
    like sections (the guard's breakers) `section | meaning | one column per key`."""
    documented: dict[str, str] = {}
    header: list[str] = []
    for line in page.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if not header:
            header = cells
        elif not set(line) <= set("|- "):
            key = cells[0].strip("`")
            if header[1:] == ["default", "meaning"]:
                documented[key] = cells[2]
            else:
                assert header[1] == "meaning", header
                documented.update({f"{key}.{column}": cells[1] for column in header[2:]})
    return documented


def test_configuration_reference_documents_every_key_and_no_other():
    documented = _documented(config_reference().reference_markdown())
    assert set(documented) == _keys(RunConfig)
    assert [key for key, meaning in documented.items() if not meaning] == []


def test_configuration_reference_shows_defaults():
    page = config_reference().reference_markdown()
    assert "| `model.name` | `smollm2-135m-instruct` |" in page
    assert "| `recover` | `auto` |" in page
    assert "| `0.5` | `stop` | `2` | `true` |" in next(line for line in page.splitlines()
                                                     if line.startswith("| `guard.unscorable_rewards` |"))
