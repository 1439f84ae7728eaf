"""Processes as the kernel sees them, for tests that kill servers and trainers."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def session(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`: a server's, as its reaper leads one."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                members.append(int(entry))
    return members


def shm_held(sid: int) -> set[str]:
    """The names in /dev/shm of the files the processes of session `sid` map or hold open (a live named
    semaphore is mapped under a deleted temporary name: matched by inode)."""
    from grpo.rollout.server.reaper import shm_in_use

    held = shm_in_use(session(sid))
    return {entry.name for entry in os.scandir("/dev/shm") if entry.inode() in held}


def kill_group_and_see_it_reclaimed(sid: int) -> None:
    """SIGKILL to server session `sid`'s whole group, its reaper too (another job's kill), then wait until
    what it held in /dev/shm and its reaper's temporary directory are gone (the trainer reclaims them)."""
    from tests.waiting import wait_until

    held = wait_until(lambda: shm_held(sid), 30, "the server's files in /dev/shm")
    os.killpg(sid, signal.SIGKILL)
    wait_until(lambda: not [n for n in held if Path("/dev/shm", n).exists()], 15, f"the killed server's {sorted(held)} removed")
    wait_until(lambda: not list(Path("/tmp").glob(f"grpo-server-{sid}-*")), 5, "the killed reaper's temporary directory removed")


SRC = Path(__file__).resolve().parents[1] / "src"


def env_with_src(*extra: Path) -> dict[str, str]:
    """This process's environment for a child `python -m grpo`: the checkout's src first, then `extra`, then
    whatever PYTHONPATH already held (an environment whose packages come from a path, not site-packages)."""
    paths = [str(SRC), *map(str, extra), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
