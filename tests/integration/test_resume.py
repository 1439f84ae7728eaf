"""Exact resume: 6 steps straight == 3 steps, crash, resume, 3 more steps."""

import json

import pytest

from grpo.config import load_config
from grpo.hooks import StepHooks

from .helpers import deterministic, make_loop, max_param_diff, metric_lines, params, run_tiny


def test_resume_after_crash_matches_uninterrupted_run(tmp_path):
    straight = run_tiny([f"run_dir={tmp_path / 'straight'}", "train.steps=6"])

    interrupted_dir = tmp_path / "interrupted"
    with pytest.raises(RuntimeError, match="injected crash after step 3"):
        run_tiny([f"run_dir={interrupted_dir}", "train.steps=6", "testing.faults.crash_at_step=3"])
    resumed = run_tiny([f"run_dir={interrupted_dir}", "train.steps=6"])

    assert resumed.step == straight.step == 6
    assert max_param_diff(params(straight.policy.model), params(resumed.policy.model)) <= 1e-6
    a = [deterministic(line) for line in metric_lines(tmp_path / "straight")]
    b = [deterministic(line) for line in metric_lines(interrupted_dir)]
    assert [line["step"] for line in b] == [1, 2, 3, 4, 5, 6]
    assert a == b
    events = (interrupted_dir / "events.jsonl").read_text()
    assert '"kind": "restart"' in events
    assert '"config_changed"' in events and "testing.faults.crash_at_step" in events  # the resume dropped the fault


class RaiseAfterRollout(StepHooks):
    """A crash the loop can catch, in the middle of `step` (after its rollout, before its update)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def after_rollout(self, step: int) -> None:
        if step == self.step:
            raise RuntimeError(f"crash in step {step}")


def test_a_crash_mid_step_saves_the_last_whole_step_and_the_resume_is_exact(tmp_path):
    """No periodic checkpoints (as the quickstart had): the crash still costs only the step it hit."""
    no_saves = ["train.steps=6", "checkpoint.every_steps=0", "checkpoint.every_minutes=0"]
    straight = run_tiny([f"run_dir={tmp_path / 'straight'}", *no_saves])
    run_dir = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="crash in step 5"):
        run_tiny([f"run_dir={run_dir}", *no_saves], RaiseAfterRollout(5))
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == ["step_000000", "step_000004"]
    resumed = run_tiny([f"run_dir={run_dir}", *no_saves])
    restart = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()
               if '"kind": "restart"' in line]
    assert restart and restart[-1]["step"] == 4
    assert max_param_diff(params(straight.policy.model), params(resumed.policy.model)) == 0.0
    assert [deterministic(line) for line in metric_lines(run_dir)] == \
        [deterministic(line) for line in metric_lines(tmp_path / "straight")]


def test_recover_off_refuses_to_overwrite_a_run(tmp_path):
    run_tiny([f"run_dir={tmp_path / 'r'}", "train.steps=1"])
    from grpo.errors import ConfigError

    with pytest.raises(ConfigError, match="already has checkpoints"):
        make_loop(load_config("tiny", [f"run_dir={tmp_path / 'r'}", "recover=off"]))


def test_resume_from_a_named_checkpoint(tmp_path):
    run_dir = tmp_path / "r"
    run_tiny([f"run_dir={run_dir}", "train.steps=6", "checkpoint.keep_last=5"])
    trainer = make_loop(load_config("tiny", [f"run_dir={run_dir}", "train.steps=6"]),
                      resume_from=str(run_dir / "checkpoints" / "step_000003"))
    assert trainer.step == 3
    # the abandoned branch is kept, but where automatic recovery never looks
    assert trainer.run.checkpoints.latest().step == 3
    assert len(list((run_dir / "checkpoints" / "abandoned").iterdir())) == 1
    assert '"kind": "crash"' not in (run_dir / "events.jsonl").read_text()


def test_a_crash_is_recorded_in_events(tmp_path):
    run_dir = tmp_path / "r"
    with pytest.raises(RuntimeError):
        run_tiny([f"run_dir={run_dir}", "train.steps=3", "testing.faults.crash_at_step=2"])
    assert '"kind": "crash"' in (run_dir / "events.jsonl").read_text()


def test_resume_on_a_dataset_task_continues_at_the_same_row(tmp_path):
    rows = [{"prompt": f"Write {i % 10}", "answer": str(i % 10), "n": i} for i in range(12)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = ["task.name=dataset", f"task.train_files=[{data}]", f"task.test_files=[{data}]", "train.steps=6"]
    straight = run_tiny([f"run_dir={tmp_path / 'straight'}", *task])
    with pytest.raises(RuntimeError, match="injected crash after step 3"):
        run_tiny([f"run_dir={tmp_path / 'resumed'}", *task, "testing.faults.crash_at_step=3"])
    resumed = run_tiny([f"run_dir={tmp_path / 'resumed'}", *task])
    assert resumed.state.data_index == straight.state.data_index > len(rows)  # into the second epoch's shuffle
    assert max_param_diff(params(straight.policy.model), params(resumed.policy.model)) <= 1e-6
    assert ([deterministic(line) for line in metric_lines(tmp_path / "straight")]
            == [deterministic(line) for line in metric_lines(tmp_path / "resumed")])


def test_a_resumed_run_reports_the_evaluation_its_first_start_made_before_training(tmp_path, capsys):
    from grpo.entry import run

    run_dir = tmp_path / "r"
    evaluations = ["eval.before_training=true", "eval.after_training=true", "eval.max_samples=4"]
    assert run("tiny", [f"run_dir={run_dir}", "train.steps=1", *evaluations]) == 0
    first = json.loads((run_dir / "summary.json").read_text())
    assert run("tiny", [f"run_dir={run_dir}", "train.steps=2", *evaluations]) == 0
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["steps"] == 2 and resumed["before"] == first["before"]  # evaluated once, reported again
    before = [line for line in (run_dir / "eval.jsonl").read_text().splitlines() if '"before"' in line]
    assert len(before) == 1
    assert capsys.readouterr().out.count("before -> ") == 2
