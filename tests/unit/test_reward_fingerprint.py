"""A reward's identity is its code (grpo.rewards.fingerprint): what it runs changes the hash, nothing else does."""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo.rewards import get_reward
from grpo.rewards.fingerprint import code_fingerprint
from tests.processes import env_with_src

MODULE = """
import functools
import re
from helpers import bonus

PATTERN = re.compile({pattern!r})
WEIGHTS = {{"a": 1, "b": {weight}}}
TAGS = {{"x", "y"}}


def helper(text):
    return float(bool(PATTERN.search(text)))


def reward(completions, **kwargs):
    return [helper(c) + bonus(c) * WEIGHTS["b"] for c in completions]


def other(completions, **kwargs):
    return [{other}] * len(completions)


def traced(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


@traced
def decorated(completions, **kwargs):
    return [len(TAGS)] * len(completions)


class Judge:
    def __init__(self, strict):
        self.strict = strict

    def __call__(self, completions, **kwargs):
        return [helper(c) for c in completions]


judge = Judge(strict={strict})
partial = functools.partial(reward, scale=2)
"""


def fingerprints(folder: Path, monkeypatch, **edit) -> dict[str, str]:
    values = {"pattern": r"\d", "weight": 2, "other": 0.0, "strict": True, "bonus": 0.5, **edit}
    (folder / "user_rewards.py").write_text(MODULE.format(**values))
    (folder / "helpers.py").write_text(f"def bonus(text):\n    return {values['bonus']}\n")
    monkeypatch.syspath_prepend(str(folder))
    for name in ("user_rewards", "helpers"):
        sys.modules.pop(name, None)
    module = importlib.import_module("user_rewards")
    return {name: code_fingerprint(getattr(module, name)) for name in ("reward", "decorated", "judge", "partial")}


@pytest.mark.parametrize("edit,changed", [
    ({"pattern": r"\d+"}, {"reward", "judge", "partial"}),  # a constant a function it calls reads
    ({"weight": 3}, {"reward", "partial"}),  # a constant it reads
    ({"bonus": 0.25}, {"reward", "partial"}),  # a function of another module of the user's
    ({"strict": False}, {"judge"}),  # a callable instance's state
    ({"other": 1.0}, set()),  # a function none of them uses
])
def test_what_a_reward_uses_changes_its_fingerprint_and_nothing_else_does(tmp_path, monkeypatch, edit, changed):
    before = fingerprints(tmp_path, monkeypatch)
    after = fingerprints(tmp_path, monkeypatch, **edit)
    assert {name for name in before if before[name] != after[name]} == changed


def test_the_fingerprint_is_the_same_in_another_process(tmp_path, monkeypatch):
    here = fingerprints(tmp_path, monkeypatch)["reward"]
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import user_rewards
        from grpo.rewards.fingerprint import code_fingerprint
        print(code_fingerprint(user_rewards.reward))
    """)
    there = subprocess.run([sys.executable, "-c", script], env=env_with_src(), capture_output=True, text=True,
                           check=True).stdout.strip()
    assert there == here


def test_builtin_rewards_are_known_by_name_and_a_lambda_by_its_source():
    assert code_fingerprint(get_reward("math")) is None
    first, second = (lambda completions, **kw: [0.0] * len(completions)), (lambda completions, **kw: [1.0])
    assert code_fingerprint(first) != code_fingerprint(second)
    assert code_fingerprint(functools.partial(first)) == code_fingerprint(functools.partial(first))


def test_what_a_callable_object_changes_as_it_runs_does_not_change_its_identity():
    """The same object called again in the same process (api.train twice in a notebook) keeps its identity."""
    class Counting:
        def __init__(self):
            self.calls = 0

        def __call__(self, completions, **kwargs):
            self.calls += 1
            return [0.0] * len(completions)

    reward = Counting()
    before = code_fingerprint(reward)
    reward(["a"])
    assert code_fingerprint(reward) == before
