"""`grpo doctor` on grpo runs made to fail by the fault injectors: it names the cause, the first bad
step and the last good checkpoint before it, and its resume command runs the run to its end."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.cli import main
from grpo.config import CheckpointConfig, load_config
from grpo.errors import RunStopped
from grpo.rundir.checkpoints import CheckpointStore
from tests.waiting import wait_until

from .helpers import make_loop, run_tiny
from .test_server_engine import SGLANG

STEPS = 8
BAD = 4  # the first bad step; tiny saves every 3 steps, so step_000003 is the checkpoint before it


def doctor_json(run_dir: Path, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["doctor", str(run_dir), "--json"])
    return code, json.loads(capsys.readouterr().out)


def train(run_dir: Path, *overrides: str, stops: bool) -> None:
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", f"train.steps={STEPS}", *overrides]))
    if stops:
        with pytest.raises(RunStopped):
            loop.train()
    else:
        loop.train()


def resume(command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[:2] == ["grpo", "train"]
    return subprocess.run([sys.executable, "-m", "grpo", *argv[1:]], capture_output=True, text=True, timeout=300)


def assert_diagnosis(result: dict, run_dir: Path, cause: str) -> None:
    assert result["source"] == "grpo" and result["status"] == "problem"
    assert result["cause"] == cause, result["explanation"]
    assert result["first_bad_step"] == BAD, result["timeline"]
    assert result["last_good_checkpoint"] == str(run_dir / "checkpoints" / "step_000003")
    assert result["evidence"] and all(Path(e["file"]).is_file() for e in result["evidence"])
    assert f"resume_from={run_dir / 'checkpoints' / 'step_000003'}" in result["resume"]


def assert_resumes(result: dict, run_dir: Path, capsys) -> None:
    done = resume(result["resume"])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(1, STEPS + 1))  # steps from 4 on were replayed
    code, after = doctor_json(run_dir, capsys)
    assert code == 0 and after["cause"] == "healthy", after["explanation"]
    assert {"step": 3, "kind": "restart"} in [{"step": a["step"], "kind": a["kind"]} for a in after["timeline"]]


def test_rollouts_failing_from_step_k(tmp_path, capsys):
    run_dir = tmp_path / "r"
    train(run_dir, f"testing.faults.fail_rollouts_at_steps={list(range(BAD, STEPS + 1))}",
          "guard.failed_rollouts.action=stop",
          stops=True)
    code, result = doctor_json(run_dir, capsys)
    assert code == 1
    assert_diagnosis(result, run_dir, "rollout_failure")
    assert "testing.faults.fail_rollouts_at_steps=[]" in result["resume"]  # the rehearsal is not repeated
    assert_resumes(result, run_dir, capsys)


def test_nan_loss(tmp_path, capsys):
    run_dir = tmp_path / "r"
    train(run_dir, f"testing.faults.nan_loss_at_steps=[{BAD}]", "guard.nonfinite.action=stop", stops=True)
    code, result = doctor_json(run_dir, capsys)
    assert code == 1
    assert_diagnosis(result, run_dir, "nonfinite")
    assert_resumes(result, run_dir, capsys)


def test_every_reward_identical(tmp_path, capsys):
    """No guard stops this one (zero_reward's patience is 10): the run finishes having learned
    nothing from step 4, and only the metrics say so. Every reward exactly 0 from one step on, after
    rewards that varied, is a dead reward source, not a task without signal."""
    run_dir = tmp_path / "r"
    train(run_dir, f"testing.faults.zero_reward_at_steps={list(range(BAD, STEPS + 1))}", stops=False)
    code, result = doctor_json(run_dir, capsys)
    assert code == 1
    assert_diagnosis(result, run_dir, "reward_source_died")
    assert {"zero_variance"} <= {a["kind"] for a in result["timeline"] if a["step"] == BAD}
    assert_resumes(result, run_dir, capsys)


def test_a_killed_server_past_its_restart_budget(tmp_path, capsys):
    run_dir = tmp_path / "r"
    train(run_dir, *SGLANG, f"testing.faults.kill_server_at_steps=[{BAD}]", "rollout.server.max_restarts=0", stops=True)
    code, result = doctor_json(run_dir, capsys)
    assert code == 1
    assert_diagnosis(result, run_dir, "server_failure")
    assert any("killed by SIGKILL" in e["text"] or "gave up" in e["text"] for e in result["evidence"])
    assert_resumes(result, run_dir, capsys)


def test_a_killed_server_restarted_within_its_budget_is_recovered_not_a_problem(tmp_path, capsys):
    """Infrastructure that failed and came back, with nothing trained on the failure, is a healthy run
    whose timeline shows the failure."""
    run_dir = tmp_path / "r"
    train(run_dir, *SGLANG, f"testing.faults.kill_server_at_steps=[{BAD}]", stops=False)
    code, result = doctor_json(run_dir, capsys)
    assert code == 0 and result["cause"] == "healthy", result["explanation"]
    assert "recovered from" in result["explanation"]
    assert {(BAD, "server_failure"), (BAD, "server_restart")} <= {(a["step"], a["kind"]) for a in result["timeline"]}


def test_a_healthy_run_is_healthy(tmp_path, capsys):
    run_tiny([f"run_dir={tmp_path / 'r'}", f"train.steps={STEPS}"])
    code, result = doctor_json(tmp_path / "r", capsys)
    assert code == 0 and result["status"] == "healthy" and result["cause"] == "healthy"
    assert result["first_bad_step"] is None and result["timeline"] == []
    assert result["last_good_checkpoint"] == str(tmp_path / "r" / "checkpoints" / f"step_{STEPS:06d}")


def test_a_crash_with_a_recorded_error_is_a_crash_at_the_step_that_did_not_finish(tmp_path, capsys):
    run_dir = tmp_path / "r"
    with pytest.raises(RuntimeError, match="injected crash"):
        train(run_dir, "testing.faults.crash_at_step=5", stops=False)
    code, result = doctor_json(run_dir, capsys)
    assert code == 1 and result["cause"] == "crashed" and result["first_bad_step"] == 6
    assert result["evidence"][0]["file"].endswith("events.jsonl") and "injected crash" in result["evidence"][0]["text"]
    # The crash came after step 5 was whole: the loop saved it before the crash went on (saves are every 3)
    assert result["last_good_checkpoint"] == str(run_dir / "checkpoints" / "step_000005")


def test_a_trainer_killed_without_a_word_is_stalled(tmp_path, capsys):
    run_dir = tmp_path / "r"
    trainer = subprocess.Popen([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}",
                                "train.steps=500"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _logged_steps(run_dir) >= 4 or trainer.poll() is not None, 240, "4 steps logged",
                   interval=0.2)
    finally:
        trainer.kill()
        trainer.wait()
    last = _logged_steps(run_dir)
    assert last >= 4
    code, result = doctor_json(run_dir, capsys)
    assert code == 1 and result["cause"] == "stalled" and result["first_bad_step"] == last + 1
    assert "no error recorded" in result["explanation"]
    # the newest checkpoint committed (a kill inside a save leaves the one before it)
    saved = CheckpointStore(run_dir / "checkpoints", CheckpointConfig()).list()
    assert result["last_good_checkpoint"] == str(saved[-1].path) and saved[-1].step <= last


def _logged_steps(run_dir: Path) -> int:
    try:
        return sum(1 for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.endswith("}"))
    except FileNotFoundError:
        return 0
