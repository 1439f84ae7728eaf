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


async def judged(completions, **kwargs):  # an LLM judge, as TRL users write one
    import asyncio

    async def judge(text):
        await asyncio.sleep(0)
        return float(len(text) > 3)
    return list(await asyncio.gather(*(judge(c) for c in completions)))


def numpy_bools(completions, **kwargs):
    import numpy as np

    return [np.bool_(len(c) > 3) for c in completions]


KEYWORDS: list[list[str]] = []


def keywords(completions, **kwargs):
    KEYWORDS.append(sorted(kwargs))
    return [0.0] * len(completions)


# 10. async def rewards are awaited, NumPy scalars are numbers, and the keywords are TRL's: no prompt column.
def test_async_and_numpy_rewards_train_and_the_prompt_column_is_not_a_keyword(tmp_path):
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1), "level": i % 3} for i in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "r"
    KEYWORDS.clear()
    assert main(["train", "--config", "tiny", *STEPS, f"run_dir={run_dir}", "task.name=dataset",
                 f"task.train_files=[{tmp_path / 'train.jsonl'}]",
                 f"task.reward=[{__name__}:judged,{__name__}:numpy_bools,{__name__}:keywords]"]) == 0
    for line in metric_lines(run_dir):
        assert line["rollout/reward_errors"] == 0 and line["rollout/unscorable_frac"] == 0
        assert line["reward/judged/mean"] == line["reward/numpy_bools/mean"]
    assert KEYWORDS[0] == ["answer", "completion_ids", "gold", "level", "log_extra", "log_metric", "prompts", "question",
                           "trainer_state"]


# 1. A reward's identity is its code: editing it between starts is refused like other data, unless asked for.
REWARDS = """
SCALE = {scale}


def clipped(x):
    return min(x, {cap})


def correctness(completions, **kwargs):
    return [clipped(SCALE * len(c) / 100) for c in completions]


def unused(completions, **kwargs):
    return [{unused}] * len(completions)
"""


def write_rewards(folder: Path, scale: float = 1.0, cap: float = 1.0, unused: float = 0.0) -> None:
    (folder / "my_rewards.py").write_text(REWARDS.format(scale=scale, cap=cap, unused=unused))


def test_cli_refuses_to_resume_with_an_edited_reward_and_records_an_asked_for_change(tmp_path):
    from .test_first_hour import TINY, grpo_command, one_line

    write_rewards(tmp_path)
    train = ["train", *TINY, "run_dir=runs/r", "task.reward=my_rewards:correctness"]
    assert grpo_command(train, cwd=tmp_path).returncode == 0
    write_rewards(tmp_path, unused=1.0)  # an edit of what the reward does not use: the same run
    assert grpo_command([*train, "train.steps=3"], cwd=tmp_path).returncode == 0
    for edit in ({"cap": 0.5}, {"scale": 2.0}):  # a function it calls, a constant it reads
        write_rewards(tmp_path, unused=1.0, **edit)
        refused = grpo_command([*train, "train.steps=4"], cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        line = one_line(refused.stderr)
        assert "reward's code changed (my_rewards:correctness" in line and "resume_with_changes=true" in line
    assert len(metric_lines(tmp_path / "runs/r")) == 3  # nothing trained on the edited reward

    assert grpo_command([*train, "train.steps=4", "resume_with_changes=true"], cwd=tmp_path).returncode == 0
    events = [json.loads(line) for line in (tmp_path / "runs/r/events.jsonl").read_text().splitlines()]
    changed = [e for e in events if e["kind"] == "config_changed"][-1]["evidence"]["changed"]
    assert "task.reward.code:my_rewards:correctness" in changed
    assert grpo_command([*train, "train.steps=5"], cwd=tmp_path).returncode == 0  # the change is the run's now


def test_api_refuses_to_resume_with_an_edited_reward_function(tmp_path, monkeypatch):
    from grpo.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    overrides = ["checkpoint.every_steps=0", "checkpoint.every_minutes=0", "run_dir=runs/api"]

    def reward(completions, **kwargs):  # a notebook cell
        return [len(c) / 100 for c in completions]

    api.train("tiny", rewards=[reward], overrides=["train.steps=1", *overrides])

    def reward(completions, **kwargs):  # noqa: F811 - the cell edited and run again
        return [1 - len(c) / 100 for c in completions]

    with pytest.raises(ConfigError, match=r"reward's code changed \(python:reward .*resume_with_changes=true"):
        api.train("tiny", rewards=[reward], overrides=["train.steps=2", *overrides])
    assert len(metric_lines(tmp_path / "runs/api")) == 1
