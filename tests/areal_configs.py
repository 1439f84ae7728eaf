"""Real AReaL experiment configs and a launch script (tests/data/areal_configs/), read as AReaL reads them: each
YAML's keys as dotted names (its `${...}` references resolved as OmegaConf resolves them), and the overrides the
script passes to AReaL's launcher, as bash expands them (tests/launch_scripts.module_words). The truth written
before grpo read them (truth.yaml) says how each key should be answered."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.launch_scripts import module_words

CONFIGS = Path(__file__).parent / "data" / "areal_configs"
YAMLS = sorted(CONFIGS.glob("gsm8k_*.yaml"))
SCRIPTS = sorted(CONFIGS.glob("*.sh"))
TRUTH = yaml.safe_load((CONFIGS / "truth.yaml").read_text())["keys"]

_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # 1e-8: text to PyYAML, a number to OmegaConf
_REFERENCE = re.compile(r"\$\{([\w.]+)\}")


def as_areal(value: Any) -> Any:
    """A value as OmegaConf reads it where PyYAML reads it otherwise: `1e-8` is a number."""
    return float(value) if isinstance(value, str) and _NUMBER.fullmatch(value) else value


def dotted(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted names -> values, down to values that are not sections (an empty one is a value)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out |= dotted(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = as_areal(value)
    return out


def resolved(names: dict[str, Any], value: Any) -> Any:
    """`${a.b}` as OmegaConf resolves it against `names` (a reference to a reference too); `${oc.env:...}` as
    it is."""
    while isinstance(value, str) and (match := _REFERENCE.fullmatch(value)) and match.group(1) in names:
        value = names[match.group(1)]
    return value


def config_names(path: Path) -> dict[str, Any]:
    return dotted(yaml.safe_load(path.read_text()))


def as_written(value: Any) -> str:
    """A value as an override writes it: YAML's flow style, a list without spaces."""
    if isinstance(value, list):
        return "[" + ",".join(as_written(v) for v in value) + "]"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("\n...\n").strip()


def script_overrides(script: Path, tmp: Path) -> list[str]:
    """The `key=value` words `script` passes to AReaL's launcher: its training script and `--config FILE` left
    out; the clock fixed (CURRENT_TIME)."""
    words = module_words(script, tmp, env={"CURRENT_TIME": "20260520000000"})
    kept, skip = [], False
    for word in words:
        if skip or word == "--config" or word.endswith(".py"):
            skip = word == "--config"
            continue
        kept.append(word)
    return kept


def input_names(path: Path, tmp: Path) -> dict[str, Any]:
    """An input's keys -> values: a YAML's dotted names, or a script's overrides (Hydra's `+` read as the key)."""
    if path.suffix == ".yaml":
        return config_names(path)
    names = {}
    for override in script_overrides(path, tmp):
        key, _, raw = override.partition("=")
        names[key.lstrip("+")] = as_areal(yaml.safe_load(raw)) if raw else ""
    return names


def input_overrides(path: Path, tmp: Path) -> list[str]:
    """An input as overrides on grpo's command line: a script's as it passes them, a YAML's keys as `key=value`."""
    if path.suffix == ".sh":
        return script_overrides(path, tmp)
    return [f"{name}={as_written(value)}" for name, value in config_names(path).items()]


@dataclass(frozen=True)
class Expected:
    """The truth's answer for one key of one input: the override grpo should write, or else grpo's keys to name
    (none: grpo has no key and says so)."""

    key: str
    override: str | None
    grpo: tuple[str, ...]


def expected(stem: str, key: str, names: dict[str, Any]) -> Expected:
    """The truth's answer for `key` in the input `stem`, whose keys are `names`."""
    truth = TRUTH[key]
    value = resolved(names, names[key])
    if "per_input" in truth:
        override = truth["per_input"].get(stem)
        return Expected(key, override, tuple(truth["grpo"]) if override is not None else ())
    write, override = truth.get("write"), None
    if isinstance(write, str) and value not in ("", None):
        override = write.format(as_written(value))
    elif isinstance(write, dict) and not isinstance(value, (list, dict)):
        override = write.get(value)
    return Expected(key, override, tuple(truth["grpo"]))


def answered(message: str, want: Expected) -> bool:
    """Whether `message` answers the key as the truth does: it names the key as AReaL's and gives the override, or
    names grpo's keys, or (grpo having none) names the key."""
    if "AReaL's" not in message or not re.search(rf"(?<![\w.]){re.escape(want.key)}(?![\w.])", message):
        return False
    if want.override is not None:
        return want.override in message
    return all(re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message) for key in want.grpo)
