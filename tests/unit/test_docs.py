"""The README stays one page and shows the commands CI runs; the configuration reference lists every key."""

from __future__ import annotations

import dataclasses
import re
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


_KEY_LINE = re.compile(r"^- \*\*`([\w.]+)`\*\* \((.*?), default `(.*?)`\): (.*)$")


def _documented(page: str) -> dict[str, tuple[str, str]]:
    """key -> (its default, its meaning), from the page's lines `- **`key`** (type, default `value`): meaning`."""
    return {m.group(1): (m.group(3), m.group(4)) for m in map(_KEY_LINE.match, page.splitlines()) if m}


def test_configuration_reference_documents_every_key_and_no_other():
    documented = _documented(config_reference().reference_markdown())
    assert set(documented) == _keys(RunConfig)
    assert [key for key, (_, meaning) in documented.items() if not meaning.strip()] == []


def test_configuration_reference_shows_defaults():
    documented = _documented(config_reference().reference_markdown())
    assert documented["model.name"][0] == "smollm2-135m-instruct"
    assert documented["recover"][0] == "auto"
    assert documented["guard.unscorable_rewards.action"][0] == "stop"


def test_front_pages_claim_no_more_of_trl_than_its_parity_test_shows():
    """By default grpo's advantages are not TRL's (population std + 1e-6 against TRL's sample std + 1e-4,
    docs/trl-parity.md): no front page says "the same objective", and the TRL page gives the keys that match."""
    for page in (README, DOCS / "index.md", DOCS / "coming-from-trl.md"):
        text = " ".join(page.read_text().split())
        assert not re.search(r"\bsame\b[^.]{0,40}\bobjective", text, re.I), page.name
    coming = " ".join((DOCS / "coming-from-trl.md").read_text().split())
    assert "algo.advantage_std=sample algo.advantage_eps=1e-4" in coming
