"""The TRL callback on transformers' own TrainerState and TrainerControl (the real TRL runs are in
tests/integration/test_trl_guard.py): lazy to import, silent on a healthy run, and at a dead reward a
stop, a save and a report naming the checkpoint before the first bad step."""

from __future__ import annotations

import json
import subprocess
import sys

from grpo.checks import CHECKS

STREAK = CHECKS["zero_reward"].patience  # a dead reward trips its checks after this many steps


def test_importing_the_integration_imports_neither_torch_nor_trl():
    code = ("import sys, grpo.integrations.trl; "
            "print(sorted(m for m in ('torch', 'trl', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def entry(reward: float, varied: bool) -> dict:
    return {"loss": 0.01 if varied else 0.0, "grad_norm": 0.4 if varied else 0.0, "reward": reward,
            "reward_std": 0.2 if varied else 0.0, "frac_reward_zero_std": 0.0 if varied else 1.0}


def run(tmp_path, rewards: list[tuple[float, bool]], saves: tuple[int, ...] = ()):
    """Drives the callback as Trainer does: on_log after each step, the checkpoints it saved on disk."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from grpo.integrations.trl import GrpoGuardCallback

    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none")
    state, control = TrainerState(max_steps=len(rewards)), TrainerControl()
    guard = GrpoGuardCallback()
    guard.on_train_begin(args, state, control)
    for step, (reward, varied) in enumerate(rewards, 1):
        state.global_step = step
        control = guard.on_log(args, state, control, logs=entry(reward, varied))
        if step in saves or control.should_save:
            (tmp_path / "out" / f"checkpoint-{step}").mkdir(parents=True)
            control = guard.on_save(args, state, control)
            control.should_save = False
        if control.should_training_stop:
            return step, guard
    return len(rewards), guard


def test_a_healthy_run_is_never_stopped(tmp_path):
    steps, guard = run(tmp_path, [(0.3 + 0.05 * (s % 4), True) for s in range(40)], saves=(10, 20, 30))
    assert steps == 40 and guard.diagnosis is None and not (tmp_path / "out" / "grpo-guard.json").exists()


def test_a_dead_reward_stops_saves_and_names_the_checkpoint_before_it(tmp_path):
    rewards = [(0.4, True)] * 5 + [(0.0, False)] * 20
    steps, guard = run(tmp_path, rewards, saves=(2, 4, 6))
    assert steps == 5 + STREAK
    report = json.loads((tmp_path / "out" / "grpo-guard.json").read_text())
    assert report["cause"] == "reward_source_died" and report["first_bad_step"] == 6
    assert report["resume_from_checkpoint"] == str(tmp_path / "out" / "checkpoint-4")
    assert report["checkpoint_saved_at_stop"] == str(tmp_path / "out" / f"checkpoint-{steps}")


def test_a_resumed_run_that_goes_on_healthy_rewrites_the_report(tmp_path):
    """Stopped at a dead reward; resumed from the checkpoint the report names and healthy since: the report
    no longer says the run is stopped, and keeps the stop as history."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from grpo.integrations.trl import GrpoGuardCallback

    run(tmp_path, [(0.4, True)] * 5 + [(0.0, False)] * 20, saves=(2, 4))
    stopped = json.loads((tmp_path / "out" / "grpo-guard.json").read_text())
    assert stopped["stopped"] is True
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none")
    state, control = TrainerState(max_steps=30, global_step=4), TrainerControl()
    state.log_history = [{"step": s, **entry(0.4, True)} for s in range(1, 5)]
    guard = GrpoGuardCallback()
    guard.on_train_begin(args, state, control)
    state.global_step = 5
    guard.on_log(args, state, control, logs=entry(0.45, True))
    report = json.loads((tmp_path / "out" / "grpo-guard.json").read_text())
    assert report["stopped"] is False and report["status"] == "healthy" and report["at_step"] == 5
    assert f"stopped at step {stopped['stopped_at_step']}" in report["history"][0]


def test_a_reward_function_returning_none_is_a_broken_reward_not_a_task_without_signal(tmp_path):
    """TRL logs the mean of a reward that returned None as NaN, with the other columns finite."""
    rewards = [(0.4, True)] * 5 + [(float("nan"), True)] * 5
    steps, guard = run(tmp_path, rewards)
    assert guard.diagnosis is not None and guard.diagnosis.cause == "reward_broken" and steps == 6
