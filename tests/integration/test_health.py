"""`grpo health` on a healthy run (exit 0), a run whose server was killed and a stopped run (1), and a run whose
server is starting or failed and waits to restart (3: not serving yet)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from grpo.cli import main
from grpo.rundir.files import JsonlLog
from tests.waiting import wait_until

from .helpers import make_loop
from .test_server_engine import SGLANG


@pytest.fixture
def paused_run(tmp_path):
    """A real trainer on the stand-in server, frozen (SIGSTOP) at step 2 with its server running."""
    run_dir = tmp_path / "r"
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}",
                                 *SGLANG, "train.steps=4", "testing.faults.stop_before_record_at_step=2"],
                                stdout=subprocess.DEVNULL, stderr=err)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), (tmp_path / "stderr").read_text()
    yield run_dir, proc
    proc.kill()
    proc.wait()


def test_a_healthy_run(paused_run, capsys):
    run_dir, proc = paused_run
    assert main(["health", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"TRAINER  running (pid {proc.pid}" in out
    assert "sglang-0 at http://127.0.0.1:" in out and "generated a token in" in out
    assert "serves policy version 2" in out and "trainer policy version 2" in out  # step 2 synced
    assert "MEMORY   host" in out and "DISK     " in out and "last good: " in out and out.rstrip().endswith("HEALTHY")


def test_a_run_whose_server_was_killed(paused_run, capsys):
    run_dir, proc = paused_run
    server = json.loads((run_dir / "servers" / "status.json").read_text())["servers"][0]
    os.killpg(server["pid"], signal.SIGKILL)
    from grpo.tools.health import _alive

    wait_until(lambda: not _alive(server["pid"]), 30, "the killed server's exit")  # SIGKILL lands asynchronously
    assert main(["health", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert f"process {server['pid']} is not running" in out and "sglang-0: NOT generating" in out
    assert "UNHEALTHY: sglang-0's process" in out


def test_a_stopped_run(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", *SGLANG, "train.steps=4",
                 "testing.faults.zero_reward_at_steps=[1,2]", "guard.zero_reward.patience=2",
                 "guard.zero_reward.action=stop"]) == 3
    capsys.readouterr()
    assert main(["health", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert "TRAINER  stopped by the guard at step 2: zero_reward" in out
    assert "UNHEALTHY: the run was stopped by the guard" in out


def test_a_server_starting_is_reported_as_starting_with_its_new_process(tmp_path, capsys):
    """status.json follows the server's start as it happens: a (resumed) run's new server is not
    reported by the previous one's dead process."""
    import threading

    from grpo.config import load_config

    never_ready = tmp_path / "never_ready.py"
    never_ready.write_text("import time\nprint('loading', flush=True)\ntime.sleep(120)\n")
    run_dir = tmp_path / "r"
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", "rollout.engine=sglang",
                                          f"rollout.server.command={sys.executable} {never_ready}"]))
    starting = threading.Thread(target=loop.engine.start, args=(loop.policy,))
    starting.start()
    try:
        path = run_dir / "servers" / "status.json"

        def starting_status() -> dict | None:
            status = json.loads(path.read_text())["servers"][0] if path.is_file() else {}
            return status if status.get("state") == "starting" else None

        status = wait_until(starting_status, 30, "status.json saying the server is starting", interval=0.1)
        assert status["state"] == "starting" and status["incarnation"] == 1
        os.kill(status["pid"], 0)  # the process starting now
        assert main(["health", str(run_dir)]) == 3  # not serving yet
        out = capsys.readouterr().out
        assert "sglang-0: starting for " in out and "is gone" not in out and "NOT generating" not in out
        assert re.search(r"^NOT SERVING: sglang-0 is starting \(\d+s of its 600s startup timeout\)$", out, re.M)
    finally:
        loop.signals.event.set()  # a stop signal ends the start at once
        starting.join(10)
        loop.close()
    assert not starting.is_alive()


def test_a_server_that_failed_and_waits_to_restart_is_not_serving(tmp_path, capsys):
    import threading

    from grpo.config import load_config

    run_dir = tmp_path / "r"
    crash = f"{sys.executable} -c exit(3)"  # a server that dies as it starts
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", "rollout.engine=sglang",
                                          f"rollout.server.command={crash}", "rollout.server.restart_backoff_s=300"]))
    starting = threading.Thread(target=loop.engine.start, args=(loop.policy,))
    starting.start()
    try:
        def waiting_to_restart() -> bool:
            return any(e.get("kind") == "server_restart" for e in JsonlLog(run_dir / "events.jsonl").read()[0])

        wait_until(waiting_to_restart, 60, "the failed server's restart to be scheduled", interval=0.1)
        assert json.loads((run_dir / "servers" / "status.json").read_text())["servers"][0]["state"] == "failed"
        assert main(["health", str(run_dir)]) == 3
        out = capsys.readouterr().out
        assert re.search(r"^ +sglang-0: failed \d+s ago, to be restarted$", out, re.M)
        assert re.search(r"^NOT SERVING: sglang-0 failed \d+s ago and is to be restarted$", out, re.M)
    finally:
        loop.signals.event.set()  # a stop signal ends the restart's wait at once
        starting.join(10)
        loop.close()
    assert not starting.is_alive()


def test_a_run_whose_trainer_was_sigkilled_lists_no_server_as_ready(paused_run, capsys):
    run_dir, proc = paused_run
    server = json.loads((run_dir / "servers" / "status.json").read_text())["servers"][0]
    assert server["state"] == "ready"  # as the trainer last wrote it
    proc.kill()
    proc.wait()
    assert main(["health", str(run_dir)]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith("sglang-0 at"))
    assert ": ready," not in line, line
    assert "gone with the trainer (was ready)" in line or "left running by a trainer that is gone" in line, line
    assert "TRAINER  not running, not finished" in out
