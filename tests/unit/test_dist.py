"""grpo.dist.exit_process: a rank of a gloo group ends without the interpreter's teardown (where gloo's
threads can abort it), its output flushed; a process outside any group exits as usual."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

SCRIPT = """
import atexit, logging, sys
import torch, torch.distributed as dist
from grpo.dist import exit_process

logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
atexit.register(print, "teardown ran")
if sys.argv[2] == "group":
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} summed {total.item():g}")
else:
    print("no group")
logging.getLogger("grpo").info("logged before the exit")
exit_process(3)
"""


def start(tmp_path, name: str, mode: str, env: dict[str, str]) -> subprocess.Popen:
    # Piped stdout without PYTHONUNBUFFERED is block-buffered: what is not flushed is lost.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | env
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / f"{name}.log"), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.distributed
def test_a_rank_exits_with_its_status_and_its_output_but_without_the_interpreters_teardown(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    group = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    ranks = [start(tmp_path, f"rank{r}", "group", {**group, "RANK": str(r)}) for r in (0, 1)]
    for r, proc in enumerate(ranks):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 3, err[-2000:]
        assert out == f"rank {r} summed 2\n"  # flushed, and no "teardown ran": atexit was skipped
        assert "logged before the exit" in (tmp_path / f"rank{r}.log").read_text()


def test_outside_a_group_the_process_exits_as_usual(tmp_path):
    proc = start(tmp_path, "one", "alone", {})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err[-2000:]
    assert out == "no group\nteardown ran\n"
    assert "logged before the exit" in (tmp_path / "one.log").read_text()
