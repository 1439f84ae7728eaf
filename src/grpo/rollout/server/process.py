"""One launched server: a session of processes led by grpo's reaper (reaper.py), its log captured,
watched by a thread that sees its exit the moment it happens, and ended as one unit: whatever ends it
(a crash of any of its processes, a restart, the trainer's death by any signal) ends all of them.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grpo.rollout.server.reaper import remove_orphaned_tmp, session_members

REAPER = Path(__file__).with_name("reaper.py")


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Activity:
    """What a server's processes are doing, as the kernel counts it (its reaper left out)."""

    stopped: bool  # one of them is stopped (SIGSTOP, a debugger): it answers nothing until continued
    cpu_s: float  # the CPU time they have used, user and system


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# Kubernetes gives every pod <SERVICE>_PORT=tcp://IP:PORT for each Service of its namespace: a Service named
# vllm or sglang sets the variable the server reads as its own port number, and it fails to start
# (vllm-project/vllm#34199). grpo picks the server's port itself, so such an address is left out.
SERVICE_LINK_PORTS = ("VLLM_PORT", "SGLANG_PORT")


def server_environment(inherited: dict[str, str], asked: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The server's environment: the trainer's, less a Service link's address in a variable the server reads
    as a port, then what rollout.server.env asks (kept whatever it says) -> (it, the variables left out)."""
    dropped = [name for name in SERVICE_LINK_PORTS
               if name not in asked and inherited.get(name, "").startswith("tcp://")]
    env = {name: value for name, value in inherited.items() if name not in dropped}
    return {**env, **asked}, dropped


class ServerProcess:
    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path,
                 on_exit: Callable[["ServerProcess"], None], remove_when_orphaned: Path | None = None) -> None:
        """`remove_when_orphaned`: a directory (the weights in /dev/shm) the reaper deletes when the
        trainer dies without doing it."""
        self.argv, self.env, self.log_path, self.on_exit = argv, env, log_path, on_exit
        self.remove_when_orphaned = remove_when_orphaned
        self.proc: subprocess.Popen | None = None
        self.exited = threading.Event()
        self.expected_exit = False  # set before grpo itself stops or kills it
        self.started_at = 0.0
        self.log_offset = 0  # where this start begins in the log

    @property
    def pid(self) -> int | None:
        """The reaper's: the id of the server's session and process group too."""
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env, dropped = server_environment(dict(os.environ), self.env)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
            for name in dropped:
                log.write(f"grpo: {name}={os.environ[name]} left out of the server's environment: a Kubernetes "
                          "Service's address, not a port\n".encode())
            log.flush()
            self.log_offset = log.tell()
            reaper = [sys.executable, "-I", str(REAPER), "--trainer", str(os.getpid())]
            if self.remove_when_orphaned is not None:
                reaper += ["--remove-when-orphaned", str(self.remove_when_orphaned)]
            self.proc = subprocess.Popen([*reaper, "--", *self.argv], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        self.started_at = time.time()
        threading.Thread(target=self._watch, name=f"watch-{self.proc.pid}", daemon=True).start()

    def _watch(self) -> None:
        assert self.proc is not None
        self.proc.wait()
        self._signal_group(signal.SIGKILL)  # the reaper ends the rest on its way out; this is the backstop
        self._reclaim_for_a_killed_reaper()
        self.exited.set()
        if not self.expected_exit:
            self.on_exit(self)

    def _reclaim_for_a_killed_reaper(self) -> None:
        """A reaper killed with its server (SIGKILL to the whole group) removed neither its temporary
        directory nor the server's shared memory: once the session's last process is gone (a file still
        mapped is not reclaimed), do what it would have (reaper.remove_orphaned_tmp; a reaper that
        exited normally left nothing for it to find)."""
        assert self.proc is not None
        deadline = time.monotonic() + 10
        while session_members(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # SIGKILLed processes release their mappings as they exit
        remove_orphaned_tmp(tempfile.gettempdir())

    def activity(self) -> Activity | None:
        """None once it has exited (or before it started)."""
        if self.proc is None or self.exited.is_set():
            return None
        stopped, ticks = False, 0
        for pid in session_members(self.proc.pid):
            if pid == self.proc.pid:
                continue  # the reaper: it polls, and its being stopped stops no answer
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            stopped |= fields[0] in ("T", "t")
            ticks += int(fields[11]) + int(fields[12])
        return Activity(stopped, ticks / CLOCK_TICKS)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    def describe_exit(self) -> str:
        return describe_exit(self.returncode)

    def _signal_group(self, sig: int) -> None:
        if self.proc is not None:
            signal_group(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the server and wait for its reaper; the exit counts as expected."""
        self.expected_exit = True
        self._signal_group(signal.SIGCONT)  # a reaper stopped with its server (SIGSTOP to the group) cleans up
        if self.proc is not None:
            signal_server(self.proc.pid, signal.SIGKILL)
        if not self.exited.wait(15):  # the reaper itself stuck: the whole group, as a last resort
            self._signal_group(signal.SIGKILL)
            self.exited.wait(30)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`; the exit counts as expected."""
        self.expected_exit = True
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)  # the reaper passes it to the server's first process
        if not self.exited.wait(grace_s):
            self.kill()

    def output(self, limit: int = 4 * 2**20) -> list[str]:
        """What the server wrote since this start (its last `limit` bytes)."""
        return log_since(self.log_path, self.log_offset, limit)

    def tail(self, lines: int = 20) -> list[str]:
        return log_tail(self.log_path, lines)


def signal_group(reaper_pid: int, sig: int) -> None:
    """`sig` to a server's whole process group, its reaper included."""
    try:
        os.killpg(reaper_pid, sig)
    except ProcessLookupError:
        pass


def signal_server(reaper_pid: int, sig: int) -> None:
    """`sig` to every process of a server's session but its reaper (the process grpo started, `reaper_pid`),
    which then ends what is left, removes the shared memory they left and exits as the server did. (A signal
    to the whole group would take the reaper with it, and leave that memory behind.)"""
    server = [pid for pid in session_members(reaper_pid) if pid != reaper_pid]
    if not server:  # the reaper has not started the server yet: nothing to clean, it goes too
        signal_group(reaper_pid, sig)
    for pid in server:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def describe_exit(code: int | None) -> str:
    """A process's return code in words."""
    if code is None:
        return "running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def log_since(log_path: Path, offset: int, limit: int = 4 * 2**20) -> list[str]:
    """A server's log from `offset` (where its start began), its last `limit` bytes at most."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(offset, os.path.getsize(log_path) - limit))
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def log_tail(log_path: Path, lines: int = 20) -> list[str]:
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - 64 * 1024))
            return [line.decode("utf-8", "replace").rstrip() for line in deque(f, maxlen=lines)]
    except OSError:
        return []


def oom_kills(since: float) -> list[str] | None:
    """Kernel log lines of out-of-memory kills since `since` (a time.time()), or None where the kernel
    log is not readable. By time, not pid: the OOM killer picks the largest process, which in a server
    is a worker, not the process grpo started."""
    try:
        result = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5)
        with open("/proc/uptime") as f:
            booted = time.time() - float(f.read().split()[0])
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if result.returncode != 0:
        return None
    kills = []
    for line in result.stdout.splitlines():
        stamp = re.match(r"\[\s*(\d+\.\d+)\]", line)
        if ("out of memory" in line.lower() or "oom-kill" in line.lower()) and stamp \
                and booted + float(stamp.group(1)) >= since - 1:
            kills.append(line.strip())
    return kills
