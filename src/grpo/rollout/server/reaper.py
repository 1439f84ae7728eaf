"""The first process of every server grpo starts: it makes the server one unit of processes.

    python -I reaper.py --trainer PID [--remove-when-orphaned DIR] -- SERVER ARGV...

It leads the server's own session (the trainer starts it with setsid), starts the server in it, and
ends the whole session when either
- the server's first process exits, however (vLLM's API server exits and leaves its EngineCore and
  workers behind, 3.5-4.3 GB each, re-parented to pid 1), or
- the trainer is gone, by any signal, SIGKILL included: it polls its parent, which changes when the
  trainer dies, and then also removes the trainer's weight copy in /dev/shm (--remove-when-orphaned).
Either way it then removes the shared memory the server's processes made and a kill left behind
(vLLM's psm_* segments and sem.mp-* files, SGLang's sglang_loads_* slots and sgl_shm_* segments):
the files directly in /dev/shm that a process of this session had mapped or open while it polled and
that were created after the server started, once no process outside the session maps them; and the
named semaphores (sem.mp-*) created since the server started that no process maps: a semaphore works
only while mapped, and the resource tracker of a killed server never unlinks its own. Files are told
apart by inode (a live semaphore is mapped under the temporary name glibc made it with).
Files of other servers, and any other file made and lost between two polls, are left alone.
The server gets a temporary directory of its own (TMPDIR), removed with it, where the reaper also
keeps what it has seen the server hold in /dev/shm (SHM_RECORD). A reaper killed outright (SIGKILL to
the server's whole process group, as another job or a cgroup's OOM kill does) can remove neither, so
each reaper as it starts, and the trainer when a server's session ends, removes those of reapers no
longer alive, and reclaims the shared memory their records name, by the same rules.
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
import tempfile
import time

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.25
SHM = "/dev/shm"


def shm_in_use(pids: list[int]) -> set[int]:
    """The inodes of the files in /dev/shm that these processes have mapped or open. By inode, not by
    name: glibc makes a named semaphore under a temporary name, maps it, links it as sem.mp-* and
    unlinks the temporary one, so a live semaphore is mapped as '/dev/shm/sem.XXXXXX (deleted)'."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                found |= {int(line.split()[4]) for line in f if f" {SHM}/" in line}
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(SHM + "/"):
                    found.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return found


def reclaim_shm(held: set[int], since: float) -> list[str]:
    """Remove the files directly in /dev/shm made after `since` that no live process maps or holds now, and
    that the server's processes held (inodes `held`) or are named semaphores (sem.mp-*)."""
    still_used = shm_in_use([int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()])
    removed = []
    for entry in sorted(os.scandir(SHM), key=lambda e: e.name):
        try:
            info = entry.stat(follow_symlinks=False)
            ours = info.st_ino in held or entry.name.startswith("sem.mp-")
            if entry.is_file(follow_symlinks=False) and ours and info.st_ino not in still_used and \
                    info.st_ctime >= since:
                os.unlink(entry.path)
                removed.append(entry.name)
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


TMP_PREFIX = "grpo-server-"
SHM_RECORD = "shm-held"  # in the server's temporary directory: the start time, then one held inode a line


def write_record(tmp: str, since: float, held: set[int]) -> None:
    """What a reaper killed outright leaves for the next one to reclaim (replaced whole, never torn)."""
    part = os.path.join(tmp, SHM_RECORD + ".part")
    with open(part, "w") as f:
        f.write("\n".join([repr(since), *map(str, sorted(held))]))
    os.replace(part, os.path.join(tmp, SHM_RECORD))


def read_record(tmp: str) -> tuple[float, set[int]] | None:
    try:
        with open(os.path.join(tmp, SHM_RECORD)) as f:
            since, *held = f.read().split()
        return float(since), {int(inode) for inode in held}
    except (OSError, ValueError):
        return None


def remove_orphaned_tmp(root: str) -> list[str]:
    """Remove the temporary directories (grpo-server-PID-*) in `root` whose reaper PID is gone, after
    reclaiming the shared memory their records name: -> the names of both."""
    removed = []
    for name in os.listdir(root):
        pid = name[len(TMP_PREFIX):].split("-", 1)[0]
        if not name.startswith(TMP_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            record = read_record(os.path.join(root, name))
            if record is not None:
                removed += reclaim_shm(record[1], record[0])
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(name)
        except PermissionError:
            pass  # alive, another user's
    return removed


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
    # A temporary directory of the server's own, removed with it: SGLang leaves its ZMQ sockets there.
    remove_orphaned_tmp(tempfile.gettempdir())
    tmp = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")
    server = subprocess.Popen(command, env={**os.environ, "TMPDIR": tmp})
    # The trainer stops the server with SIGTERM to this process, passed on to the server's first process
    # alone: it shuts down its own children (SGLang's scheduler, vLLM's EngineCore), where a signal to
    # each of them reads to it as a crash of one (SGLang then waits 5 s more); this process outlives
    # it to end what is left. (A Python handler, not SIG_IGN: that is inherited.)
    def forward(signum: int, _frame) -> None:
        try:
            server.send_signal(signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    print(f"grpo reaper {os.getpid()}: server pid {server.pid}, session {os.getsid(0)}, trainer {trainer}",
          flush=True)
    orphaned, shm = False, set()
    while server.poll() is None:
        if os.getppid() != trainer:
            orphaned = True
            break
        held = shm | shm_in_use(session_members(os.getsid(0)))
        if held != shm:
            shm = held
            write_record(tmp, started, shm)
        try:
            server.wait(POLL_S)
        except subprocess.TimeoutExpired:
            pass
    end_session()
    shutil.rmtree(tmp, ignore_errors=True)
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
