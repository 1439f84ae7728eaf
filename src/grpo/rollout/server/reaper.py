"""The first process of every server grpo starts: it makes the server one unit of processes.

    python -I reaper.py --trainer PID [--remove-when-orphaned DIR] -- SERVER ARGV...

It leads the server's own session (the trainer starts it with setsid), starts the server in it, and
ends the whole session when either
- the server's first process exits, however (vLLM's API server exits and leaves its EngineCore and
  workers behind, 3.5-4.3 GB each, re-parented to pid 1), or
- the trainer is gone, by any signal, SIGKILL included: it polls its parent, which changes when the
  trainer dies, and then also removes the trainer's weight copy in /dev/shm (--remove-when-orphaned).
Either way it then removes the shared memory the server's processes made and a kill left behind
(vLLM's psm_* segments and sem.mp-* files): the /dev/shm files that a process of this session had
mapped or open while it polled and that were created after the server started, once no process
outside the session maps them. Files of other servers, and any made and lost between two polls, are
left alone.
Then it exits as the server did (the same status, or killed by the same signal), so the trainer's
diagnosis reads the server's exit, not this process's.

It is a child subreaper: processes whose parent dies are re-parented to it, not to pid 1, so none
escapes and none is left a zombie. It runs with the trainer's Python in isolated mode and imports
only the standard library: it starts in milliseconds and holds a few MB.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.25
SHM = "/dev/shm"
SHM_PREFIXES = ("psm_", "sem.mp-")


def shm_in_use(pids: list[int]) -> set[str]:
    """The vLLM-style /dev/shm files these processes have mapped or open."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                paths = [line.split(None, 5)[5].strip() for line in f if line.count(" ") >= 5 and SHM in line]
            paths += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        for path in paths:
            name = path[len(SHM) + 1:] if path.startswith(SHM + "/") else ""
            if name.startswith(SHM_PREFIXES) and "/" not in name:
                found.add(name.removesuffix(" (deleted)"))
    return found


def reclaim_shm(names: set[str], since: float) -> list[str]:
    """Remove the files of `names` made after `since` that no live process maps any more."""
    still_used = shm_in_use([int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()])
    removed = []
    for name in sorted(names - still_used):
        path = os.path.join(SHM, name)
        try:
            if os.stat(path).st_ctime >= since:
                os.unlink(path)
                removed.append(name)
        except OSError:
            pass  # already gone
    return removed


def session_members(sid: int) -> list[int]:
    """Every live process of session `sid` but this one."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry))
    return members


def end_session() -> None:
    """SIGKILL every other process of this session and reap the ones re-parented here."""
    sid = os.getsid(0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        members = session_members(sid)
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()
        if not members:
            return
        time.sleep(0.05)


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    trainer = int(options[options.index("--trainer") + 1])
    remove = options[options.index("--remove-when-orphaned") + 1] if "--remove-when-orphaned" in options else None
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no subreaper: orphans go to pid 1, and end_session still finds them by session
    started = time.time() - 1  # ctime has a coarser clock: a file made as the server starts still counts
    server = subprocess.Popen(command)
    # The trainer stops the server with SIGTERM to the whole group: the server shuts down on its own,
    # and this process outlives it to end the rest. (A Python handler, not SIG_IGN: that is inherited.)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    print(f"grpo reaper {os.getpid()}: server pid {server.pid}, session {os.getsid(0)}, trainer {trainer}",
          flush=True)
    orphaned, shm = False, set()
    while server.poll() is None:
        if os.getppid() != trainer:
            orphaned = True
            break
        shm |= shm_in_use(session_members(os.getsid(0)))
        try:
            server.wait(POLL_S)
        except subprocess.TimeoutExpired:
            pass
    end_session()
    removed = reclaim_shm(shm, started)
    if removed:
        print(f"grpo reaper: removed the server's shared memory left in {SHM}: {' '.join(removed)}", flush=True)
    if orphaned:
        print(f"grpo reaper: trainer {trainer} is gone: ended the server's session", flush=True)
        if remove:
            shutil.rmtree(remove, ignore_errors=True)
        return 1
    code = server.returncode
    if code >= 0:
        return code
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    return 128 - code  # a signal whose default is to be ignored


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
