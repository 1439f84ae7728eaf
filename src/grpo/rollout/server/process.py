"""One launched server process: started in its own process group with its log captured, watched by
a thread that sees its exit the moment it happens, and killed as a group (servers fork workers).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent(argv: list[str]) -> list[str]:
    """The kernel kills the server when the thread that started it dies, even by SIGKILL, so a
    killed trainer never leaves a server holding memory (util-linux setpriv, where installed)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class ServerProcess:
    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path,
                 on_exit: Callable[["ServerProcess"], None]) -> None:
        self.argv, self.env, self.log_path, self.on_exit = argv, env, log_path, on_exit
        self.proc: subprocess.Popen | None = None
        self.exited = threading.Event()
        self.expected_exit = False  # set before grpo itself stops or kills it
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(_die_with_parent(self.argv), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, **self.env},
                                         start_new_session=True)  # its own group, killed as one
        self.started_at = time.time()
        threading.Thread(target=self._watch, name=f"watch-{self.proc.pid}", daemon=True).start()

    def _watch(self) -> None:
        assert self.proc is not None
        self.proc.wait()
        self.exited.set()
        if not self.expected_exit:
            self.on_exit(self)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    def describe_exit(self) -> str:
        code = self.returncode
        if code is None:
            return "running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exited with status {code}"

    def _signal_group(self, sig: int) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the whole group and wait for it; the exit counts as expected."""
        self.expected_exit = True
        self._signal_group(signal.SIGKILL)
        self.exited.wait(30)

    def stop(self, grace_s: float = 10.0) -> None:
        self.expected_exit = True
        self._signal_group(signal.SIGTERM)
        if not self.exited.wait(grace_s):
            self._signal_group(signal.SIGKILL)
            self.exited.wait(30)

    def send(self, sig: int) -> None:
        """A signal from outside grpo's own control (fault injection): its exit is unexpected."""
        self._signal_group(sig)

    def tail(self, lines: int = 20) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 64 * 1024))
                return [line.decode("utf-8", "replace").rstrip() for line in deque(f, maxlen=lines)]
        except OSError:
            return []


def oom_kills(pid: int | None) -> list[str]:
    """Kernel log lines recording an out-of-memory kill of `pid`, where the kernel log is readable."""
    if pid is None:
        return []
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.splitlines() if "out of memory" in line.lower() and f"process {pid}" in line.lower()
            or f"Killed process {pid} " in line]
