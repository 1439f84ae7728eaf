"""The short chaos run (bench/chaos.py): ten faults at moments drawn from a seed (trainer SIGKILL and
SIGTERM, a full disk, a torn newest checkpoint) on the tiny preset, each trainer death followed by the
same command again; the run must end where the unbroken reference does. Marked `chaos` (CI runs it;
about 3 minutes on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import env_with_src

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.chaos
@pytest.mark.parametrize("setup", ["embedded"])
def test_ten_faults_end_where_the_unbroken_run_does(tmp_path, setup):
    env = env_with_src()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "--setup", setup, "--faults", "10",
                           "--steps", "60", "--seed", "0", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / setup / "result.json").read_text())
    assert len(result["faults"]) == 10 and all(f["recovered_s"] is not None for f in result["faults"])
    assert result["largest_weight_difference"] == 0.0 and not result["problems"]
    assert len({f["kind"] for f in result["faults"]}) >= 3, result["faults"]  # not one kind ten times
