"""Two nodes for real: two network namespaces joined by a veth pair (tests/netns.py; root only), one grpo
rank in each, so the rendezvous, gloo's collectives and Ray's control plane cross a network interface
rather than 127.0.0.1 (marked `distributed` and `netns`; CI runs them as root).

`torchrun --nnodes 2 --nproc-per-node 1` with one rank per namespace computes what one node's two ranks
compute, to the bit: the same gloo ring of two, and one intra-op thread per rank as torchrun gives each
rank of a node with several (OMP_NUM_THREADS=1; torchrun leaves one rank per node its cores).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns import Node, skip_reason, two_nodes
from tests.processes import env_with_src

from .helpers import deterministic, metric_lines
from .test_distributed import STEPS, torchrun, weights

pytestmark = [pytest.mark.distributed, pytest.mark.netns,
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

RDZV_PORT = 29400  # free in a namespace just made


def two_node_torchrun_command(node: Node, head: Node, run_dir: Path, *overrides: str) -> list[str]:
    """The command each node runs (docs/two-nodes.md): the c10d rendezvous hosted on the head's address."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={head.address}:{RDZV_PORT}", "--rdzv-id=grpo-two-nodes",
            # the rendezvous store's host: torchrun guesses it from the hostname, which names neither namespace
            f"--rdzv-conf=is_host={int(node == head)},join_timeout=120", f"--local-addr={node.address}",
            "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}", *overrides]


def link_bytes(node: Node) -> int:
    """Bytes the node has sent and received on its end of the pair."""
    out = subprocess.run(node.command(["cat", f"/sys/class/net/{node.ifname}/statistics/rx_bytes",
                                       f"/sys/class/net/{node.ifname}/statistics/tx_bytes"]),
                         capture_output=True, text=True, check=True).stdout
    return sum(int(x) for x in out.split())


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("one-node") / "r"
    result = torchrun(run_dir, *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_torchrun_with_one_rank_in_each_of_two_namespaces_computes_what_two_ranks_on_one_node_do(tmp_path, one_node):
    run_dir = tmp_path / "r"
    with two_nodes() as (head, other):
        procs = []
        for node in (head, other):
            # gloo's interface: by default it takes the one the hostname resolves to, which no namespace has
            env = env_with_src() | {"GLOO_SOCKET_IFNAME": node.ifname, "OMP_NUM_THREADS": "1"}
            log = (tmp_path / f"{node.netns}.log").open("w")
            procs.append(subprocess.Popen(node.command(two_node_torchrun_command(node, head, run_dir, *STEPS)),
                                          env=env, stdout=log, stderr=subprocess.STDOUT))
        statuses = [p.wait(timeout=600) for p in procs]
        crossed = link_bytes(head)
    logs = {p.name: p.read_text()[-2000:] for p in tmp_path.glob("*.log")}
    assert statuses == [0, 0], logs
    # every step's allreduce of the tiny model's gradients (88,704 fp32 values) went over the pair
    assert crossed > 5 * 88_704 * 4, crossed

    one, two = metric_lines(one_node), metric_lines(run_dir)
    assert [x["step"] for x in two] == [1, 2, 3, 4, 5]
    differences = [(x["step"], key) for x, y in zip(one, two)
                   for key in deterministic(x) if deterministic(x)[key] != deterministic(y).get(key)]
    assert differences == []  # every metric value equal, not merely close
    a, b = weights(one_node, 5), weights(run_dir, 5)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    policy = sorted(p.name for p in (run_dir / "checkpoints" / "step_000005" / "policy").iterdir())
    assert policy == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # each node's rank wrote its shards
