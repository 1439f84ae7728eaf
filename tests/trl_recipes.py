"""TRL settings as their users give them to grpo (a TrlParser recipe as a config, GRPOConfig's keywords and
`accelerate launch` flags as `NAME=VALUE` overrides), and the truth's answer for each: tests/data/trl_scripts/
truth_round4.yaml, written before grpo read them."""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.script_flags import flags

FOLDER = Path(__file__).parent / "data" / "trl_scripts"
RECIPES = ("open_r1_config_demo_code", "open_r1_config_codeforces", "open_r1_config_demo_r1_distill")
COMMAND_LINES = ("opt_r2_grpo_trl", "trl_tool_grpo_tool")
PAPER_INDEX = FOLDER / "trl_paper_index_grpo_configs.yaml"


@functools.cache
def truth() -> dict[str, Any]:
    return yaml.safe_load((FOLDER / "truth_round4.yaml").read_text())["keys"]


def scalar(value: Any) -> str:
    """A value as an override writes it: YAML's flow style, `true`, `['q_proj,', v_proj]`."""
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("\n...\n").strip().replace(", ", ",")


def command_line_settings(script: Path) -> dict[str, Any]:
    """The flags a launch line passes to its training script (the words after the first `.py`), as TRL's argparse
    reads them: a switch is true, several words a list (the shell's words, commas and all)."""
    words = shlex.split(script.read_text().replace("\\\n", " "))
    start = next(i for i, word in enumerate(words) if word.endswith(".py")) + 1
    settings: dict[str, Any] = {}
    for flag in flags(words[start:]):
        settings[flag.name] = (True if not flag.words else yaml.safe_load(flag.words[0]) if len(flag.words) == 1
                               else list(flag.words))
    return settings


def sources() -> dict[str, dict[str, Any]]:
    """Every round-4 source's settings by its name (a file's stem, a paper-index section's name)."""
    given = {stem: yaml.safe_load((FOLDER / f"{stem}.yaml").read_text()) for stem in RECIPES}
    given |= {stem: command_line_settings(FOLDER / f"{stem}.sh") for stem in COMMAND_LINES}
    return given | yaml.safe_load(PAPER_INDEX.read_text())


@dataclass(frozen=True)
class Answers:
    """One refusal's answers: the override written for each name, the by-hand part, the names without a key."""

    written: dict[str, str]
    by_hand: str
    none: set[str]
    message: str

    @classmethod
    def read(cls, message: str) -> Answers:
        body = message.removesuffix(" (docs/coming-from-trl.md)")
        body, _, none = body.partition("; grpo has no key for: ")
        head, _, by_hand = body.partition("; set by hand: ")
        written: dict[str, str] = {}
        section = head.partition("; write them as grpo's: ")[2]
        for match in re.finditer(r"(.+?) \((\w+(?:, \w+)*)\)(?:, |$)", section):
            for name in match.group(2).split(", "):
                written[name] = match.group(1)
        return cls(written, by_hand, {name.partition(" (")[0] for name in none.split(", ") if name}, message)


def _same(override: str, want: str) -> bool:
    """Whether two `key=value` overrides say the same: the same keys and values as YAML reads them (1e-5, 1.0e-05)."""
    def parts(text: str) -> list[tuple[str, Any]]:
        pairs = []
        for item in text.split(" "):
            key, _, raw = item.partition("=")
            value = yaml.safe_load(raw)
            try:
                value = float(value) if not isinstance(value, (bool, list, dict)) and value is not None else value
            except (TypeError, ValueError):
                pass
            pairs.append((key, value))
        return pairs
    return parts(override) == parts(want)


def misanswered(source: str, name: str, value: Any, answers: Answers) -> str | None:
    """What is wrong with the answer to `name` (given `value` in `source`) against the truth; None when it is right."""
    entry = truth()[name]
    write, per_script = entry.get("write"), entry.get("per_script")
    want = None
    if per_script is not None:
        want = per_script.get(source)
    elif isinstance(write, str):
        want = write.format(scalar(value))
    elif isinstance(write, dict) and not isinstance(value, (list, dict)):
        want = write.get(value)
    keys = (entry.get("by_value") or {}).get(value, entry["grpo"]) if not isinstance(value, (list, dict)) else \
        entry["grpo"]
    said = entry.get("say")
    if isinstance(said, dict):
        said = said.get(value) if not isinstance(value, (list, dict)) else None
    if said and not re.search(said, answers.message):
        return f"{name}: does not say /{said}/"
    got = answers.written.get(name)
    if want is not None:
        return None if got is not None and _same(got, want) else f"{name}: wrote {got!r}, not {want!r}"
    if got is not None and keys != ["task.chat_template"]:
        return f"{name}: wrote {got!r} where no override says the same"
    if keys:
        named = re.search(rf"(?:^|; ){re.escape(name)}: ", answers.by_hand) or name in answers.written
        return None if named and all(key in answers.message for key in keys) else f"{name}: {keys} not named"
    return None if name in answers.none else f"{name}: not said to have no grpo key"
