"""Processes as the kernel sees them, for tests that kill servers and trainers."""

from __future__ import annotations

import os
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


SRC = Path(__file__).resolve().parents[1] / "src"


def env_with_src(*extra: Path) -> dict[str, str]:
    """This process's environment for a child `python -m grpo`: the checkout's src first, then `extra`, then
    whatever PYTHONPATH already held (an environment whose packages come from a path, not site-packages)."""
    paths = [str(SRC), *map(str, extra), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
