"""Real verl launch scripts (tests/data/verl_scripts/), read as verl reads them: the overrides each passes to verl's
trainer, as bash expands them (tests/launch_scripts.py: the trainer's command line is recorded, nothing is
launched)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.launch_scripts import module_words

SCRIPTS = Path(__file__).parent / "data" / "verl_scripts"


def script_overrides(script: Path, tmp: Path) -> list[str]:
    """The `key=value` words `script` passes to verl's trainer (`-m MODULE` and Hydra's `--config-*` flags left
    out), in its order."""
    return [word for word in module_words(script, tmp) if not word.startswith("--")]


@dataclass(frozen=True)
class Expected:
    """The truth's answer for one override: the override grpo should write, or else grpo's keys to name (none: grpo
    has no key and says so)."""

    key: str
    override: str | None
    grpo: tuple[str, ...]


TRUTH = yaml.safe_load((SCRIPTS / "truth.yaml").read_text())["keys"]


def as_written(raw: str) -> str:
    """A value as YAML writes it back: bash's `True` is `true`, `0.80` is `0.8`, `['a', 'b']` is `[a,b]`."""
    value = yaml.safe_load(raw)
    if isinstance(value, list):
        return "[" + ",".join(as_written(str(v)) for v in value) + "]"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("\n...\n").strip()


def expected(script: Path, override: str) -> Expected:
    """The truth's answer for `override` (`key=value`, Hydra's `+`/`++` read as the key) in `script`."""
    key, _, raw = override.partition("=")
    key = key.lstrip("+")
    truth = TRUTH[key]
    written = None
    if raw != "":
        write = truth.get("write")
        if "per_script" in truth:
            written = truth["per_script"].get(script.stem)
        elif raw in truth.get("write_values", {}):
            written = truth["write_values"][raw]
        elif isinstance(write, str):
            written = write.format(as_written(raw))
        elif isinstance(write, dict):
            written = write.get(raw)
    return Expected(key, written, tuple(truth["grpo"]))


def answered(message: str, want: Expected) -> bool:
    """Whether `message` answers the override as the truth does: it names the verl key (not as a name grpo does not
    know) and gives the override, or names grpo's keys, or (grpo having none) names the key."""
    named = rf"(?<![\w.]){re.escape(want.key)}(?![\w.])"
    if not re.search(named, message):
        return False
    if any(re.search(named, strangers) for strangers in re.findall(r"[^;(]*\(not a verl name grpo knows\)", message)):
        return False
    if want.override is not None:
        return want.override in message
    return all(re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message) for key in want.grpo)
