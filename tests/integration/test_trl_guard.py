"""grpo's guard on real TRL GRPOTrainer runs, in TRL's own environment (scripts/setup_trl_env.sh builds
.venv-trl; GRPO_TRL_PYTHON names another interpreter), on a tiny random Llama written here, offline:
the callback stops a constant reward and a reward that dies mid-run within its patience, naming the
checkpoint before the first bad step, and never stops a healthy run; `grpo watch --pid` stops a TRL run
from its console log alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.checks import CHECKS
from tests.processes import env_with_src

pytestmark = pytest.mark.trl
STREAK = CHECKS["zero_reward"].patience  # a dead reward trips its checks after this many steps

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("trl_guard_runner.py")


@pytest.fixture(scope="module")
def trl_python() -> str:
    python = os.environ.get("GRPO_TRL_PYTHON") or str(REPO / ".venv-trl" / "bin" / "python")
    if not Path(python).is_file():
        pytest.fail(f"{python} does not exist: build TRL's environment with scripts/setup_trl_env.sh")
    return python


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    import torch

    from grpo.config import TinyModelConfig
    from grpo.policy.models import build_char_tokenizer, build_tiny_model

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def trl_env() -> dict[str, str]:
    # TRL's environment imports grpo from this checkout (the callback), nothing else of this one's
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(REPO / "src"),
            "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def spec_file(tmp_path: Path, tiny_model: Path, **spec) -> Path:
    spec = {"model_dir": str(tiny_model), "output_dir": str(tmp_path / "out"), "seed": 0, "guard": True, **spec}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def train(trl_python: str, tmp_path: Path, tiny_model: Path, **spec) -> dict:
    done = subprocess.run([trl_python, str(RUNNER), str(spec_file(tmp_path, tiny_model, **spec))],
                          capture_output=True, text=True, env=trl_env(), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_constant_reward_is_stopped_within_the_patience(trl_python, tmp_path, tiny_model):
    result = train(trl_python, tmp_path, tiny_model, reward="constant", steps=20, save_steps=2)
    report = result["report"]
    assert report is not None and report["stopped"]
    patience = CHECKS["zero_variance"].patience
    assert result["global_step"] == patience == report["stopped_at_step"]  # no signal from step 1
    assert report["cause"] == "no_learning_signal" and report["first_bad_step"] == 1
    assert report["resume_from_checkpoint"] is None  # every checkpoint holds bad steps' updates
    assert report["checkpoint_saved_at_stop"] == str(tmp_path / "out" / f"checkpoint-{patience}")
    assert patience in result["checkpoints"]


def test_a_reward_that_dies_mid_run_is_stopped_and_the_checkpoint_before_it_named(trl_python, tmp_path,
                                                                                 tiny_model):
    die_at = 6
    result = train(trl_python, tmp_path, tiny_model, reward="dies", die_at=die_at, steps=30, save_steps=2)
    assert all(r > 0 for r in result["rewards"][:die_at - 1]) and set(result["rewards"][die_at - 1:]) == {0.0}
    report = result["report"]
    assert report["cause"] == "reward_source_died" and report["first_bad_step"] == die_at
    assert result["global_step"] == report["stopped_at_step"] == die_at + STREAK - 1
    assert report["resume_from_checkpoint"] == str(tmp_path / "out" / "checkpoint-4")  # the last before step 6
    assert "reward server" in report["explanation"] and "partial credit" not in report["explanation"]
    assert report["resume"] == f"(TRL) trainer.train(resume_from_checkpoint={str(tmp_path / 'out' / 'checkpoint-4')!r})"


def test_a_healthy_run_is_not_stopped(trl_python, tmp_path, tiny_model):
    result = train(trl_python, tmp_path, tiny_model, reward="varied", steps=15, save_steps=5)
    assert result["report"] is None
    assert result["global_step"] == 15 and result["logged_steps"] == list(range(1, 16))
    assert result["checkpoints"] == [5, 10, 15]


def test_grpo_watch_stops_a_trl_run_from_its_console_log(trl_python, tmp_path, tiny_model):
    """No callback: `grpo watch train.log --pid` reads TRL's console output (its logged dicts, one per step at
    logging_steps=1) as the run writes it, and stops the trainer once the reward has died. Without the
    progress bar: the bar's count is flushed apart from the dicts, so a step read from it can be one off on a
    busy machine (seen: the death placed at step 7), while one dict per step is exact."""
    steps = 400
    spec = spec_file(tmp_path, tiny_model, reward="dies", die_at=6, steps=steps, save_steps=2, guard=False,
                     disable_tqdm=True)
    log = tmp_path / "train.log"
    with open(log, "wb") as out:
        trainer = subprocess.Popen([trl_python, str(RUNNER), str(spec)], stdout=out, stderr=subprocess.STDOUT,
                                   env=trl_env(), cwd=tmp_path)
    try:
        watch = subprocess.run([sys.executable, "-m", "grpo", "watch", str(log), "--pid", str(trainer.pid),
                                "--interval", "0.5"], capture_output=True, text=True, timeout=300,
                               env=env_with_src())
        trainer.wait(timeout=60)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
    assert watch.returncode == 1, watch.stdout + watch.stderr
    assert "DIAGNOSIS problem: reward_source_died from step 6" in watch.stdout
    assert f"resume: (TRL) trainer.train(resume_from_checkpoint={str(tmp_path / 'out' / 'checkpoint-4')!r})" \
        in watch.stdout
    assert f"sent SIGTERM to the trainer (pid {trainer.pid})" in watch.stdout
    assert trainer.returncode == -15  # stopped by the watch, not finished
    assert f"{steps}/{steps}" not in log.read_text(errors="replace")


def test_at_trls_default_logging_interval_the_checkpoint_named_holds_no_bad_step(trl_python, tmp_path, tiny_model):
    """logging_steps=10 (TRL's default), saves every 5, the reward dead from step 31: the first bad logged step
    is 40, so checkpoint-35 may hold bad updates; the one named is from before the logged step ahead (30)."""
    result = train(trl_python, tmp_path, tiny_model, reward="dies", die_at=31, steps=120, save_steps=5,
                   logging_steps=10)
    report = result["report"]
    assert report["cause"] == "reward_source_died" and report["first_bad_step"] == 40
    assert report["resume_from_checkpoint"] == str(tmp_path / "out" / "checkpoint-30")
    assert result["global_step"] == report["stopped_at_step"] < 120


def test_a_reward_that_returns_none_is_a_broken_reward(trl_python, tmp_path, tiny_model):
    result = train(trl_python, tmp_path, tiny_model, reward="none", die_at=4, steps=20, save_steps=2)
    report = result["report"]
    assert report["cause"] == "reward_broken" and report["first_bad_step"] == 4
    assert report["resume_from_checkpoint"] == str(tmp_path / "out" / "checkpoint-2")


def test_a_resumed_run_that_goes_on_healthy_rewrites_the_report(trl_python, tmp_path, tiny_model):
    """Stopped at a dead reward, resumed from the checkpoint the report names with the reward fixed: the
    report no longer says stopped, and keeps the stop as history."""
    first = train(trl_python, tmp_path, tiny_model, reward="dies", die_at=6, steps=30, save_steps=2)
    checkpoint = first["report"]["resume_from_checkpoint"]
    result = train(trl_python, tmp_path, tiny_model, reward="varied", steps=12, save_steps=2, resume=checkpoint)
    report = result["report"]
    assert report["stopped"] is False and report["status"] == "healthy", report
    assert f"stopped at step {first['report']['stopped_at_step']}" in report["history"][0]
    assert result["global_step"] == 12
