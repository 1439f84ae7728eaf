"""Two nodes for real: two network namespaces joined by a veth pair (tests/netns.py; root only), one grpo
rank in each, so the rendezvous, gloo's collectives and Ray's control plane cross a network interface
rather than 127.0.0.1 (marked `distributed` and `netns`; CI runs them as root).

`torchrun --nnodes 2 --nproc-per-node 1` with one rank per namespace computes what one node's two ranks
compute, to the bit: the same gloo ring of two, and one intra-op thread per rank as torchrun gives each
rank of a node with several (OMP_NUM_THREADS=1; torchrun leaves one rank per node its cores).
"""

from __future__ import annotations

import importlib.util
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.netns import Node, kill_all, skip_reason, two_nodes
from tests.processes import env_with_src
from tests.waiting import wait_until

from .helpers import deterministic, metric_lines
from .test_distributed import STEPS, assert_same_weights, elastic_logs, one_process, torchrun, weights
from .test_server_engine import SGLANG, of_kind

pytestmark = [pytest.mark.distributed, pytest.mark.netns,
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

RDZV_PORT = 29400  # free in a namespace just made


def two_node_torchrun_command(node: Node, head: Node, run_dir: Path, *overrides: str) -> list[str]:
    """The command each node runs (docs/two-nodes.md): the c10d rendezvous hosted on the head's address."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={head.address}:{RDZV_PORT}", "--rdzv-id=grpo-two-nodes",
            # the rendezvous store's host: torchrun guesses it from the hostname, which names neither namespace
            f"--rdzv-conf=is_host={int(node == head)},join_timeout=120", f"--local-addr={node.address}",
            f"--log-dir={elastic_logs(run_dir)}/{node.netns}",
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


RAY_PORT = 6379


@contextmanager
def ray_cluster(tmp_path: Path):
    """Ray's head in one namespace, a worker in the other, two CPUs each; their own token and temporary
    directories (short: Ray's sockets live there). -> (head, worker, env for a driver on the head's node,
    a function that starts the worker node's raylet again)."""
    ray = Path(sys.executable).with_name("ray")
    tmp = Path(tempfile.mkdtemp(prefix="ray-"))
    (tmp / "token").write_text(secrets.token_hex(32))
    env = env_with_src() | {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                            "RAY_AUTH_TOKEN_PATH": str(tmp / "token")}
    try:
        with two_nodes() as (head, worker):
            def start(node: Node) -> None:
                where = ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"] if node == head else \
                    [f"--address={head.address}:{RAY_PORT}"]
                # gloo's interface, for the ranks the raylet starts: as under torchrun
                result = subprocess.run(node.command([str(ray), "start", *where, f"--node-ip-address={node.address}",
                                                      "--num-cpus=2", "--disable-usage-stats",
                                                      f"--temp-dir={tmp / node.netns}"]),
                                        env=env | {"GLOO_SOCKET_IFNAME": node.ifname}, capture_output=True,
                                        text=True, timeout=180)
                assert result.returncode == 0, result.stderr[-2000:]

            start(head)
            start(worker)
            yield head, worker, env, lambda: start(worker)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ray_two_nodes_command(head: Node, run_dir: Path, weights_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "grpo", "train", "--launcher", "ray", "--nproc", "2",
            "--ray-address", f"{head.address}:{RAY_PORT}", "--ray-strategy", "SPREAD", "--max-restarts", "0",
            "--config", "tiny", f"run_dir={run_dir}", *SGLANG, "rollout.server.replicas=2",
            f"rollout.server.weights_dir={weights_dir}", *RAY_STEPS, *overrides]


RAY_STEPS = ["train.steps=6", "checkpoint.every_steps=2", "checkpoint.keep_last=10"]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_ray_across_two_namespaces_places_a_rank_and_a_server_on_each_and_a_node_cut_off_stops_in_one_line_then_resumes_exactly(tmp_path):
    reference = tmp_path / "one"
    one_process(reference, *SGLANG, *RAY_STEPS)
    run_dir, weights_dir = tmp_path / "r", tmp_path / "weights"
    weights_dir.mkdir()
    with ray_cluster(tmp_path) as (head, worker, env, restart_worker):
        log = tmp_path / "first.log"
        first = subprocess.Popen(head.command(ray_two_nodes_command(head, run_dir, weights_dir)), env=env,
                                 stdout=log.open("w"), stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: first.poll() is not None or (run_dir / "metrics.jsonl").is_file() and
                       len((run_dir / "metrics.jsonl").read_text().splitlines()) >= 3, 400, "step 3 logged")
            worker.link(False)  # the worker node cut off mid-run, its rank and server with it
            status = first.wait(timeout=600)
        finally:
            first.kill()
            first.wait()
        output = log.read_text()
        assert status == 1, output[-3000:]
        # one line: what was lost, and the command that resumes it, as launched
        (stop,) = [line for line in output.splitlines() if line.startswith("grpo: ")]
        expected = shlex.join(["grpo", "train", "--launcher", "ray", "--nproc", "2", "--ray-address",
                               f"{head.address}:{RAY_PORT}", "--ray-strategy", "SPREAD", "--config",
                               str(run_dir / "config.yaml")])
        (lost,) = of_kind(run_dir, "rank_lost")  # whichever rank SPREAD put on the worker node
        assert lost["evidence"]["node"] == worker.address
        assert stop.startswith(f"grpo: rank {lost['evidence']['rank']} was lost (The actor died because its node "
                               "has died") and stop.endswith(f"resumes the run: {expected}"), stop
        # one rank and one server per node: Ray prefixes an actor's output with its node's address where that
        # is not the driver's
        ranks = re.findall(r"\(TrainerRank pid=(\d+)(?:, ip=([\d.]+))?\)", output)
        assert sorted({ip or head.address for _, ip in ranks}) == [head.address, worker.address]
        assert len({pid for pid, _ in ranks}) == 2
        starts = sorted(e["evidence"]["node"] for e in of_kind(run_dir, "server_start"))
        assert starts == [head.address, worker.address]
        done = [x["step"] for x in metric_lines(run_dir)]
        assert done[:3] == [1, 2, 3] and len(done) < 6

        # the node back: a new raylet in its namespace (the old one's processes ended), then the command
        kill_all(worker)
        worker.link(True)
        restart_worker()
        resumed = subprocess.run(head.command([sys.executable, "-m", *shlex.split(expected)]),
                                 env=env, capture_output=True, text=True, timeout=600)
        assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    lines = metric_lines(run_dir)
    assert [x["step"] for x in lines] == [1, 2, 3, 4, 5, 6]  # nothing lost, nothing logged twice
    assert all(x["update/applied"] == 1 for x in lines)
    # the resume: from the newest good checkpoint, ending with one process's parameters on one server
    (restart,) = [e for e in of_kind(run_dir, "restart")]
    assert restart["message"].endswith("step_000002") or restart["message"].endswith("step_000004"), restart
    assert_same_weights(weights(reference, 6), weights(run_dir, 6))
