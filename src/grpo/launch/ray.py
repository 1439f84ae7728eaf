"""`grpo train --launcher ray --nproc N`: the trainer ranks as Ray actors, and their inference servers.

A placement group reserves one bundle per rank (a GPU each where the model runs on CUDA, else a CPU)
and, with a server engine that grpo starts (rollout.engine=vllm|sglang, no rollout.server.urls), one
more per server after them (the same kind), packed onto as few nodes as possible. Rank 0 starts each
server as an actor in its own bundle and supervises it (grpo.rollout.server.ray_host); a server actor
lost is recorded and restarted by rank 0, in the same bundle, while the ranks go on. Each rank's actor
runs the ordinary `grpo train` in its own process with the environment torchrun would give it (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT on rank 0's node), so the group, the guard and the
checkpoints behave exactly as under torchrun.

The driver watches the actors. A rank whose actor dies (killed, out of memory, its node lost) takes the
step with it, as under torchrun: the driver records `rank_lost`, kills the rest of the group, records
`group_restart` and starts a new group in the same placement group, which resumes from the newest good
checkpoint by itself. Past `--max-restarts` it stops with status 1. A rank that exits by itself (finished,
stopped by the guard, interrupted, bad input, full disk) ends the launch with rank 0's status: restarting
cannot fix those. The driver writes events only while no group runs, so the run directory keeps one
writer at a time.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from grpo.config import RunConfig, load_config, split_overrides
from grpo.errors import ConfigError
from grpo.rollout.server.ray_host import SERVER_BUNDLES_ENV, SERVER_GPUS_ENV, actor_loss_cause
from grpo.rundir.events import EventLog
from grpo.rundir.resume import LAUNCHER_ENV, RAY_STRATEGY_ENV, resume_command

EXIT_GAVE_UP = 1  # the group kept losing ranks: as a crash, the newest good checkpoint resumes it
# After a rank exits with an error by itself, how long the others may take to end theirs before they
# are taken to be waiting on it; a rank lost meanwhile still counts as lost.
GRACE_S = 120.0
# Before a new group starts: how long the placement group may take to be placed again when a node it had
# bundles on was lost (Ray reschedules them onto the nodes left, or onto one that joins).
REPLACE_S = 120.0


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--launcher ray needs Ray: pip install 'grpo[ray]'") from None
    return ray


def bundles(nproc: int, gpus: bool, servers: int = 0) -> list[dict[str, float]]:
    """One bundle per rank, then one per server: the resources each actor holds."""
    if nproc < 1:
        raise ConfigError(f"--nproc must be at least 1; got {nproc}")
    return [{"GPU": 1.0, "CPU": 1.0} if gpus else {"CPU": 1.0} for _ in range(nproc + servers)]


def placed_servers(cfg: RunConfig) -> int:
    """How many servers Ray places: those grpo starts for a server engine (attached ones run elsewhere)."""
    from grpo.rollout.engines.registry import serves
    from grpo.rollout.engines.select import resolve_engine

    if not serves(resolve_engine(cfg.rollout.engine)) or cfg.rollout.server.urls:
        return 0
    return cfg.rollout.server.replicas


def rank_environment(rank: int, world: int, master_addr: str, master_port: int, attempt: int,
                     server_bundles: list[int] = (), gpus: bool = False) -> dict[str, str]:
    """What torchrun would set for this rank. LOCAL_RANK is 0: Ray gives each actor its own GPU
    (CUDA_VISIBLE_DEVICES), so every rank sees its device as cuda:0. Plus, where servers are placed,
    their bundles (rank 0 starts them)."""
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "MASTER_ADDR": master_addr,
           "MASTER_PORT": str(master_port), "TORCHELASTIC_RESTART_COUNT": str(attempt)}
    if server_bundles:
        env |= {SERVER_BUNDLES_ENV: ",".join(map(str, server_bundles)), SERVER_GPUS_ENV: "1" if gpus else "0"}
    return env


def check_server_nodes(bundle_nodes: dict[int, str], nproc: int, weights_dir: str | None) -> None:
    """Servers on another node than rank 0 read the weights it writes by path: not from its /dev/shm."""
    elsewhere = sorted(b for b, node in bundle_nodes.items() if b >= nproc and node != bundle_nodes[0])
    if elsewhere and weights_dir is None:
        raise ConfigError(f"Ray placed server bundle(s) {elsewhere} on another node than rank 0, which cannot read "
                          "rank 0's weights in /dev/shm: set rollout.server.weights_dir to a directory every node "
                          "sees (a shared filesystem), or give rank 0's node room for the servers")


class TrainerRank:
    """One rank: `grpo train` in this actor's process (its main thread, so its signal handlers work)."""

    def address(self) -> tuple[str, int, int]:
        """This node's address, a free port on it, and this process's pid."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        import ray

        return ray.util.get_node_ip_address(), port, os.getpid()

    def train(self, config: str | None, overrides: list[str], env: dict[str, str]) -> int:
        os.environ.update(env)
        from grpo.entry import run

        return run(config, overrides)


def _last_step(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        return 0
    from grpo.rundir.files import JsonlLog

    lines = JsonlLog(metrics, writes=False).read()[0]
    return lines[-1]["step"] if lines else 0


def launch(config: str | None, overrides: list[str], nproc: int, address: str | None, max_restarts: int,
           strategy: str = "PACK") -> int:
    ray = _import_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    cfg = load_config(config, split_overrides(overrides)[0])
    gpus = cfg.model.device.startswith("cuda") or (cfg.model.device == "auto" and _has_cuda())
    run_dir = Path(cfg.resolved_run_dir)
    servers = placed_servers(cfg)
    wanted = bundles(nproc, gpus, servers)
    server_bundles = list(range(nproc, nproc + servers))

    # A local cluster's raylet may take longer than Ray's default to register on a busy machine
    # (seen on 2 loaded cores): give it two minutes rather than fail the launch.
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    address = address or os.environ.get("RAY_ADDRESS")
    # A local cluster counts this machine's cores as its CPUs; the ranks and servers (one CPU bundle
    # each) may be more, and share the cores then, as they would without Ray.
    cpus = None if address else max(os.cpu_count() or 1, len(wanted))
    ray.init(address=address or "local", num_cpus=cpus, log_to_driver=True)
    group = placement_group(wanted, strategy=strategy)
    actor_class = ray.remote(TrainerRank)
    try:
        ray.get(group.ready())
        check_server_nodes(ray.util.placement_group_table(group)["bundles_to_node_id"], nproc,
                           cfg.rollout.server.weights_dir)
        for attempt in range(max_restarts + 1):
            if attempt and not group.wait(timeout_seconds=REPLACE_S):
                print(f"grpo: the placement group's {len(wanted)} bundles could not be placed again within "
                      f"{REPLACE_S:g} s (a node lost and too few CPUs left); the newest good checkpoint resumes the "
                      f"run once the cluster has room: {resume_command(run_dir, None)}", flush=True)
                return EXIT_GAVE_UP
            actors = [actor_class.options(
                num_cpus=1, num_gpus=1 if gpus else 0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
            ).remote() for rank in range(nproc)]
            addresses = ray.get([a.address.remote() for a in actors])
            master_addr, master_port, _ = addresses[0]
            # LAUNCHER_ENV: the run directory records this launch, so a resume command says --launcher ray.
            launched = {LAUNCHER_ENV: f"ray:{address or ''}"} | ({RAY_STRATEGY_ENV: strategy} if strategy != "PACK" else {})
            runs = [a.train.remote(config, overrides, rank_environment(rank, nproc, master_addr, master_port, attempt,
                                                                       server_bundles, gpus) | launched)
                    for rank, a in enumerate(actors)]
            outcome = _watch(ray, runs)
            if isinstance(outcome, int):
                for actor in actors:
                    ray.kill(actor)
                return outcome
            rank, cause = outcome
            for actor in actors:  # the survivors wait on a collective with the dead rank: end them
                ray.kill(actor)
            run_dir.mkdir(parents=True, exist_ok=True)
            events = EventLog(run_dir / "events.jsonl")  # opened now: no rank is writing
            step = _last_step(run_dir) + 1
            node, pid = addresses[rank][0], addresses[rank][2]
            events.record("rank_lost", step, f"rank {rank} (pid {pid} on {node}) was lost: {cause}",
                          rank=rank, node=node, pid=pid, cause=cause, attempt=attempt)
            if attempt == max_restarts:
                print(f"grpo: rank {rank} was lost ({cause}) and {max_restarts} restarts are used up; the newest "
                      f"good checkpoint in {run_dir} resumes the run: {resume_command(run_dir, None)}", flush=True)
                return EXIT_GAVE_UP
            events.record("group_restart", step, f"restarting all {nproc} ranks (restart {attempt + 1} of "
                          f"{max_restarts}); they resume from the newest good checkpoint",
                          attempt=attempt + 1, ranks=nproc)
        raise AssertionError("unreachable")
    finally:
        remove_placement_group(group)
        ray.shutdown()


def _watch(ray, runs: list) -> tuple[int, str] | int:
    """Wait for the group. -> (rank, cause) of the first rank lost, or, when every rank exited by
    itself, the run's status: rank 0's, or the first error's if rank 0 never ended."""
    pending = list(runs)
    statuses: dict[int, int] = {}
    while pending:
        failed = any(status != 0 for status in statuses.values())
        done, pending = ray.wait(pending, num_returns=1, timeout=GRACE_S if failed else None)
        if not done:
            break
        rank = runs.index(done[0])
        try:
            statuses[rank] = ray.get(done[0])
        except ray.exceptions.RayActorError as exc:
            return rank, actor_loss_cause(exc)
        except ray.exceptions.RayError as exc:
            return rank, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    if 0 in statuses:
        return statuses[0]
    return next(status for status in statuses.values() if status != 0)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()

