"""Where a run stands and its way in and out of the run directory (grpo.train.run_state), with a real
tiny policy and a rollout queue over a fake collector: a fresh start's step-0 checkpoint, a recovery
that brings back everything a checkpoint holds, refused starts that touch nothing, a rewound step,
and a crash on a full disk recorded as such."""

import errno

import pytest
import torch

from grpo.config import load_config
from grpo.dist import SINGLE
from grpo.errors import ConfigError, DiskError
from grpo.guard.breakers import Guard
from grpo.policy.policy import Policy
from grpo.rollout.queue import RolloutQueue
from grpo.rundir.run import RunDir
from grpo.train.run_state import RunState

from ..rollout.test_queue import FakeCollector, FakeEngine


def open_state(run_dir, *overrides: str, start: bool = True, resume_from=None) -> RunState:
    cfg = load_config("tiny", [f"run_dir={run_dir}", "rollout.max_staleness=1", *overrides])
    torch.manual_seed(0)
    policy = Policy(cfg, torch.device("cpu"))
    queue = RolloutQueue(FakeCollector(), FakeEngine(), policy, 1, 10, drain_before_sync=True)
    state = RunState(cfg, RunDir(run_dir, cfg.checkpoint).acquire(), policy, Guard(cfg.guard), SINGLE, queue)
    if start:
        state.start(resume_from)
    return state


def close(state: RunState) -> None:
    state.rollouts.close()
    state.run.close()


def kinds(state: RunState) -> list[str]:
    return [e["kind"] for e in state.events.read()]


def test_a_fresh_start_saves_a_step_0_checkpoint_to_roll_back_to_and_writes_the_config(tmp_path):
    state = open_state(tmp_path / "run")
    (info,) = state.checkpoints.list()
    assert info.step == 0 and info.healthy
    assert state.run.config_path.is_file() and kinds(state) == ["checkpoint"]
    close(state)


def test_a_recovery_brings_back_everything_a_checkpoint_holds(tmp_path):
    first = open_state(tmp_path / "run")
    batch = first.rollouts.take(1, 0)  # step 1's batch; step 2's queued
    with torch.no_grad():
        next(first.policy.model.parameters()).add_(0.5)  # an update
    first.step, first.data_index, first.lr_scale, first.score = 1, batch.next_data_index, 0.5, 0.25
    first.guard.streaks["zero_reward"] = 2
    first.save(healthy=False)
    weights = [p.detach().clone() for p in first.policy.model.parameters()]
    close(first)

    again = open_state(tmp_path / "run")  # recover=auto: the newest valid checkpoint
    assert (again.step, again.data_index, again.lr_scale, again.score) == (1, batch.next_data_index, 0.5, 0.25)
    assert again.guard.streaks["zero_reward"] == 2
    assert sorted(again.rollouts.batches) == [2]  # the batch generated ahead, not generated again
    assert all(torch.equal(a, b) for a, b in zip(weights, again.policy.model.parameters()))
    assert kinds(again)[-1] == "restart"
    close(again)


def test_a_resume_from_something_that_is_no_checkpoint_names_the_valid_ones_and_touches_nothing(tmp_path):
    close(open_state(tmp_path / "run"))
    config_before = (tmp_path / "run" / "config.yaml").read_text()
    state = open_state(tmp_path / "run", "guard.pause_timeout_s=5", start=False)
    with pytest.raises(ConfigError, match=r"resume_from=.*nowhere is not a usable checkpoint.*step_000000"):
        state.start(str(tmp_path / "nowhere"))
    assert (tmp_path / "run" / "config.yaml").read_text() == config_before
    close(state)


def test_recover_off_refuses_a_directory_with_checkpoints(tmp_path):
    close(open_state(tmp_path / "run"))
    state = open_state(tmp_path / "run", "recover=off", start=False)
    with pytest.raises(ConfigError, match="already has checkpoints and recover=off: pick a new run_dir"):
        state.start(None)
    close(state)


def test_a_changed_config_is_recorded_key_by_key_on_the_next_start(tmp_path):
    close(open_state(tmp_path / "run"))
    state = open_state(tmp_path / "run", "guard.pause_timeout_s=5")
    (changed,) = [e for e in state.events.read() if e["kind"] == "config_changed"]
    assert changed["evidence"]["changed"] == {"guard.pause_timeout_s": [3600.0, 5.0]}
    close(state)


def test_a_rewound_step_puts_back_the_rng_and_the_guards_streaks(tmp_path):
    state = open_state(tmp_path / "run")
    at_start = state.snapshot()
    expected = torch.rand(3)
    state.guard.streaks["zero_reward"] = 4
    state.step, state.data_index = 7, 99
    state.rewind(at_start)
    assert torch.equal(torch.rand(3), expected)
    assert (state.step, state.data_index, state.guard.streaks["zero_reward"]) == (0, 0, 0)
    close(state)


def test_checkpoints_fall_due_every_n_steps(tmp_path):
    state = open_state(tmp_path / "run", "checkpoint.every_steps=3", "checkpoint.every_minutes=0", start=False)
    assert [step for step in range(1, 10) if state.checkpoint_due(step)] == [3, 6, 9]
    close(state)


def test_a_crash_on_a_full_disk_is_recorded_as_one_that_names_the_disk(tmp_path):
    state = open_state(tmp_path / "run")
    state.step = 4
    crash = state.crashed(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "x")))
    assert isinstance(crash, DiskError) and crash.path == tmp_path / "run" / "x"
    other = state.crashed(ValueError("a bug"))
    assert isinstance(other, ValueError)
    crashes = [e for e in state.events.read() if e["kind"] == "crash"]
    assert [c["step"] for c in crashes] == [5, 5] and crashes[1]["message"] == "ValueError: a bug"
    close(state)
