"""The tiny config's ranks as Ray actors on a local Ray cluster (`grpo train --launcher ray`), against
one process; and a rank's actor killed mid-step, restarted with its group (marked `distributed`; needs
`pip install 'grpo[ray]'`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.rundir.files import JsonlLog
from grpo.tools.doctor import diagnose

from .helpers import metric_lines
from .test_distributed import STEPS, assert_close_metrics, assert_same_weights, one_process, weights

pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")]


def ray_launch(run_dir: Path, *overrides: str, max_restarts: int = 0, nproc: int = 2) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local cluster of its own
    return subprocess.run(
        [sys.executable, "-m", "grpo", "train", "--launcher", "ray", "--nproc", str(nproc), "--max-restarts",
         str(max_restarts), "--config", "tiny", f"run_dir={run_dir}", *overrides],
        capture_output=True, text=True, timeout=900, env=env,
    )


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("single") / "r"
    one_process(run_dir, *STEPS)
    return run_dir


def test_two_ranks_as_ray_actors_compute_what_one_process_does(tmp_path, single):
    run_dir = tmp_path / "r"
    result = ray_launch(run_dir, *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(weights(single, 5), weights(run_dir, 5))
    assert_close_metrics(single, run_dir)
    policy = sorted(p.name for p in (run_dir / "checkpoints" / "step_000005" / "policy").iterdir())
    assert policy == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # each actor wrote its shards


def test_a_killed_actor_is_restarted_with_its_group_and_the_run_ends_as_if_it_had_not(tmp_path, single):
    run_dir = tmp_path / "r"
    # The fault SIGKILLs rank 1's process, which is its actor's: Ray reports the actor dead.
    result = ray_launch(run_dir, *STEPS, "testing.faults.kill_rank_at_step=[1,4]", max_restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]
    events = JsonlLog(run_dir / "events.jsonl").read()[0]
    (lost,) = [e for e in events if e["kind"] == "rank_lost"]
    assert lost["evidence"]["rank"] == 1 and lost["step"] == 4 and lost["evidence"]["node"]
    (restart,) = [e for e in events if e["kind"] == "group_restart"]
    assert restart["evidence"] == {"attempt": 1, "ranks": 2}
    resumed = [e for e in events if e["kind"] == "restart"]
    assert len(resumed) == 1 and resumed[0]["message"].endswith("step_000002")  # the last good checkpoint
    assert [x["step"] for x in metric_lines(run_dir)] == [1, 2, 3, 4, 5]
    assert_same_weights(weights(single, 5), weights(run_dir, 5))
    recovery = next(line for line in diagnose(run_dir) if line.startswith("RECOVERY"))
    assert "1 rank(s) lost" in recovery and "1 group restart(s) by the launcher" in recovery


def test_ranks_lost_past_the_restart_budget_end_the_launch_with_status_1(tmp_path):
    run_dir = tmp_path / "r"
    result = ray_launch(run_dir, *STEPS, "testing.faults.kill_rank_at_step=[1,2]", max_restarts=0)
    assert result.returncode == 1
    assert "restarts are used up; the newest good checkpoint" in result.stdout + result.stderr
    assert [e["kind"] for e in JsonlLog(run_dir / "events.jsonl").read()[0]].count("rank_lost") == 1
    # The doctor's resume command launches the run as it was launched: through Ray, with two ranks.
    assert "resume with: grpo train --launcher ray --nproc 2 --config" in "\n".join(diagnose(run_dir))
