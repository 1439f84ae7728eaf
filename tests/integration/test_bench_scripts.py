"""The benchmarks run: a script that no test runs rots between the sessions that measure with it (bench/
update_step.py and bench/scaling.py --mfu failed for a day after TrainBatch took a field)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import env_with_src

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_the_update_forms_benchmark_runs_on_the_tiny_model():
    done = subprocess.run([sys.executable, str(BENCH / "update_step.py"), "--model", "tiny", "--dtype", "float32",
                           "--device", "cpu", "--groups", "2", "--group-size", "4", "--micro-batch", "4",
                           "--repeats", "1"], capture_output=True, text=True, env=env_with_src(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "micro-batch 4:" in done.stdout and "packed (one pass)" in done.stdout


@pytest.mark.slow
def test_the_checkpoint_benchmark_runs_on_the_tiny_model(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "checkpoint.py"), "--model", "tiny", "--rounds", "1",
                           "--dir", str(tmp_path)], capture_output=True, text=True, env=env_with_src(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "round 1  page cache" in done.stdout and "round 1  past it" in done.stdout
    assert "page cache / past it: " in done.stdout and list(tmp_path.iterdir()) == []  # its checkpoints removed


@pytest.mark.slow
def test_the_generation_benchmark_runs_and_profiles_on_the_tiny_model():
    done = subprocess.run([sys.executable, str(BENCH / "generation.py"), "--model", "tiny", "--dtype", "float32",
                           "--device", "cpu", "--batch", "4", "--new-tokens", "4", "--repeats", "1", "--profile"],
                          capture_output=True, text=True, env=env_with_src(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ratio (engine / generate): " in done.stdout and "| operation | calls | host s | device s |" in done.stdout
