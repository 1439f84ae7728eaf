"""A server killed more often than rollout.server.max_restarts allows: the run stops, and the doctor
names the failure that stopped it (not the first kill, which the run recovered from) and the last good
checkpoint STOPPED.json names. The kills come from outside, as production's do."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

from grpo.errors import EXIT_STOPPED

from .test_doctor_faults import doctor_json
from .test_server_engine import SGLANG
from .test_server_shm import status


def test_the_doctor_names_the_failure_that_stopped_the_run(tmp_path, capsys):
    run_dir = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}", *SGLANG,
                             "rollout.server.max_restarts=1", "train.steps=200", "checkpoint.every_steps=1",
                             "logging.progress=false"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def logged() -> int:
        path = run_dir / "metrics.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def kill_server_after(steps: int) -> int:
        while not (logged() >= steps and status(run_dir).get("state") == "ready"):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            select.select([], [], [], 0.05)
        pid = status(run_dir)["pid"]
        os.killpg(pid, signal.SIGKILL)
        return pid

    try:
        kill_server_after(2)  # recovered: a restart, and steps after it
        first_steps = logged()
        kill_server_after(first_steps + 3)  # past max_restarts=1: the guard stops the run
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_STOPPED, err[-3000:]
    stopped = json.loads((run_dir / "STOPPED.json").read_text())
    code, result = doctor_json(run_dir, capsys)
    assert code == 1
    assert result["cause"] == "server_failure"
    assert result["first_bad_step"] > first_steps, (result["first_bad_step"], first_steps)  # not the first kill
    assert result["last_good_checkpoint"] == stopped["last_good_checkpoint"]
