"""The run directory survives torn files, a second trainer, failed resumes, signals and bad input.

Each case drives the command line (in-process through `main`, or as a real process where a signal or
a second process is the point), then checks the outcome, and that `grpo doctor` explains the
directory it left behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo.cli import main
from grpo.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_STOPPED
from grpo.rundir.files import JsonlLog
from grpo.tools.doctor import diagnose

from .helpers import SignalAt, deterministic, make_loop, metric_lines

TINY = ["--config", "tiny"]


def train(run_dir: Path, *overrides: str) -> int:
    return main(["train", *TINY, f"run_dir={run_dir}", *overrides])


def grpo_process(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grpo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def final_weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors")


def assert_same_run(a: Path, b: Path, steps: int) -> None:
    """Same final parameters, and every step's metrics exactly once with the same values."""
    wa, wb = final_weights(a, steps), final_weights(b, steps)
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) == 0.0
    la, lb = metric_lines(a), metric_lines(b)
    assert [line["step"] for line in lb] == list(range(1, steps + 1))
    assert [deterministic(x) for x in la] == [deterministic(x) for x in lb]


def doctor(run_dir: Path) -> str:
    return "\n".join(diagnose(run_dir))


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """An uninterrupted 6-step run, the reference every recovery must reproduce."""
    run_dir = tmp_path_factory.mktemp("straight") / "r"
    assert train(run_dir, "train.steps=6", "checkpoint.every_steps=2") == 0
    return run_dir


# --- torn checkpoints --------------------------------------------------------------------------


def tear(path: Path, how: str) -> None:
    if how == "truncate":
        path.write_bytes(path.read_bytes()[:100])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"{not json\x00")
    elif how == "missing":
        path.unlink()


@pytest.mark.parametrize("file,how", [
    ("trainer_state.pt", "truncate"), ("trainer_state.pt", "empty"), ("meta.json", "garbage"),
    ("meta.json", "missing"), ("model/model.safetensors", "truncate"),
])
def test_a_torn_newest_checkpoint_is_set_aside_and_the_run_resumes_exactly(tmp_path, straight, file, how):
    run_dir = tmp_path / "r"
    assert train(run_dir, "train.steps=4", "checkpoint.every_steps=2", "testing.faults.crash_at_step=4") == 1
    tear(run_dir / "checkpoints" / "step_000004" / file, how)

    report = doctor(run_dir)
    assert "crashed at step" in report and "step_000004 is INVALID" in report
    assert "last good step_000002" in report  # never calls the torn one good

    assert train(run_dir, "train.steps=6", "checkpoint.every_steps=2") == 0
    assert_same_run(straight, run_dir, 6)
    events = JsonlLog(run_dir / "events.jsonl").read()[0]
    repaired = [e for e in events if e["kind"] == "repaired" and "invalid checkpoint step_000004" in e["message"]]
    assert len(repaired) == 1  # recorded, not silent
    assert len(list((run_dir / "checkpoints" / "invalid").iterdir())) == 1  # kept, not deleted
    report = doctor(run_dir)
    assert "finished: 6 steps" in report and "invalid/step_000004" in report


def test_a_resume_from_a_torn_checkpoint_by_hand_is_a_one_line_error(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert train(run_dir, "train.steps=2", "checkpoint.every_steps=1", "checkpoint.keep_last=3") == 0
    tear(run_dir / "checkpoints" / "step_000001" / "trainer_state.pt", "truncate")
    config_before = (run_dir / "config.yaml").read_text()
    capsys.readouterr()
    code = main(["train", "--config", str(run_dir / "config.yaml"),
                 f"resume_from={run_dir / 'checkpoints' / 'step_000001'}"])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT
    assert err.startswith("config error: resume_from=") and "trainer_state.pt has 100 bytes" in err
    assert "valid checkpoints here" in err and len(err.splitlines()) == 1
    assert (run_dir / "config.yaml").read_text() == config_before


# --- the config survives a failed start --------------------------------------------------------


def test_a_failed_resume_leaves_the_config_and_the_resume_command_working(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert train(run_dir, "train.steps=2") == 0
    config_before = (run_dir / "config.yaml").read_text()

    assert train(run_dir, "train.steps=4", f"resume_from={tmp_path / 'nowhere'}") == EXIT_BAD_INPUT
    assert train(run_dir, "train.steps=4", "model.tiny.hidden_size=32") == EXIT_BAD_INPUT  # another shape
    err = capsys.readouterr().err
    assert "is not a usable checkpoint: no such directory" in err
    # another model is another run: refused before the checkpoint is read (grpo.rundir.identity)
    assert "model.tiny.hidden_size was 64, now 32" in err and "resume_with_changes=true" in err
    assert (run_dir / "config.yaml").read_text() == config_before  # untouched by either failure

    assert main(["train", "--config", str(run_dir / "config.yaml"), "train.steps=3"]) == 0
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2, 3]


# --- torn logs ---------------------------------------------------------------------------------


def test_a_torn_metrics_line_is_cut_on_resume_and_nothing_is_appended_to_it(tmp_path, straight):
    run_dir = tmp_path / "r"
    assert train(run_dir, "train.steps=4", "checkpoint.every_steps=2") == 0
    with open(run_dir / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 5, "reward/mean": 0.')  # what a full disk leaves
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(b'{"time": 1, "kind": "cra')
    assert "FILES    1 unreadable line(s) in metrics.jsonl" in doctor(run_dir)  # reads, does not crash
    assert train(run_dir, "train.steps=6", "checkpoint.every_steps=2") == 0
    assert JsonlLog(run_dir / "metrics.jsonl").read()[1] == 0
    assert JsonlLog(run_dir / "events.jsonl").read()[1] == 0
    assert_same_run(straight, run_dir, 6)
    assert "cut a torn last line" in doctor(run_dir) or "repair" in doctor(run_dir)


# --- one writer --------------------------------------------------------------------------------


def test_a_second_trainer_is_refused_and_the_first_is_unharmed(tmp_path, straight, capsys):
    run_dir = tmp_path / "r"
    first = grpo_process("train", *TINY, f"run_dir={run_dir}", "train.steps=6", "checkpoint.every_steps=2",
                         "testing.faults.stop_before_record_at_step=3")
    try:
        _, status = os.waitpid(first.pid, os.WUNTRACED)  # it stopped itself, holding the directory
        assert os.WIFSTOPPED(status)
        lines_before = (run_dir / "metrics.jsonl").read_bytes()
        capsys.readouterr()
        assert train(run_dir, "train.steps=6") == EXIT_BAD_INPUT
        err = capsys.readouterr().err.strip()
        assert f"is in use by another grpo process (pid {first.pid} on " in err and len(err.splitlines()) == 1
        assert (run_dir / "metrics.jsonl").read_bytes() == lines_before
        assert f"running now (pid {first.pid}" in doctor(run_dir)
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=120) == 0
    finally:
        first.kill()
    assert_same_run(straight, run_dir, 6)


# --- signals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_and_exits_4_and_the_same_command_resumes_exactly(tmp_path, straight, sig):
    run_dir = tmp_path / "r"
    args = ("train", *TINY, f"run_dir={run_dir}", "train.steps=6", "checkpoint.every_steps=2")
    proc = grpo_process(*args, "testing.faults.stop_before_record_at_step=3")
    try:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        os.kill(proc.pid, sig)  # delivered when it continues, in the middle of step 3
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED
    name = signal.Signals(sig).name
    assert f"interrupted by {name}: state saved at step 3" in err and "resume with: grpo train --config" in err
    event = JsonlLog(run_dir / "events.jsonl").read()[0][-1]
    assert event["kind"] == "interrupted" and event["step"] == 3
    assert (run_dir / "checkpoints" / "step_000003").is_dir()  # saved although 3 is not a checkpoint step
    assert f"interrupted at step 3: {name}" in doctor(run_dir)

    assert main(["train", "--config", str(run_dir / "config.yaml")]) == 0
    assert_same_run(straight, run_dir, 6)


def wait_for_step(proc: subprocess.Popen, run_dir: Path, step: int) -> None:
    """Until the trainer has logged `step` (it is then in the middle of its steps)."""
    metrics = run_dir / "metrics.jsonl"
    while proc.poll() is None and not (metrics.exists() and f'"step": {step},' in metrics.read_text()):
        select.select([], [], [], 0.05)
    assert proc.poll() is None, proc.communicate()[1][-2000:]


def test_a_second_sigint_exits_130_with_one_line_and_is_no_crash(tmp_path):
    run_dir = tmp_path / "r"
    # A model wide enough that its save takes a while: the second Ctrl-C lands during the first one's save.
    wide = ("model.tiny.hidden_size=256", "model.tiny.num_layers=4", "model.tiny.intermediate_size=512")
    args = ("train", *TINY, f"run_dir={run_dir}", "train.steps=4", "checkpoint.every_steps=2", *wide)
    proc = grpo_process(*args)
    try:
        wait_for_step(proc, run_dir, 1)
        os.kill(proc.pid, signal.SIGINT)
        while not any(p.name.endswith("step_000001") for p in (run_dir / "checkpoints").iterdir()):
            assert proc.poll() is None
        os.kill(proc.pid, signal.SIGINT)  # the impatient user
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "interrupted twice: exited without saving" in err, err[-3000:]
    kinds = [e["kind"] for e in JsonlLog(run_dir / "events.jsonl").read()[0]]
    assert kinds[-1] == "interrupted" and "crash" not in kinds, kinds
    assert "crashed" not in doctor(run_dir)
    assert main(["train", "--config", str(run_dir / "config.yaml")]) == 0
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2, 3, 4]


def test_sigterm_stops_without_saving_when_the_save_would_outlast_the_grace(tmp_path, straight):
    # A grace shorter than any save: the stop keeps to it, and the newest checkpoint resumes exactly. Saves
    # every 3 steps and the signal after step 4: the step the stop ends on (4, or 5 on a slow machine) is
    # never one that saves by cadence.
    run_dir = tmp_path / "r"
    args = ("train", *TINY, f"run_dir={run_dir}", "train.steps=6", "checkpoint.every_steps=3")
    proc = grpo_process(*args, "checkpoint.stop_grace_s=0.000001")
    try:
        wait_for_step(proc, run_dir, 4)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "stopped without saving step" in err and "resumes exactly, redoing" in err, err[-2000:]
    event = JsonlLog(run_dir / "events.jsonl").read()[0][-1]
    assert event["kind"] == "interrupted" and event["evidence"]["saved"] is False
    newest = max(p.name for p in (run_dir / "checkpoints").glob("step_*"))
    assert newest.endswith(f"{3 * (event['step'] // 3):06d}")  # no save at the stop
    assert main(["train", "--config", str(run_dir / "config.yaml")]) == 0
    assert_same_run(straight, run_dir, 6)


@pytest.mark.parametrize("phase", ["rollout", "update"])
def test_a_stop_mid_step_abandons_it_and_the_resume_is_exact(tmp_path, straight, phase):
    """A signal during generation or between micro-batches: nothing of that step is kept."""
    from grpo.config import load_config
    from grpo.errors import RunInterrupted

    run_dir = tmp_path / "r"
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", "train.steps=6", "checkpoint.every_steps=2"]),
                     SignalAt(4, phase))
    with pytest.raises(RunInterrupted, match="state saved at step 3"):
        loop.train()
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2, 3]  # step 4 left no line
    assert train(run_dir, "train.steps=6", "checkpoint.every_steps=2") == 0
    assert_same_run(straight, run_dir, 6)


# --- input that cannot train -------------------------------------------------------------------


def gsm8k_dir(tmp_path: Path, train_lines: list[dict], test_lines: list[dict]) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps(x) + "\n" for x in train_lines))
    (data / "test.jsonl").write_text("".join(json.dumps(x) + "\n" for x in test_lines))
    return data


PROBLEM = {"question": "What is 1 + 1?", "answer": "1 + 1 = 2\n#### 2"}


@pytest.mark.parametrize("argv,message", [
    (["train", *TINY, "train.steps=-1"], "train.steps must be at least 1"),
    (["train", *TINY, "rollout.samples_per_problem=1"], "a group of one has no advantage"),
    (["train", *TINY, "rollout.samples_per_problem=0"], "rollout.samples_per_problem must be at least 2"),
    (["eval", "--model", "tiny", "--task", "arith", "--max-samples", "-3"], "--max-samples must be at least 1"),
])
def test_values_that_cannot_train_are_refused_before_any_work(tmp_path, capsys, argv, message):
    run_dir = tmp_path / "r"
    assert main([*argv, f"run_dir={run_dir}"] if argv[0] == "train" else argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not run_dir.exists()


@pytest.mark.parametrize("empty", ["train", "test"])
def test_an_empty_data_file_is_a_one_line_error(tmp_path, capsys, empty):
    data = gsm8k_dir(tmp_path, [] if empty == "train" else [PROBLEM], [] if empty == "test" else [PROBLEM])
    command = (["train", *TINY, f"run_dir={tmp_path / 'r'}", "task.name=gsm8k", f"task.path={data}"]
               if empty == "train" else
               ["eval", "--model", "tiny", "--task", "gsm8k", f"task.path={data}", "--dtype", "float32"])
    assert main(command) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert f"{data / (empty + '.jsonl')} has no problems" in err and len(err.splitlines()) == 1


def test_an_unreachable_hub_model_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # no network here either way
    assert train(tmp_path / "r", "model.name=someorg/somemodel") == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert "model.name=someorg/somemodel is not a local directory and the hub (hub.invalid) cannot be reached" in err
    assert len(err.splitlines()) == 1


def test_unscorable_golds_stop_at_once_naming_the_data_without_rolling_back(tmp_path, capsys):
    no_gold = {"question": "What is 1 + 1?", "answer": "two, but no gold line"}
    # One row has a gold: a split where none has one is refused at load (tests/integration/test_first_hour.py).
    data = gsm8k_dir(tmp_path, [no_gold] * 7 + [PROBLEM], [PROBLEM])
    run_dir = tmp_path / "r"
    code = train(run_dir, "task.name=gsm8k", f"task.path={data}", "task.reward=math", "train.steps=6")
    err = capsys.readouterr().err
    assert code == EXIT_STOPPED
    assert "unscorable_rewards" in err and "gold answers or the reward function are at fault" in err
    assert "rolling back cannot fix them" in err
    events = JsonlLog(run_dir / "events.jsonl").read()[0]
    assert not [e for e in events if e["kind"] == "rollback"]
    stop = json.loads((run_dir / "STOPPED.json").read_text())
    assert stop["step"] == 2 and stop["cause"].startswith("unscorable_rewards")
    report = doctor(run_dir)
    assert "stopped by the guard at step 2: unscorable_rewards" in report
    assert "failed 0" in report and "could not be scored" in report
