"""Reading the README and the docs pages as a user reads them: their code blocks and the commands in them."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from grpo.config import load_config

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
_BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def code_blocks(page: Path) -> list[tuple[str, str]]:
    """-> (language, text) of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(page.read_text())]


def commands(block: str) -> list[str]:
    """The shell commands of a block: continuation lines joined, comments and blank lines left out."""
    joined = block.replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def config_reference() -> ModuleType:
    """docs/hooks/config_reference.py, the mkdocs hook that renders the configuration page."""
    spec = importlib.util.spec_from_file_location("config_reference", DOCS / "hooks" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_under(page: Path, heading: str) -> list[list[str]]:
    """The first Markdown table under the line `heading`: its header, then its rows, as lists of cells."""
    lines = page.read_text().splitlines()
    rows: list[list[str]] = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[:1] + rows[2:]


def in_backticks(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def grpo_settings_load(cells: Iterable[str], keys: dict[str, object], others: frozenset[str] = frozenset()) -> int:
    """Every grpo setting (`KEY=VALUE`) in the backticks of `cells` loads in grpo, and every name under one of
    grpo's sections is one of its keys or of `others` (grpo train's command line; another trainer's names that
    share grpo's sections); -> the settings loaded. A placeholder (`<N>`, `N`, `...`) is not loaded, a name
    family (`.*`) or a file (`.jsonl`) not checked."""
    sections = tuple(name.split(".")[0] + "." for name in keys if "." in name)
    checked = 0
    for text in (t for cell in cells for t in in_backticks(cell)):
        for word in text.split():
            key = word.split("=")[0]
            if key in keys and "=" in word and not re.search(r"[<>]|\.\.\.|\bN\b", word):
                load_config("tiny", [word])  # raises ConfigError for a value grpo refuses
                checked += 1
            elif key.startswith(sections) and not key.endswith(("*", ".jsonl")):
                assert key in keys or key in others, word
    return checked
