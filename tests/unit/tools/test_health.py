"""`grpo health`'s exit status for a running trainer's servers that are not serving, read from the status and
events a trainer writes (this process holds the run's lock, as a trainer would): 3 while a server starts or
waits to restart within its limits, 1 past them, 2 for a path that is no run directory."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from grpo.cli import main
from grpo.config import config_yaml, load_config
from grpo.rundir.lock import RunLock
from grpo.tools.health import NOT_SERVING, UNHEALTHY, check


@pytest.fixture
def running(tmp_path):
    """A run directory whose trainer (this process) is running, with a writer for its server's status and events."""
    run_dir = tmp_path / "run"
    (run_dir / "servers").mkdir(parents=True)
    (run_dir / "events.jsonl").touch()

    def write(state: str, restarts: int = 0, events: tuple[tuple[str, float], ...] = (), failed_s: float = 5.0):
        now = time.time()
        server = {"name": "sglang-0", "url": "http://127.0.0.1:9", "state": state, "pid": os.getpid(),
                  "incarnation": 2, "restarts": restarts, "max_restarts": 3, "policy_version": None,
                  "failures": [{"time": now - failed_s}] if state == "failed" else []}
        (run_dir / "servers" / "status.json").write_text(json.dumps(
            {"time": now, "engine": "sglang", "trainer_policy_version": 1, "servers": [server]}))
        with open(run_dir / "events.jsonl", "a") as f:
            for kind, ago in events:
                f.write(json.dumps({"time": now - ago, "step": 1, "kind": kind, "message": "",
                                    "evidence": {"server": "sglang-0", "incarnation": 2}}) + "\n")

    with RunLock(run_dir):
        yield run_dir, write


def test_a_server_failed_and_to_be_restarted_is_not_serving(running):
    run_dir, write = running
    write("failed", restarts=1, events=(("server_failed", 5),))
    lines, status = check(run_dir)
    assert status == NOT_SERVING == 3
    # the seconds since: 5 and the time health takes to import what asks servers for a token
    assert any(re.fullmatch(r" +sglang-0: failed \d+s ago, to be restarted", line) for line in lines)
    assert re.fullmatch(r"NOT SERVING: sglang-0 failed \d+s ago and is to be restarted", lines[-1])


def test_a_server_failed_with_no_restart_left_is_unhealthy_unless_its_last_restart_is_under_way(running):
    run_dir, write = running
    write("failed", restarts=3, events=(("server_failed", 5),))
    lines, status = check(run_dir)
    assert status == UNHEALTHY and re.search(r"sglang-0: failed \d+s ago, its 3 restarts used up", "\n".join(lines))
    assert lines[-1].startswith("UNHEALTHY: sglang-0 failed with its 3 restarts used up (rollout.server.max_restarts)")
    write("failed", restarts=3, events=(("server_restart", 1),))  # the budget counts the restart it waits for
    assert check(run_dir)[1] == NOT_SERVING


def test_a_server_starting_past_the_runs_startup_timeout_is_unhealthy(running):
    run_dir, write = running
    write("starting", events=(("server_start", 700),))
    lines, status = check(run_dir)
    assert status == UNHEALTHY
    assert re.search(r"sglang-0: starting for 7\d\ds, past its 600s startup timeout", "\n".join(lines))
    assert re.search(r"has been starting for 7\d\ds, past rollout.server.startup_timeout_s=600", lines[-1])
    # the run's own timeout, from its config.yaml
    (run_dir / "config.yaml").write_text(config_yaml(load_config("tiny", ["rollout.server.startup_timeout_s=900"])))
    lines, status = check(run_dir)
    assert status == NOT_SERVING
    assert re.fullmatch(r"NOT SERVING: sglang-0 is starting \(7\d\ds of its 900s startup timeout\)", lines[-1])


def test_a_path_that_is_no_run_directory_exits_2(tmp_path, capsys):
    assert main(["health", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path} is not a run directory (no events.jsonl or config.yaml)"
