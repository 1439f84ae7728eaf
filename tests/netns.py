"""Two nodes on one machine: two network namespaces joined by a veth pair, for tests of what crosses a real
network interface (torchrun's rendezvous and gloo, Ray's GCS), and of a node lost for real.

`two_nodes()` makes them and always tears them down: every process still inside either namespace is
SIGKILLed and waited for (a namespace outlives its name while a process holds it), then both namespaces
are deleted, which deletes the veth pair with them. Only root can; `skip_reason()` says why not, for
`pytest.mark.skipif`. Each node has its loopback up and one address on the pair; nothing else is routed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from tests.waiting import wait_until

SUBNET = "10.231.0"  # a /24 of no network here: only the two namespaces have it


def skip_reason() -> str | None:
    """Why two namespaced nodes cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2) to make network namespaces"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable: {probe.stderr.strip() or probe.returncode}"
    return None


@dataclass(frozen=True)
class Node:
    netns: str  # the namespace's name
    ifname: str  # its end of the veth pair
    address: str  # its address on the pair

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this node's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def link(self, up: bool) -> None:
        """Bring this node's end of the pair up or down: down, the node is cut off from the other."""
        _ip("-n", self.netns, "link", "set", self.ifname, "up" if up else "down")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _alive(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_all(node: Node) -> None:
    """SIGKILL every process inside the node's namespace and wait (bounded) until none is left."""
    for _ in range(10):  # a process may start another while its siblings are killed: a few rounds
        pids = [p for p in node.pids() if _alive(p)]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(lambda: not any(_alive(p) for p in pids), 30, f"the processes in {node.netns} gone")
    raise AssertionError(f"processes kept appearing in {node.netns}: {node.pids()}")


@contextmanager
def two_nodes() -> Iterator[tuple[Node, Node]]:
    """Two namespaces `grpo-<id>-a` and `-b`, addresses SUBNET.1 and .2 on a veth pair between them."""
    tag = uuid.uuid4().hex[:8]
    a = Node(f"grpo-{tag}-a", f"ga{tag}", f"{SUBNET}.1")
    b = Node(f"grpo-{tag}-b", f"gb{tag}", f"{SUBNET}.2")
    made: list[Node] = []
    try:
        for node in (a, b):
            _ip("netns", "add", node.netns)
            made.append(node)
        _ip("link", "add", a.ifname, "netns", a.netns, "type", "veth", "peer", "name", b.ifname, "netns", b.netns)
        for node in (a, b):
            _ip("-n", node.netns, "addr", "add", f"{node.address}/24", "dev", node.ifname)
            _ip("-n", node.netns, "link", "set", "lo", "up")
            node.link(True)
        yield a, b
    finally:
        errors = []
        for node in made:
            try:
                kill_all(node)
            except AssertionError as exc:
                errors.append(str(exc))
            result = subprocess.run(["ip", "netns", "del", node.netns], capture_output=True, text=True)
            if result.returncode != 0:
                errors.append(f"ip netns del {node.netns}: {result.stderr.strip()}")
        if errors:
            raise AssertionError("; ".join(errors))
