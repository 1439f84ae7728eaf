"""Whole runs against a real SGLang server on CPU (marked `sglang`; CI builds its environment with
scripts/setup_sglang_env.sh and runs them): the server SIGKILLed mid-rollout, during a weight sync and
during both evaluations, every sync verified and the seed check reported; no process, /dev/shm file or
temporary directory left after the server or the trainer is SIGKILLed; a server a user started by
hand, attached. Also marked `long` (minutes of server starts; by hand, not in CI): the kills during
both evaluations, two servers with one killed, attaching, and asynchronous rollouts with the server
killed while the next batch is made. The quickstart's model and work on SGLang, the server killed
mid-run: bench/server_killed.py.

SGLang 0.5.23 runs here as its CPU engine (torch-native attention, its kernel package replaced by
scripts/sglang_cpu_shim); the tiny model loads in about 25 s on 2 cores. The same scenarios against the
stand-in speaking SGLang's API (tests/standins/sglang_server.py), which can also hang or answer garbage
on demand, run in the default suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo.config import TinyModelConfig, load_config
from grpo.errors import RunStopped
from grpo.hooks import StepHooks
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.rollout.server.diagnosis import likely_cause
from grpo.rundir.files import JsonlLog
from grpo.tools.doctor import diagnose
from grpo.tools.health import check as health_check
from grpo.train.loop import TrainingLoop
from tests.processes import env_with_src, kill_group_and_see_it_reclaimed, session
from tests.waiting import wait_until

from .helpers import disturb_each_evaluation, make_loop, metric_lines

REPO = Path(__file__).resolve().parents[2]
SGLANG_PYTHON = Path(os.environ.get("GRPO_SGLANG_PYTHON", REPO / ".venv-sglang/bin/python"))

pytestmark = [
    pytest.mark.sglang,
    pytest.mark.skipif(not SGLANG_PYTHON.is_file(), reason=f"no SGLang environment at {SGLANG_PYTHON} "
                       "(scripts/setup_sglang_env.sh builds it)"),
]

SGLANG = ["rollout.engine=sglang", f"rollout.server.python={SGLANG_PYTHON}", "rollout.server.kv_cache_gib=0.25",
          "rollout.server.restart_backoff_s=0.5"]
SHM = Path("/dev/shm")


def of_kind(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in JsonlLog(run_dir / "events.jsonl").read()[0] if e["kind"] == kind]


def run(run_dir: Path, *overrides: str, hooks: tuple[StepHooks, ...] = ()) -> TrainingLoop:
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", *SGLANG, *overrides]), *hooks)
    loop.train()
    return loop


def shm_names() -> set[str]:
    return {p.name for p in SHM.iterdir()}


LONG = pytest.mark.long  # minutes of server starts: run by hand (pytest -m "sglang and long"), not in CI


@pytest.fixture(autouse=True)
def nothing_left_in_dev_shm():
    """After every scenario here, killed servers included: no file of a server left in /dev/shm, nor a
    server's temporary directory."""
    before, tmp_before = shm_names(), set(Path("/tmp").glob("grpo-server-*"))
    yield
    wait_until(lambda: shm_names() <= before, 10, "no server's file left in /dev/shm")
    assert set(Path("/tmp").glob("grpo-server-*")) <= tmp_before


def test_killed_mid_rollout_and_in_a_sync_each_restart_is_verified_and_no_dead_sample_is_trained(tmp_path):
    """One run, two kills (a real SGLang start is 25 s of CI): mid-rollout in step 2, and as the sync after
    step 3's update asks for the reload. Also: every sync verified, the seed check reported everywhere."""
    run_dir = tmp_path / "r"
    loop = run(run_dir, "train.steps=5", "testing.faults.kill_server_at_steps=[2]",
               "testing.faults.kill_server_in_sync_at_steps=[3]")
    injected = [(e["step"], e["message"].split(":")[0]) for e in of_kind(run_dir, "fault_injected")]
    assert injected == [(2, "kill_server"), (3, "kill_server_in_sync")]
    failed = of_kind(run_dir, "server_failed")
    assert [(f["step"], f["evidence"]["incarnation"], f["evidence"]["exit"]) for f in failed] == [
        (2, 1, "killed by SIGKILL"), (3, 2, "killed by SIGKILL")]
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert sorted(lines) == [1, 2, 3, 4, 5] and all(line["update/applied"] == 1 for line in lines.values())
    assert lines[2]["rollout/failed"] > 0 and lines[2]["rollout/retries"] > 0
    # No update used a sample of an incarnation after it died: #1 died in step 2's rollout, #2 in the
    # sync after step 3 (its samples of step 3 were trained before), #3 serves step 4 on step 3's weights.
    assert [lines[s]["rollout/sources"] for s in range(1, 6)] == [
        ["sglang-0#1"], ["sglang-0#2"], ["sglang-0#2"], ["sglang-0#3"], ["sglang-0#3"]]
    for line in lines.values():
        assert line["sync/probe_diff"] <= line["sync/tolerance"] == 2e-3  # fp32: SGLang's log-probs are HF's
    status = json.loads((run_dir / "servers" / "status.json").read_text())
    (server,) = status["servers"]
    # SGLang ignores a request's seed unless started with --enable-deterministic-inference, which its
    # CPU attention backends refuse: the check, made once, finds it, and every report says so.
    assert server["seeds"]["reproducible"] is False and "not reproducible" in server["seeds"]["detail"]
    assert [e["evidence"]["reproducible"] for e in of_kind(run_dir, "server_seeds")] == [False]
    out, _ = health_check(run_dir)
    assert "sglang-0: seeded samples NOT reproducible: the same seeded request twice gave different tokens" in \
        "\n".join(out)
    doctor = "\n".join(diagnose(run_dir))
    assert "sglang-0: 3 start(s) (incarnations 1-3)" in doctor and "seeded samples NOT reproducible" in doctor
    wait_until(lambda: not session(server["pid"]), 10, "the server's processes gone with the run")
    assert not loop.engine.model_dir.exists()


@LONG  # three starts (102 s): the stand-in is killed during both evaluations in the default suite
def test_killed_during_both_evaluations_no_answer_changes_and_no_zero_is_recorded(tmp_path, monkeypatch):
    hooks, compared = disturb_each_evaluation(monkeypatch)
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=1", "eval.before_training=true", "eval.after_training=true", hooks=(hooks,))
    assert len(compared) == 2
    for answers, clean_answers, result, clean in compared:
        # Greedy answers do not depend on the seed: the retried ones equal a clean evaluation's.
        assert [a["completion"] for a in answers] == [a["completion"] for a in clean_answers]
        # An answer still failed after its retries would have stopped the evaluation: none was scored as wrong.
        assert result["accuracy"] == clean["accuracy"] and result["retried"] > 0 == clean["retried"]
    assert [f["evidence"]["exit"] for f in of_kind(run_dir, "server_failed")] == ["killed by SIGKILL"] * 2
    assert [(e["label"], e["accuracy"]) for e in JsonlLog(run_dir / "eval.jsonl").read()[0]] == [
        ("before", compared[0][3]["accuracy"]), ("after", compared[1][3]["accuracy"])]


def trainer(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}", *SGLANG,
                             "train.steps=1000", "eval.before_training=false", "eval.after_training=false",
                             *overrides], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def started(run_dir: Path, kind: str, incarnation: int) -> dict | None:
    if not (run_dir / "events.jsonl").is_file():
        return None
    return next((e for e in of_kind(run_dir, kind) if e["evidence"].get("incarnation") == incarnation), None)


def test_no_server_process_or_shared_memory_outlives_a_sigkill_of_the_server_or_of_the_trainer(tmp_path):
    run_dir = tmp_path / "r"
    proc = trainer(run_dir)
    try:
        wait_until(lambda: started(run_dir, "server_ready", 1), 300, "the first server ready")
        sid = started(run_dir, "server_start", 1)["evidence"]["pid"]  # the reaper: its session is the server's
        members = session(sid)
        assert len(members) >= 4, members  # the reaper, SGLang's HTTP server, its scheduler and detokenizer
        server = int((run_dir / "servers" / "sglang-0.log").read_text().split(f"grpo reaper {sid}: server pid ")[1]
                     .split(",")[0])
        os.kill(server, signal.SIGKILL)  # the HTTP server only: its scheduler and detokenizer are orphaned
        wait_until(lambda: not session(sid), 10, f"every process of the server's session {sid} ({members}) gone")
        wait_until(lambda: started(run_dir, "server_ready", 2), 300, "the restarted server ready")
        (failed,) = of_kind(run_dir, "server_failed")
        assert failed["evidence"]["exit"] == "killed by SIGKILL"
        sid = started(run_dir, "server_start", 2)["evidence"]["pid"]
        members = session(sid)
        assert len(members) >= 4, members
        proc.kill()  # the trainer, by SIGKILL: nothing of it runs after this
        proc.wait()
        wait_until(lambda: not session(sid), 10, f"every process of the server's session {sid} ({members}) gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_two_recovered_faults_roll_nothing_back_a_hang_is_found_in_seconds_and_a_stop_saves_first(tmp_path):
    """The seeds' story on a real server: SIGKILL at step 2 and SIGSTOP at step 3, every failed sample
    recovered on a restarted server, so nothing is rolled back (the breaker judged the failed attempts and
    rolled back to step 0); the hang is found by its stopped processes in seconds (the request timeout is
    300 s); then SIGKILL with no restart left: the stop saves the last trained step (no periodic
    checkpoints, as the quickstart had) and the same command resumes from it."""
    run_dir = tmp_path / "r"
    no_saves = ["train.steps=5", "checkpoint.every_steps=0", "checkpoint.every_minutes=0", "rollout.server.stall_s=5"]
    with pytest.raises(RunStopped):
        run(run_dir, *no_saves, "testing.faults.kill_server_at_steps=[2,4]", "testing.faults.hang_server_at_steps=[3]",
            "rollout.server.max_restarts=2")
    killed, hung, killed_again = of_kind(run_dir, "server_failed")
    assert hung["message"].startswith("sglang-0: hung: its processes have been stopped (SIGSTOP) for 5."), hung
    (stopped,) = [e for e in of_kind(run_dir, "fault_injected") if e["message"].startswith("hang_server")]
    assert hung["time"] - stopped["time"] < 15
    assert [killed["step"], hung["step"], killed_again["step"]] == [2, 3, 4]
    assert not of_kind(run_dir, "rollback") and [t["evidence"]["breaker"] for t in of_kind(run_dir, "trip")] == [
        "inference_server"]
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert sorted(lines) == [1, 2, 3] and all(lines[s]["rollout/unrecovered"] == 0 for s in (2, 3))
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))[-1] == "step_000003"
    run(run_dir, *no_saves)
    assert [e["step"] for e in of_kind(run_dir, "restart")] == [3]
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2, 3, 4, 5]


def scheduler_of(sid: int) -> int:
    """SGLang's scheduler among the processes of the server's session: it names itself sglang::scheduler."""
    return next(pid for pid in session(sid)
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sglang::scheduler"))


def test_a_killed_scheduler_is_named_as_the_cause_and_a_server_killed_with_its_reaper_leaves_nothing(tmp_path):
    """SGLang prints "Ignore import error ... No module named 'cutlass'" at every start: the cause read is
    the scheduler's crash, in the event, the health report and the sentence a give-up would stop with.
    Then SIGKILL to the restarted server's whole process group, its reaper too (another job's kill, a
    cgroup's OOM kill): nothing is left to clean up after it but the trainer, which does."""
    run_dir = tmp_path / "r"
    proc = trainer(run_dir)
    try:
        wait_until(lambda: started(run_dir, "server_ready", 1), 300, "the first server ready")
        os.kill(scheduler_of(started(run_dir, "server_start", 1)["evidence"]["pid"]), signal.SIGKILL)
        failed = wait_until(lambda: started(run_dir, "server_failed", 1), 60, "the scheduler's death recorded")
        evidence = failed["evidence"]
        assert re.fullmatch(r"Subprocess scheduler_0 \(pid=\d+\) crashed with exit code -9\. Triggering SIGQUIT "
                            r"for cleanup\.\.\.", evidence["server_error"]), evidence["server_error"]
        assert evidence["knob"] is None and evidence["stopped_by_grpo"] is False
        assert failed["message"].endswith(f"(the server said: {evidence['server_error']})")
        assert likely_cause(evidence, attached=False).startswith("its scheduler_0 was killed by SIGKILL")
        assert f"failure: {failed['message']}" in "\n".join(health_check(run_dir)[0])
        assert "rollout.server.python" not in json.dumps(failed)
        wait_until(lambda: started(run_dir, "server_ready", 2), 300, "the restarted server ready")
        kill_group_and_see_it_reclaimed(started(run_dir, "server_start", 2)["evidence"]["pid"])
        proc.terminate()  # during the next restart
        assert proc.wait(60) == 4, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class RestartedBy(StepHooks):
    """Holds step `step` until sglang-0's restart (in the background, while sglang-1 serves) is ready: a
    real server takes longer to start than the tiny steps take, and the rejoining is what is tested."""

    def __init__(self, run_dir: Path, step: int) -> None:
        self.run_dir, self.step = run_dir, step

    def step_start(self, step: int) -> None:
        if step == self.step:
            wait_until(lambda: [e for e in of_kind(self.run_dir, "server_ready")
                                if e["evidence"]["server"] == "sglang-0" and e["evidence"]["incarnation"] == 2],
                       300, "sglang-0's restart ready")


@LONG
def test_one_of_two_servers_killed_only_its_samples_are_retried_and_it_rejoins_verified(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=4", "rollout.server.replicas=2", "testing.faults.kill_server_at_steps=[2]",
        hooks=(RestartedBy(run_dir, 4),))
    (failed,) = of_kind(run_dir, "server_failed")
    assert failed["evidence"]["server"] == "sglang-0" and failed["evidence"]["exit"] == "killed by SIGKILL"
    starts = [(e["evidence"]["server"], e["evidence"]["incarnation"]) for e in of_kind(run_dir, "server_start")]
    assert sorted(starts) == [("sglang-0", 1), ("sglang-0", 2), ("sglang-1", 1)]  # sglang-1 never restarted
    rejoined = [e for e in of_kind(run_dir, "weight_sync_verified")
                if (e["evidence"]["server"], e["evidence"]["incarnation"]) == ("sglang-0", 2)]
    assert rejoined and rejoined[0]["evidence"]["probe_diff"] <= rejoined[0]["evidence"]["tolerance"]
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert sorted(lines) == [1, 2, 3, 4] and all(line["update/applied"] == 1 for line in lines.values())
    assert lines[1]["rollout/sources"] == ["sglang-0#1", "sglang-1#1"]
    assert 0 < lines[2]["rollout/failed"] <= 8 and lines[2]["rollout/retries"] == lines[2]["rollout/failed"]
    assert "sglang-0#1" not in lines[2]["rollout/sources"] and "sglang-1#1" in lines[2]["rollout/sources"]
    assert all("sglang-0#1" not in lines[s]["rollout/sources"] for s in (2, 3, 4))
    assert lines[4]["rollout/sources"] == ["sglang-0#2", "sglang-1#1"]  # back, verified, serving again


@LONG
def test_asynchronous_rollouts_a_server_killed_while_the_next_batch_is_made_loses_no_step(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=4", "rollout.max_staleness=1", "testing.faults.kill_server_at_steps=[3]")
    (injected,) = of_kind(run_dir, "fault_injected")
    assert injected["step"] == 2  # step 3's batch is generated during step 2, from the weights after step 1
    (failed,) = of_kind(run_dir, "server_failed")
    assert failed["evidence"]["exit"] == "killed by SIGKILL" and failed["evidence"]["incarnation"] == 1
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert sorted(lines) == [1, 2, 3, 4] and all(line["update/applied"] == 1 for line in lines.values())
    assert lines[1]["rollout/sources"] == lines[2]["rollout/sources"] == ["sglang-0#1"]
    assert lines[3]["rollout/failed"] > 0 and lines[3]["rollout/sources"] == ["sglang-0#2"]
    assert lines[4]["rollout/sources"] == ["sglang-0#2"]
    assert max(line["rollout/staleness_max"] for line in lines.values()) <= 1
    for line in lines.values():
        assert line["sync/probe_diff"] <= line["sync/tolerance"]


def start_by_hand(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """SGLang as a user starts it, on a tiny model of grpo's: -> (the process, its URL) once it generates."""
    model_dir = tmp_path / "served"
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    port = 30000 + os.getpid() % 20000
    log = (tmp_path / "sglang.log").open("w")
    proc = subprocess.Popen([str(SGLANG_PYTHON), "-m", "sglang.launch_server", "--model-path", str(model_dir),
                             "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--attention-backend",
                             "torch_native", "--dtype", "float32", "--max-total-tokens", "4096"],
                            env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def generates() -> bool:
        assert proc.poll() is None, (tmp_path / "sglang.log").read_text()[-3000:]
        try:
            return subprocess.run(["curl", "-sf", "-m", "5", f"{url}/health_generate"]).returncode == 0
        except OSError:
            return False

    wait_until(generates, 300, "SGLang started by hand answering /health_generate")
    return proc, url


@LONG  # CI's budget: the stand-in's attach tests (test_server_fleet.py) run in the default suite
def test_a_server_started_by_hand_is_attached_synced_and_verified_and_never_restarted(tmp_path):
    before = shm_names()
    proc, url = start_by_hand(tmp_path)
    try:
        run_dir = tmp_path / "r"
        run(run_dir, "train.steps=2", f"rollout.server.urls=[{url}]")
        lines = metric_lines(run_dir)
        assert [line["rollout/sources"] for line in lines] == [["sglang-0#1"], ["sglang-0#1"]]
        assert all(line["sync/probe_diff"] <= line["sync/tolerance"] for line in lines)
        (start,) = of_kind(run_dir, "server_start")
        assert start["message"].endswith("(attached)") and start["evidence"]["pid"] is None
        assert proc.poll() is None  # grpo watched it, never owned it: it serves on after the run
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for name in shm_names() - before:  # SGLang's own, of a server grpo does not own: the test's to remove
            (SHM / name).unlink(missing_ok=True)


@LONG
def test_the_quickstart_on_sglang_learns_through_a_server_killed_mid_run(tmp_path):
    """bench/server_killed.py: the quickstart's model and work (25 steps) on SGLang, SIGKILLed at step 12.
    About 20 minutes on 2 cores."""
    result = subprocess.run([sys.executable, str(REPO / "bench" / "server_killed.py"), "--kill-step", "12",
                             "--python", str(SGLANG_PYTHON), "--work-dir", str(tmp_path)],
                            capture_output=True, text=True, env=env_with_src())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]  # nothing dead trained on
    assert "samples of sglang-0#1 trained on after its death: 0" in result.stdout
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert summary["after"]["accuracy"] >= summary["before"]["accuracy"] + 0.2  # seen: +40 to +60 points
