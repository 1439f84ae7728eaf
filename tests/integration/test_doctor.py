"""`grpo doctor` explains a run from its files."""

import pytest

from grpo.cli import main
from grpo.config import load_config
from grpo.errors import RunStopped
from grpo.tools.doctor import diagnose

from .helpers import make_loop, run_tiny


def test_a_healthy_run_is_reported_finished_with_no_trips(tmp_path, capsys):
    run_tiny([f"run_dir={tmp_path / 'r'}", "train.steps=3"])
    assert main(["doctor", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "STATUS   finished: 3 steps" in out and "TRIPS    none" in out and "UPDATES  " in out


def test_a_stopped_run_names_cause_failures_and_the_resume_command(tmp_path):
    run_dir = tmp_path / "r"
    with pytest.raises(RunStopped):
        make_loop(load_config("tiny", [
            f"run_dir={run_dir}", "train.steps=6", "testing.faults.fail_rollouts_at_steps=[2,3]",
            "model.device=cpu",  # the CPU's samples: none empty at step 1 (a GPU's may be: failures from step 1)
            "guard.failed_rollouts.patience=2", "guard.failed_rollouts.action=stop",
        ])).train()
    report = "\n".join(diagnose(run_dir))
    assert "stopped by the guard at step 3: failed_rollouts" in report
    assert "failures at steps 2-3" in report
    assert "resume with: grpo train --config" in report and "step_000000" in report  # tiny saves every 3 steps
    assert "TRIPS    failed_rollouts x1" in report


def test_not_a_run_directory(tmp_path, capsys):
    assert main(["doctor", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
