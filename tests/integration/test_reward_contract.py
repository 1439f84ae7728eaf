"""Reward functions as TRL runs them (issue 46): `trainer_state` as TRL passes it, NaN as a missing value,
async functions, NumPy scalars and TRL's keywords; and a reward's code as part of its run's identity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo import api
from grpo.cli import main

from .helpers import metric_lines

STEPS = ["train.steps=3", "checkpoint.every_steps=0", "checkpoint.every_minutes=0", "eval.after_training=false"]
STATES: list[tuple[int, int]] = []


def curriculum(completions, trainer_state, **kwargs):
    """A curriculum as TRL users write it: the format counts less as training goes on."""
    STATES.append((trainer_state.global_step, trainer_state.max_steps))
    return [1.0 - trainer_state.global_step / trainer_state.max_steps] * len(completions)


# 5. trainer_state: global_step is the optimizer steps completed (TRL's N - 1 during step N), max_steps the total.
def test_trainer_state_is_trls_during_training(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    STATES.clear()
    result = api.train("tiny", rewards=[curriculum], overrides=[*STEPS, f"run_dir={tmp_path / 'r'}"])
    assert sorted(set(STATES)) == [(0, 3), (1, 3), (2, 3)]  # the check at start, then steps 1, 2, 3
    rewards = [line["reward/mean"] for line in metric_lines(result.run_dir)]
    assert rewards == pytest.approx([1.0, 1.0 - 1 / 3, 1.0 - 2 / 3])  # switches as TRL's would


def nan_on_odd(completions, **kwargs):
    return [float("nan") if i % 2 else 1.0 for i in range(len(completions))]


def length(completions, **kwargs):
    return [len(c) / 100 for c in completions]


# 6. A NaN from one of several functions is a missing value of that function (TRL's nansum), not a lost sample.
def test_a_nan_from_one_function_is_left_out_of_the_sum_not_the_sample(tmp_path):
    run_dir = tmp_path / "r"
    assert main(["train", "--config", "tiny", *STEPS, f"run_dir={run_dir}",
                 f"task.reward=[{__name__}:nan_on_odd,{__name__}:length]"]) == 0
    for line in metric_lines(run_dir):
        assert line["rollout/unscorable_frac"] == 0 and line["rollout/reward_errors"] == 0
        assert line["reward/nan_on_odd/mean"] == 1.0  # over the values it gave
        assert line["reward/mean"] == pytest.approx(line["reward/length/mean"] + 0.5, rel=1e-5)
