"""Real OpenRLHF launch scripts (tests/data/openrlhf_scripts/), read as OpenRLHF's argparse reads them: the flags
each passes to `openrlhf.cli.train_ppo_ray`, as bash expands them (tests/launch_scripts.py), and the truth's answer
for each (truth.yaml; tests/script_flags.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests import script_flags
from tests.launch_scripts import module_words
from tests.script_flags import Flag, answered, flags
from tests.verl_scripts import Expected

SCRIPTS = Path(__file__).parent / "data" / "openrlhf_scripts"
MODULE = "openrlhf.cli.train_ppo_ray"
TRUTH = yaml.safe_load((SCRIPTS / "truth.yaml").read_text())["keys"]

__all__ = ["SCRIPTS", "TRUTH", "answered", "expected", "flags", "script_words"]


def script_words(script: Path, tmp: Path) -> list[str]:
    """The words `script` passes to OpenRLHF's trainer, in its order."""
    return module_words(script, tmp, MODULE)


def expected(script: Path, flag: Flag) -> Expected:
    """The truth's answer for `flag` in `script`."""
    return script_flags.expected(TRUTH, script, flag)
