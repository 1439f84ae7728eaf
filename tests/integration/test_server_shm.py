"""A killed server's own shared memory (vLLM's psm_* segments and sem.mp-* files in /dev/shm) is
removed by its reaper, for the incarnation that made it only: the stand-in server holds such files
(--shared-memory), a real process maps them, and it is killed as production kills servers. A named
semaphore that no process maps (SGLang's processes leave such) goes too; one a live process maps stays."""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from .test_server_engine import SGLANG

SHM = Path("/dev/shm")


def status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "servers" / "status.json").read_text())["servers"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return {}


def wait_until(proc: subprocess.Popen, ready) -> None:
    while not ready():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        select.select([], [], [], 0.05)


def server_shm(pid: int) -> set[str]:
    """The psm_*/sem.mp-* files the processes of server session `pid` map."""
    names = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(entry)) != pid:
                continue
            maps = Path(f"/proc/{entry}/maps").read_text()
        except OSError:
            continue
        names |= {line.split("/dev/shm/")[1].strip() for line in maps.splitlines()
                  if "/dev/shm/psm_" in line or "/dev/shm/sem.mp-" in line}
    return names


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_killed_servers_shared_memory_is_removed_and_no_other(tmp_path):
    run_dir = tmp_path / "r"
    bystander = SHM / f"psm_bystander_{os.getpid()}"  # another program's: must survive
    bystander.write_bytes(b"\0" * 64)
    proc = subprocess.Popen([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}", *SGLANG,
                             "rollout.server.extra_args=[--shared-memory]", "train.steps=200",
                             "logging.progress=false"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(proc, lambda: status(run_dir).get("state") == "ready")
        first = status(run_dir)
        wait_until(proc, lambda: len(server_shm(first["pid"])) == 2)
        made = server_shm(first["pid"])
        live = multiprocessing.get_context("spawn").Semaphore()  # named, mapped by this process: in use
        live_file = SHM / f"sem.{live._semlock.name.lstrip('/')}"
        unmapped = SHM / f"sem.mp-grpotest{os.getpid()}"  # closed without an unlink: no process can use it
        unmapped.write_bytes(b"\0" * 32)
        server_process = next(int(p) for p in filter(str.isdigit, os.listdir("/proc"))
                              if os.getsid(int(p)) == first["pid"] and int(p) != first["pid"]
                              and b"--shared-memory" in Path(f"/proc/{p}/cmdline").read_bytes())
        os.kill(server_process, signal.SIGKILL)  # the server, not its reaper: as the OOM killer would
        wait_until(proc, lambda: status(run_dir).get("incarnation", 0) > first["incarnation"]
                   and status(run_dir).get("state") == "ready")
        assert not [n for n in made if (SHM / n).exists()], made
        assert not unmapped.exists() and live_file.exists()
        second = status(run_dir)
        wait_until(proc, lambda: len(server_shm(second["pid"])) == 2)
        made = server_shm(second["pid"])
        assert all((SHM / n).exists() for n in made)  # the new incarnation's own are kept while it runs
        proc.kill()  # the trainer, SIGKILLed: the reaper ends the server and removes its files
        proc.wait()
        deadline = time.monotonic() + 60
        while not gone(second["pid"]):  # the reaper notices within a poll, ends the session, then cleans
            assert time.monotonic() < deadline, "the reaper outlived its trainer by a minute"
            select.select([], [], [], 0.05)
        assert not [n for n in made if (SHM / n).exists()], made
        assert bystander.exists()
    finally:
        proc.kill()
        bystander.unlink(missing_ok=True)
        unmapped.unlink(missing_ok=True)
