"""A server is one unit of processes: when its first process exits, or the trainer dies by SIGKILL,
no process of its session is left (real processes: a server that forks a worker, like vLLM's
EngineCore, and a trainer killed from outside)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from grpo.rollout.server.process import ServerProcess, oom_kills, server_environment
from tests.processes import env_with_src, session
from tests.waiting import wait_until

# A "server" whose worker is a separate process of the same session, as vLLM's API server and EngineCore.
FORKING_SERVER = textwrap.dedent("""
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print("serving", flush=True)
    time.sleep(300)
""")


def server_pid(log: Path) -> int:
    """The server's first process (the reaper's child), as the reaper logs it."""
    wait_until(lambda: log.is_file() and "server pid" in log.read_text(), 10, "the reaper logging the server's pid")
    return int(log.read_text().split("server pid ")[1].split(",")[0])


def test_when_the_servers_first_process_is_sigkilled_its_whole_session_ends(tmp_path):
    exits = []
    process = ServerProcess([sys.executable, "-c", FORKING_SERVER], {}, tmp_path / "s.log", exits.append)
    process.start()
    sid = process.pid
    assert os.getsid(sid) == sid  # the reaper leads the server's own session
    wait_until(lambda: len(session(sid)) == 3, 10, "reaper, server and its worker running")
    os.kill(server_pid(tmp_path / "s.log"), signal.SIGKILL)  # the API server alone, from outside
    wait_until(lambda: not session(sid), 10, "the whole session ended")
    assert process.exited.wait(10) and process.describe_exit() == "killed by SIGKILL"
    wait_until(lambda: exits == [process], 5, "the exit reported")  # an exit grpo did not cause is reported


def test_a_stop_ends_the_whole_session(tmp_path):
    process = ServerProcess([sys.executable, "-c", FORKING_SERVER], {}, tmp_path / "s.log", lambda p: None)
    process.start()
    wait_until(lambda: len(session(process.pid)) == 3, 10, "reaper, server and its worker running")
    process.stop(grace_s=5)
    assert process.exited.is_set()
    wait_until(lambda: not session(process.pid), 10, "the whole session ended")


TRAINER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from grpo.rollout.server.process import ServerProcess
    process = ServerProcess([sys.executable, "-c", sys.argv[1]], {}, Path(sys.argv[2]), lambda p: None,
                            remove_when_orphaned=Path(sys.argv[3]))
    process.start()
    print(process.pid, flush=True)
    time.sleep(300)
""")


def test_a_sigkilled_trainer_leaves_no_server_process_and_no_weight_copy(tmp_path):
    weights = tmp_path / "shm" / "grpo-test"
    (weights / "model").mkdir(parents=True)
    (weights / "model" / "model.safetensors").write_bytes(b"0" * 1024)
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, FORKING_SERVER, str(tmp_path / "s.log"), str(weights)],
                               stdout=subprocess.PIPE, text=True, env=env_with_src())
    sid = int(trainer.stdout.readline())
    wait_until(lambda: len(session(sid)) == 3, 10, "reaper, server and its worker running")
    trainer.kill()  # SIGKILL: no handler, no atexit, no finally runs in the trainer
    trainer.wait()
    trainer.stdout.close()
    wait_until(lambda: not session(sid), 10, "the whole session ended")
    wait_until(lambda: not weights.exists(), 5, "the weight copy removed")
    assert "trainer" in (tmp_path / "s.log").read_text() and "is gone" in (tmp_path / "s.log").read_text()


def test_oom_kills_are_read_from_the_kernel_log_where_it_is_readable():
    readable = subprocess.run(["dmesg"], capture_output=True).returncode == 0
    kills = oom_kills(time.time() + 3600)  # none can have happened after now
    assert kills == [] if readable else kills is None  # [] (read, none) is not None (could not read)


# A server that leaves files in its temporary directory, as SGLang leaves its ZMQ sockets.
LITTERING_SERVER = textwrap.dedent("""
    import os, tempfile, time
    tempfile.mkstemp()
    print("tmp", os.environ["TMPDIR"], flush=True)
    time.sleep(300)
""")


def test_grpos_own_kill_leaves_the_reaper_to_end_the_server_and_remove_its_temporary_directory(tmp_path):
    exits = []
    process = ServerProcess([sys.executable, "-c", LITTERING_SERVER], {}, tmp_path / "s.log", exits.append)
    process.start()
    wait_until(lambda: "tmp " in (tmp_path / "s.log").read_text(), 10, "the server's temporary file made")
    tmp = Path((tmp_path / "s.log").read_text().split("tmp ")[1].split()[0])
    assert tmp.name.startswith(f"grpo-server-{process.pid}-") and any(tmp.iterdir())
    process.kill()  # the server's processes, not the reaper: it outlives them to clean up
    assert process.exited.is_set() and process.describe_exit() == "killed by SIGKILL"
    assert not tmp.exists() and exits == []  # grpo's own kill is not reported as a failure


def test_a_reaper_removes_the_temporary_directories_of_reapers_killed_outright(tmp_path):
    import tempfile

    root = Path(tempfile.gettempdir())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphaned = root / f"grpo-server-{gone.pid}-killed"  # its reaper SIGKILLed with the server's group
    alive = root / f"grpo-server-{os.getpid()}-alive"  # a reaper still running: left alone
    for directory in (orphaned, alive):
        directory.mkdir()
        (directory / "socket").write_text("")
    process = ServerProcess([sys.executable, "-c", LITTERING_SERVER], {}, tmp_path / "s.log", lambda _: None)
    try:
        process.start()
        wait_until(lambda: "tmp " in (tmp_path / "s.log").read_text(), 10, "the server started")
        assert not orphaned.exists() and alive.exists()
    finally:
        process.kill()
        shutil.rmtree(alive, ignore_errors=True)
        shutil.rmtree(orphaned, ignore_errors=True)


def test_a_kubernetes_service_links_address_in_the_servers_port_variable_is_left_out(tmp_path, monkeypatch):
    # a Service named vllm in the pod's namespace (vllm-project/vllm#34199); SGLANG_PORT a plain number is kept
    monkeypatch.setenv("VLLM_PORT", "tcp://10.96.12.7:8000")
    monkeypatch.setenv("SGLANG_PORT", "30000")
    printing = "import os; print('seen', os.environ.get('VLLM_PORT'), os.environ.get('SGLANG_PORT'), flush=True)"
    process = ServerProcess([sys.executable, "-c", printing], {}, tmp_path / "s.log", lambda p: None)
    process.start()
    assert process.exited.wait(10)
    log = (tmp_path / "s.log").read_text()
    assert "seen None 30000" in log
    assert ("grpo: VLLM_PORT=tcp://10.96.12.7:8000 left out of the server's environment: a Kubernetes Service's "
            "address, not a port") in log
    # what rollout.server.env asks is the user's word, kept as it is
    env, dropped = server_environment({"VLLM_PORT": "tcp://10.96.12.7:8000"}, {"VLLM_PORT": "tcp://10.96.12.7:8000"})
    assert env["VLLM_PORT"] == "tcp://10.96.12.7:8000" and dropped == []
