"""Whole tiny runs with injected faults: nothing trains on a failure, breakers trip on time, stops explain themselves."""

import json
import shlex

import pytest

from grpo.cli import main
from grpo.config import load_config
from grpo.errors import RunStopped
from grpo.hooks import StepHooks

from .helpers import abandoned_lines, make_loop, max_param_diff, metric_lines, params, run_tiny


class ParamRecorder(StepHooks):
    """Snapshots the model's parameters once built and at the end of every step."""

    def __init__(self) -> None:
        self.after: dict[int, dict] = {}

    def built(self, run) -> None:
        self.run = run
        self.after[0] = params(run.model)

    def step_end(self, step: int) -> None:
        self.after[self.run.current_step()] = params(self.run.model)  # a rollback restored an earlier step


def test_every_metrics_line_says_if_an_update_was_applied_and_counts_statuses(tmp_path):
    run_tiny([f"run_dir={tmp_path / 'r'}", "train.steps=3"])
    for line in metric_lines(tmp_path / "r"):
        assert line["update/applied"] in (0, 1)
        for status in ("ok", "failed", "timeout", "empty", "truncated", "unscorable"):
            assert f"rollout/{status}" in line


def test_failed_rollouts_are_never_trained_on(tmp_path):
    # Step 2: half the samples fail and are retried; step 3: every attempt fails.
    cfg = load_config("tiny", [
        f"run_dir={tmp_path / 'r'}", "train.steps=4", "testing.faults.fail_rollouts_at_steps=[2,3]",
        "testing.faults.fail_fraction=1.0", "guard.failed_rollouts.action=warn", "guard.failed_rollouts.patience=1",
    ])
    recorder = ParamRecorder()
    trainer = make_loop(cfg, recorder)
    trainer.train()
    lines = {line["step"]: line for line in metric_lines(tmp_path / "r")}
    for step in (2, 3):
        assert lines[step]["rollout/failed"] > 0
        assert lines[step]["groups/trained"] == 0
        assert lines[step]["update/applied"] == 0
        assert lines[step]["rollout/retries"] > 0
        assert "reward/mean" not in lines[step]  # a failed sample is not a reward of 0
        assert max_param_diff(recorder.after[step - 1], recorder.after[step]) == 0.0
    assert lines[1]["update/applied"] == 1 or lines[1]["update/no_signal"] == 1
    trips = [json.loads(e) for e in (tmp_path / "r" / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in trips if e["kind"] == "trip"] == [2, 3]


def test_partial_failures_are_retried_and_groups_stay_complete(tmp_path):
    trainer = make_loop(load_config("tiny", [
        f"run_dir={tmp_path / 'r'}", "train.steps=2", "testing.faults.fail_rollouts_at_steps=[1]",
        "testing.faults.fail_fraction=0.3", "rollout.max_retries=6", "guard.failed_rollouts.action=warn",
    ]))
    trainer.train()
    line = metric_lines(tmp_path / "r")[0]
    assert line["rollout/failed"] > 0 and line["rollout/retries"] > 0
    assert line["groups/trained"] == 4  # every group completed by retrying its failed members


def test_zero_reward_trips_at_exactly_step_n_and_stops_with_a_working_resume_command(tmp_path, capsys):
    run_dir = tmp_path / "r"
    overrides = [
        f"run_dir={run_dir}", "train.steps=8", "checkpoint.every_steps=1",
        "testing.faults.zero_reward_at_steps=[2,3,4,5]", "guard.zero_reward.patience=4",
        "guard.zero_reward.action=stop",
    ]
    with pytest.raises(RunStopped) as stop:
        make_loop(load_config("tiny", overrides)).train()
    report = json.loads((run_dir / "STOPPED.json").read_text())
    assert report["step"] == 5 and report["cause"].startswith("zero_reward")
    assert report["evidence"]["consecutive_steps"] == 4
    # Checkpoints 2..4 were saved while the zero-reward streak was building: not "good".
    assert report["last_good_checkpoint"].endswith("step_000001")
    assert "resume with" in str(stop.value)
    lines = metric_lines(run_dir)
    assert lines[-1]["step"] == 5 and lines[-1]["update/applied"] == 0

    argv = shlex.split(report["resume_command"])
    assert argv[:2] == ["grpo", "train"]
    assert main(argv[1:] + ["train.steps=3", "logging.tensorboard=false"]) == 0
    assert not (run_dir / "STOPPED.json").exists()
    events = [json.loads(e) for e in (run_dir / "events.jsonl").read_text().splitlines()]
    restart = [e for e in events if e["kind"] == "restart"][-1]
    assert restart["step"] == 1 and restart["evidence"]["previous_stop"]["step"] == 5


def test_a_rollback_logs_each_step_once_keeps_the_replayed_lines_apart_and_the_doctor_names_it(tmp_path, capsys):
    """Issue 52: a rollback left steps 1-4 twice in metrics.jsonl, and the doctor read the replays' counts
    (no failure) and said nothing of the rollback or its halved learning rate."""
    run_dir = tmp_path / "r"
    trainer = make_loop(load_config("tiny", [
        f"run_dir={run_dir}", "train.steps=6", "checkpoint.every_steps=10", "eval.before_training=true",
        "testing.faults.fail_rollouts_at_steps=[3,4]", "testing.faults.fail_fraction=1.0", "rollout.max_retries=1",
    ]))
    trainer.train()
    events = [json.loads(e) for e in (run_dir / "events.jsonl").read_text().splitlines()]
    # Every sample of steps 3 and 4 still failed after its retry: the breaker's default, 2 steps, a rollback.
    (trip,) = [e for e in events if e["kind"] == "trip"]
    assert (trip["step"], trip["evidence"]["breaker"]) == (4, "failed_rollouts")
    assert trip["evidence"]["unrecovered_frac"] == 1.0
    (rollback,) = [e for e in events if e["kind"] == "rollback"]
    assert rollback["evidence"]["to_step"] == 0 and rollback["evidence"]["lr_scale"] == 0.5
    assert rollback["evidence"]["log_lines_replayed"]["metrics.jsonl"] == 4

    lines, replayed = metric_lines(run_dir), abandoned_lines(run_dir)
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert [line["step"] for line in replayed] == [1, 2, 3, 4]
    assert [line["actor/lr"] for line in lines[:4]] == [line["actor/lr"] / 2 for line in replayed]
    assert sum(line["rollout/failed"] for line in replayed) > 0 and all(line["rollout/failed"] == 0 for line in lines)
    # The evaluation before training is of the weights rolled back to: it stays.
    assert [e["label"] for e in map(json.loads, (run_dir / "eval.jsonl").read_text().splitlines())] == ["before"]

    capsys.readouterr()
    assert main(["doctor", str(run_dir), "--json"]) == 0
    diagnosis = json.loads(capsys.readouterr().out)
    said = "rolled back to step 0 after failed_rollouts: learning rate x0.5 from then on (0.5 x its schedule)"
    assert diagnosis["cause"] == "healthy" and f"at step 4 {said}" in diagnosis["explanation"]
    assert {"step": 4, "kind": "rollback", "detail": said} in diagnosis["timeline"]
    assert main(["doctor", str(run_dir)]) == 0
    report = capsys.readouterr().out
    assert f"         rollback at step 4: {said}" in report
    failed = sum(line["rollout/failed"] for line in replayed)
    assert "and in 4 replayed step line(s) (steps 1-4, metrics.abandoned.jsonl): ok " in report
    assert f"failed {failed}, timeout 0" in report


def test_zero_reward_rolls_back_when_configured(tmp_path):
    run_dir = tmp_path / "r"
    trainer = make_loop(load_config("tiny", [
        f"run_dir={run_dir}", "train.steps=6", "checkpoint.every_steps=1",
        "testing.faults.zero_reward_at_steps=[3,4]", "guard.zero_reward.patience=2",
        "guard.zero_reward.action=rollback",
    ]))
    trainer.train()
    events = [json.loads(e) for e in (run_dir / "events.jsonl").read_text().splitlines()]
    rollbacks = [e for e in events if e["kind"] == "rollback"]
    assert len(rollbacks) == 1 and rollbacks[0]["step"] == 4
    assert rollbacks[0]["evidence"]["checkpoint"].endswith("step_000002")
    assert trainer.step == 6 and trainer.state.lr_scale == 0.5


def test_nan_loss_applies_no_update_rolls_back_and_the_run_finishes(tmp_path):
    run_dir = tmp_path / "r"
    recorder = ParamRecorder()
    trainer = make_loop(load_config("tiny", [
        f"run_dir={run_dir}", "train.steps=6", "checkpoint.every_steps=2", "testing.faults.nan_loss_at_steps=[3]",
        "algo.advantage_norm=none",
    ]), recorder)
    trainer.train()
    (nan_line,) = abandoned_lines(run_dir)  # rolled back to step 2: step 3 ran again, clean
    assert nan_line["step"] == 3 and nan_line["update/nonfinite"] == 1 and nan_line["update/applied"] == 0
    events = [json.loads(e) for e in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events if e["kind"] in ("trip", "rollback")] == ["trip", "rollback"]
    assert trainer.step == 6
    assert all(torch_finite(p) for p in recorder.after[6].values())
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2, 3, 4, 5, 6]


def torch_finite(tensor) -> bool:
    import torch

    return bool(torch.isfinite(tensor).all())


def test_max_rollbacks_then_stop(tmp_path):
    run_dir = tmp_path / "r"
    with pytest.raises(RunStopped, match="rollbacks already done"):
        make_loop(load_config("tiny", [
            f"run_dir={run_dir}", "train.steps=6", "testing.faults.empty_rollouts_at_steps=[1,2,3,4,5]",
            "guard.empty_responses.patience=1", "guard.max_rollbacks=0",
        ])).train()
    assert json.loads((run_dir / "STOPPED.json").read_text())["last_good_checkpoint"].endswith("step_000000")


def test_trip_hook_command_receives_the_event(tmp_path):
    out = tmp_path / "hook.json"
    run_tiny([
        f"run_dir={tmp_path / 'r'}", "train.steps=2", "testing.faults.reward_raises_at_steps=[1]",
        "model.device=cpu",  # the CPU's samples: none empty (a GPU's may be, which the engine counts as failed)
        "guard.unscorable_rewards.action=warn", "guard.unscorable_rewards.patience=1",
        f"guard.on_trip_command=cat > {out}",
    ])
    line = metric_lines(tmp_path / "r")[0]
    # 16 samples a round, and two refill rounds that fail the same way
    assert line["rollout/unscorable"] == 48 and line["rollout/reward_errors"] == 48
    assert line["groups/trained"] == 0 and line["update/applied"] == 0
    event = json.loads(out.read_text())
    assert event["kind"] == "trip" and event["step"] == 1
    assert event["evidence"]["breaker"] == "unscorable_rewards" and event["evidence"]["unscorable_frac"] == 1.0
    assert line["rollout/failed_frac"] == 0.0  # the engine did its job: this is the reward's failure


def test_non_finite_parameters_are_caught_and_rolled_back(tmp_path):
    # Without gradient clipping, finite gradients no longer bound the step: every update is scanned.
    run_dir = tmp_path / "r"
    trainer = make_loop(load_config("tiny", [f"run_dir={run_dir}", "train.steps=4", "actor.max_grad_norm=0",
                                           "checkpoint.every_steps=1"]))
    original_step = trainer.policy.optimizer.step
    calls = []

    def poisoned_step():
        original_step()
        calls.append(1)
        if len(calls) == 2:
            trainer.policy.optimizer.master[0].data.fill_(float("inf"))

    trainer.policy.optimizer.step = poisoned_step
    trainer.train()
    (poisoned,) = [line for line in abandoned_lines(run_dir) if line["update/nonfinite"]]
    assert poisoned["update/skip_reason"] == "non-finite parameters after the update"
    events = [json.loads(e) for e in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "rollback" and e["step"] == poisoned["step"] for e in events)
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2, 3, 4]
    assert trainer.policy.optimizer.params_finite() and trainer.step == 4
