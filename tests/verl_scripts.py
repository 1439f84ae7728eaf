"""Real verl launch scripts (tests/data/verl_scripts/), read as verl reads them: the overrides each passes to verl's
trainer, as bash expands them. Each script runs under bash with its launchers (python, ray, conda) and its side
effects (cd, mkdir, tee) replaced by shell functions: the trainer's command line is recorded, nothing is launched."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

SCRIPTS = Path(__file__).parent / "data" / "verl_scripts"

# `ray job submit ... -- CMD` runs CMD; the trainer's call (`python3 -m MODULE ARGS`) writes its words, NUL-ended.
_STUBS = r"""
python3() { if [ "$1" = "-m" ]; then printf '%s\0' "$@" >> "$VERL_CALL"; fi; }
python() { python3 "$@"; }
ray() { while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift; "$@"; }
conda() { :; }
cd() { :; }
mkdir() { :; }
tee() { cat > /dev/null; }
"""


def trainer_words(script: Path, tmp: Path, env: dict[str, str] | None = None) -> list[str]:
    """The words `script` passes to the trainer it calls with `python3 -m MODULE` (`-m MODULE` left out), in its
    order, under a fixed HOME and one node (SLURM_JOB_NUM_NODES), and `env` beside them."""
    call = tmp / "call"
    call.write_bytes(b"")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/user", "SLURM_JOB_NUM_NODES": "1", "VERL_CALL": str(call),
           **(env or {})}
    subprocess.run(["bash", "-c", f"{_STUBS}\nsource {script}"], cwd=tmp, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    words = call.read_bytes().decode().split("\0")[:-1]
    if words[:1] != ["-m"]:
        raise AssertionError(f"{script.name} called no trainer module")
    return words[2:]


def script_overrides(script: Path, tmp: Path) -> list[str]:
    """The `key=value` words `script` passes to verl's trainer (Hydra's `--config-*` flags left out)."""
    return [word for word in trainer_words(script, tmp) if not word.startswith("--")]


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
        elif isinstance(write, str):
            written = write.format(as_written(raw))
        elif isinstance(write, dict):
            written = write.get(raw)
    return Expected(key, written, tuple(truth["grpo"]))


def answered(message: str, want: Expected) -> bool:
    """Whether `message` answers the override as the truth does: it names the verl key and gives the override, or
    names grpo's keys, or (grpo having none) names the key."""
    if not re.search(rf"(?<![\w.]){re.escape(want.key)}(?![\w.])", message):
        return False
    if want.override is not None:
        return want.override in message
    return all(re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message) for key in want.grpo)
