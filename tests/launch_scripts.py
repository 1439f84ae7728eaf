"""Real launch scripts of other trainers (tests/data/verl_scripts/, tests/data/openrlhf_scripts/,
tests/data/swift_scripts/), read as their trainers read them: each script runs under bash with its launchers (python,
ray, conda, ms-swift's `swift`) and its side effects (cd, mkdir, tee, ulimit) replaced by shell functions, and the words it
passes to a trainer module (`python3 -m MODULE WORDS`) are recorded; nothing is launched."""

from __future__ import annotations

import subprocess
from pathlib import Path

# `ray job submit ... -- CMD` runs CMD; `swift SUBCOMMAND WORDS` runs `python -m swift.cli.SUBCOMMAND WORDS`, as
# ms-swift's command does (a dash in the subcommand an underscore); each `python3 -m MODULE WORDS` call writes its
# words NUL-ended and then an end-of-call mark (the record separator, which no script passes).
_END = "\x1e"
_STUBS = r"""
python3() { if [ "$1" = "-m" ]; then printf '%s\0' "$@" >> "$TRAINER_CALLS"; printf '\036\0' >> "$TRAINER_CALLS"; fi; }
python() { python3 "$@"; }
ray() { while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift; "$@"; }
swift() { local sub="$1"; shift; python3 -m "swift.cli.${sub//-/_}" "$@"; }
conda() { :; }
cd() { :; }
mkdir() { :; }
tee() { cat > /dev/null; }
ulimit() { :; }
"""


def module_words(script: Path, tmp: Path, module: str | None = None, env: dict[str, str] | None = None) -> list[str]:
    """The words `script` passes to `python3 -m module` (the first module it runs, given none), the module's own
    name left out, as bash expands them under a fixed HOME and one Slurm node (SLURM_JOB_NUM_NODES), in tmp, with
    `env` beside them."""
    calls = tmp / "calls"
    calls.write_bytes(b"")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/user", "SLURM_JOB_NUM_NODES": "1", "TRAINER_CALLS": str(calls),
           **(env or {})}
    subprocess.run(["bash", "-c", f"{_STUBS}\nsource {script.resolve()}"], cwd=tmp, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    call: list[str] = []
    for word in calls.read_bytes().decode().split("\0")[:-1]:
        if word != _END:
            call.append(word)
        elif module is None or call[1] == module:
            return call[2:]
        else:
            call = []
    raise AssertionError(f"{script.name} calls no python3 -m {module or 'MODULE'}")
