"""The short chaos run (bench/chaos.py): ten faults at moments drawn from a seed (trainer SIGKILL and
SIGTERM, a full disk, a torn newest checkpoint) on the tiny preset, each trainer death followed by the
same command again; the run must end where the unbroken reference does. Marked `chaos` (CI runs it;
about 3 minutes on 2 cores). On a real SGLang server (marked `sglang` too): a kill of its processes, a
SIGSTOP past its hang bound and a kill of its whole group, each recovered, nothing left over."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import env_with_src

from .test_sglang import SGLANG_PYTHON

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


@pytest.mark.chaos
@pytest.mark.sglang
@pytest.mark.skipif(not SGLANG_PYTHON.is_file(), reason="no SGLang environment (scripts/setup_sglang_env.sh)")
def test_a_real_sglang_server_killed_stopped_and_killed_with_its_reaper(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "chaos.py"), "--setup", "sglang", "--faults", "3",
                           "--kinds", "sigkill_server,sigstop_server,sigkill_server_group", "--steps", "24",
                           "--seed", "0", "--out", str(tmp_path), "--server-python", str(SGLANG_PYTHON)],
                          capture_output=True, text=True, env=env_with_src(), timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "sglang" / "result.json").read_text())
    assert [f["kind"] for f in result["faults"]] == ["sigkill_server", "sigstop_server", "sigkill_server_group"]
    assert all(f["recovered_s"] is not None and f["note"].startswith("pid") for f in result["faults"])
    assert not result["problems"]
