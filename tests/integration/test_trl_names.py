"""docs/coming-from-trl.md's tables against TRL's real `GRPOConfig` (marked `trl`: TRL's environment, built
by scripts/setup_trl_env.sh; GRPO_TRL_PYTHON names another interpreter). Every TRL name is a field of
`GRPOConfig`, or an argument of `GRPOTrainer` where the table writes `GRPOTrainer(name=...)`, and every TRL
default the table states is the field's own. grpo's side: tests/unit/test_coming_from_trl.py."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.trl_names import defaults_header, defaults_rows, names_rows, script_names_rows

pytestmark = pytest.mark.trl

REPO = Path(__file__).resolve().parents[2]

# Run by TRL's interpreter: its GRPOConfig's fields with their defaults, and GRPOTrainer's arguments.
PROBE = """
import dataclasses, inspect, json
import trl

def default(f):
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default

print(json.dumps({"version": trl.__version__,
                  "fields": {f.name: default(f) for f in dataclasses.fields(trl.GRPOConfig)},
                  "trainer": list(inspect.signature(trl.GRPOTrainer.__init__).parameters),
                  "ModelConfig": [f.name for f in dataclasses.fields(trl.ModelConfig)],
                  "ScriptArguments": [f.name for f in dataclasses.fields(trl.ScriptArguments)]}, default=repr))
"""


@pytest.fixture(scope="module")
def trl() -> dict:
    python = os.environ.get("GRPO_TRL_PYTHON") or str(REPO / ".venv-trl" / "bin" / "python")
    if not Path(python).is_file():
        pytest.fail(f"{python} does not exist: build TRL's environment with scripts/setup_trl_env.sh")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_every_trl_name_in_the_names_table_is_a_grpoconfig_field_or_a_grpotrainer_argument(trl):
    rows = names_rows()
    assert len(rows) >= 20  # the table was found and read
    wrong = [(n.name, "GRPOTrainer argument" if n.trainer_argument else "GRPOConfig field")
             for trl_names, _, _ in rows for n in trl_names
             if n.name not in (trl["trainer"] if n.trainer_argument else trl["fields"])]
    assert wrong == [], f"not in TRL {trl['version']}: {wrong}"
    assert all(trl_names for trl_names, _, _ in rows)


def test_the_trl_defaults_the_defaults_table_states_are_trl_s(trl):
    major_minor = ".".join(trl["version"].split(".")[:2])
    assert f"TRL {major_minor} default" in defaults_header()
    rows = defaults_rows()
    assert len(rows) >= 10
    for name, stated, _, _ in rows:
        assert name in trl["fields"], name
        assert ast.literal_eval(stated) == trl["fields"][name], (name, stated, trl["fields"][name])


def test_the_script_names_said_to_be_trl_s_model_and_script_arguments_are_theirs(trl):
    """The second table's ModelConfig and ScriptArguments rows name fields of TRL's own classes, and its rows from
    older releases name fields TRL's GRPOConfig no longer has."""
    rows = script_names_rows()
    checked = 0
    for names, origin, _, _ in rows:
        for name in names:
            if origin in ("`ModelConfig`", "`ScriptArguments`"):
                assert name in trl[origin.strip("`")], (name, origin)
                checked += 1
            elif "before" in origin or " to " in origin:
                assert name not in trl["fields"], (name, origin)
    assert checked >= 10
