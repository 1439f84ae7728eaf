"""Launch scripts whose trainer reads `--flag value` words with argparse (OpenRLHF's `train_ppo_ray`, ms-swift's
`swift rlhf`): the flags as argparse reads them, and the truth's answer for each (a `truth.yaml` beside the scripts,
written before grpo read them)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.launch_scripts import module_words
from tests.verl_scripts import Expected, as_written

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Flag:
    """One flag as argparse reads it: its name, and its words (none for a switch; several for a list)."""

    name: str
    words: tuple[str, ...]

    @property
    def raw(self) -> str:
        """Its value as a user writes it after `name=`: a switch is true, several words a list."""
        if not self.words:
            return "true"
        return self.words[0] if len(self.words) == 1 else "[" + ",".join(self.words) + "]"

    @property
    def override(self) -> str:
        return f"{self.name}={self.raw}"


def flags(words: list[str]) -> list[Flag]:
    """`--name value...` and `--name=value`: each flag takes the words up to the next `--`."""
    parsed: list[Flag] = []
    for word in words:
        if word.startswith("--"):
            name, sep, value = word[2:].partition("=")
            parsed.append(Flag(name, (value,) if sep else ()))
        else:
            parsed[-1] = Flag(parsed[-1].name, (*parsed[-1].words, word))
    return parsed


def expected(truth: dict[str, Any], script: Path, flag: Flag) -> Expected:
    """The answer `truth` (a truth.yaml's keys) gives for `flag` in `script`."""
    entry = truth[flag.name]
    written = None
    write = entry.get("write")
    if "per_script" in entry:
        written = entry["per_script"].get(script.stem)
    elif isinstance(write, str):
        written = write.format(as_written(flag.raw))
    elif isinstance(write, dict):
        written = write.get(flag.raw)
    return Expected(flag.name, written, tuple(entry["grpo"]))


def answered(message: str, want: Expected) -> bool:
    """Whether `message` answers the flag as the truth does: it names the flag and gives the override, or names
    grpo's keys, or (grpo having none) says that grpo has no key for it."""
    if not re.search(rf"(?<![\w.]){re.escape(want.key)}(?![\w.])", message):
        return False
    if want.override is not None:
        return re.search(re.escape(want.override) + r"(?![\w.])", message) is not None
    if want.grpo:
        return all(re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message) for key in want.grpo)
    return "grpo has no" in message


@dataclass(frozen=True)
class FlagScripts:
    """A folder of real launch scripts (tests/data/FOLDER/) calling `python -m MODULE --flag value ...`, and the
    truth.yaml beside them."""

    folder: str
    module: str

    @property
    def root(self) -> Path:
        return DATA / self.folder

    @functools.cached_property
    def truth(self) -> dict[str, Any]:
        return yaml.safe_load((self.root / "truth.yaml").read_text())["keys"]

    def files(self) -> list[Path]:
        return sorted(self.root.glob("*.sh"))

    def words(self, script: Path, tmp: Path) -> list[str]:
        """The words `script` passes to the trainer module, in its order."""
        return module_words(script, tmp, self.module)

    def unanswered(self, script: Path, given: list[Flag], message: str) -> list[str]:
        """The flags of `script` that `message` does not answer as the truth does."""
        return [flag.override for flag in given if not answered(message, expected(self.truth, script, flag))]


OPENRLHF = FlagScripts("openrlhf_scripts", "openrlhf.cli.train_ppo_ray")
SWIFT = FlagScripts("swift_scripts", "swift.cli.rlhf")  # `swift rlhf`
