"""Servers placed by Ray (`grpo train --launcher ray`): each server runs in a Ray actor that holds its
own bundle of the run's placement group (a GPU when the run is on CUDA, a CPU otherwise), on
whichever node holds that bundle.

The actor (ServerHost) starts the command a local launch would (reaper and all, grpo.rollout.server.
process) on its node, on a free port there, listening on the node's address, and reports it. Rank 0's
supervisor treats it as a server it started: ready checks, probe-verified weight syncs, restarts; only
starting and stopping go through the actor. A thread on rank 0 waits on the actor for the server's
exit. When the actor itself is lost (killed, out of memory, its node gone), Ray fails that wait:
`server_actor_lost` is recorded (server, node, the actor's pid, the cause, as the launcher records a
lost rank), the server counts as exited, and the supervisor fails it and restarts it like any other:
in a new actor in the same bundle. The server's processes go with their actor: their reaper watches
the actor's process as its trainer.

The server reloads its weights from the directory rank 0 writes and writes its log into the run
directory, both by path: on one node both are local; servers on other nodes need both on a
filesystem every node sees (the launcher refuses servers on another node with the weights in
/dev/shm, grpo.launch.ray).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from grpo.errors import ConfigError
from grpo.rollout.server.launcher import Launch, Launched, LaunchFailed
from grpo.rollout.server.process import ServerProcess, describe_exit, log_since, log_tail
from grpo.rollout.server.supervisor import Record, StartCancelled

# Set by the Ray launcher for rank 0: the bundles of its placement group that hold the servers
# ("2,3"), and whether each server actor takes its bundle's GPU ("1") or a CPU ("0").
SERVER_BUNDLES_ENV = "GRPO_RAY_SERVER_BUNDLES"
SERVER_GPUS_ENV = "GRPO_RAY_SERVER_GPUS"
# Ray SIGKILLs a worker's direct children when it ends the worker (its owner, rank 0, died): that
# would kill the server's reaper and leave the server, in its own session, running for good (seen:
# two stand-ins re-parented to pid 1 after a group restart). Left alone, the reaper sees its actor
# gone and ends the server's whole session itself.
KEEP_CHILDREN_ENV = "RAY_kill_child_processes_on_worker_exit"
CALL_TIMEOUT_S = 60.0  # a stop or kill through a live actor answers in seconds; a lost one is seen by the watch


class ServerHost:
    """The actor: one server's processes on this node (a threaded actor: `wait_exit` blocks while
    the other calls run)."""

    def __init__(self) -> None:
        self.process: ServerProcess | None = None

    def place(self) -> dict[str, Any]:
        """Where this actor runs, and a free port on its node's address for the server."""
        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((ip, 0))
            port = s.getsockname()[1]
        return {"node": ip, "node_id": ray.get_runtime_context().get_node_id(), "actor_pid": os.getpid(),
                "port": port}

    def start(self, argv: list[str], env: dict[str, str], log_path: str) -> tuple[int, int, float]:
        """-> the server's pid (its reaper's), where its log begins, and when it started."""
        # No weight copy to remove when orphaned: the copy is rank 0's, which outlives this actor.
        self.process = ServerProcess(argv, env, Path(log_path), on_exit=lambda _: None)
        self.process.start()
        assert self.process.pid is not None
        return self.process.pid, self.process.log_offset, self.process.started_at

    def wait_exit(self) -> int | None:
        assert self.process is not None
        self.process.exited.wait()
        return self.process.returncode

    def stop(self, grace_s: float) -> None:
        assert self.process is not None
        self.process.stop(grace_s)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()


def actor_loss_cause(exc: Exception) -> str:
    """The line of a Ray error that says how an actor died."""
    text = str(exc)
    for line in text.splitlines():
        if "SIGKILL" in line or "killed" in line.lower() or "node" in line.lower() or "memory" in line.lower():
            return line.strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ActorServer:
    """Rank 0's handle on a server in a ServerHost actor: a ServerHandle (grpo.rollout.server.launcher)."""

    def __init__(self, name: str, actor, placement: dict[str, Any], pid: int, log_path: Path, log_offset: int,
                 started_at: float, on_exit: Callable[[Any], None], record: Record, local: bool) -> None:
        self.name, self.actor, self.placement = name, actor, placement
        self.server_pid, self.log_path, self.log_offset, self.started_at = pid, log_path, log_offset, started_at
        self.on_exit, self.record, self.local = on_exit, record, local
        self.exited = threading.Event()
        self.expected_exit = False
        self.returncode: int | None = None
        self.lost: str | None = None  # why the actor died, when it did
        threading.Thread(target=self._watch, name=f"watch-{name}-actor", daemon=True).start()

    @property
    def pid(self) -> int | None:
        """The server's pid where it means something here: on rank 0's node (`grpo health` checks it)."""
        return self.server_pid if self.local else None

    def _watch(self) -> None:
        import ray

        try:
            self.returncode = ray.get(self.actor.wait_exit.remote())
        except ray.exceptions.RayError as exc:  # the actor is gone, and the server's processes with it
            self.lost = actor_loss_cause(exc)
            if not self.expected_exit:
                self.record("server_actor_lost", f"{self.name}: its Ray actor (pid {self.placement['actor_pid']} on "
                            f"{self.placement['node']}) was lost: {self.lost}", server=self.name,
                            node=self.placement["node"], actor_pid=self.placement["actor_pid"],
                            bundle=self.placement["bundle"], cause=self.lost)
        ray.kill(self.actor)  # its bundle is free for the server's next actor
        self.exited.set()
        if not self.expected_exit:
            self.on_exit(self)

    def activity(self) -> None:
        """Its processes are on the actor's node, out of this trainer's sight: only timeouts find a hang."""
        return None

    def describe_exit(self) -> str:
        if self.lost is not None:
            return f"was lost with its Ray actor ({self.lost})"
        return describe_exit(self.returncode)

    def _call(self, method, *args: Any) -> None:
        """`method` on the actor, waited for; an actor lost meanwhile took the server with it (the
        watch records that), so its error is not this call's."""
        import ray

        ready, _ = ray.wait([method.remote(*args)], timeout=CALL_TIMEOUT_S)
        if ready:
            try:
                ray.get(ready[0])
            except ray.exceptions.RayActorError:
                pass  # lost: see the docstring

    def kill(self) -> None:
        self.expected_exit = True
        if not self.exited.is_set():
            self._call(self.actor.kill)
        self.exited.wait(30)

    def stop(self, grace_s: float = 10.0) -> None:
        self.expected_exit = True
        if not self.exited.is_set():
            self._call(self.actor.stop, grace_s)
        self.exited.wait(30)

    def output(self, limit: int = 4 * 2**20) -> list[str]:
        return log_since(self.log_path, self.log_offset, limit)

    def tail(self, lines: int = 20) -> list[str]:
        return log_tail(self.log_path, lines)


class RayActorLauncher:
    """Starts one server in a new ServerHost actor in bundle `bundle` of `group` (a ServerLauncher)."""

    def __init__(self, name: str, group, bundle: int, gpus: bool, record: Record) -> None:
        self.name, self.group, self.bundle, self.gpus, self.record = name, group, bundle, gpus, record

    def launch(self, launch: Launch) -> Launched:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor = ray.remote(ServerHost).options(
            num_cpus=1, num_gpus=1 if self.gpus else 0, max_concurrency=8,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=self.bundle),
            runtime_env={"env_vars": {KEEP_CHILDREN_ENV: "0"}},
        ).remote()
        try:
            placement = {**self._wait(ray, actor, actor.place.remote(), launch, "placed"), "bundle": self.bundle}
            spec = launch.spec_for(placement["node"], placement["port"])
            pid, log_offset, started_at = self._wait(ray, actor, actor.start.remote(spec.argv, spec.env,
                                                                                    str(launch.log_path)),
                                                     launch, "started")
        except BaseException:
            ray.kill(actor)
            raise
        local = placement["node_id"] == ray.get_runtime_context().get_node_id()
        handle = ActorServer(self.name, actor, placement, pid, launch.log_path, log_offset, started_at,
                             launch.on_exit, self.record, local)
        return Launched(handle, f"http://{placement['node']}:{placement.pop('port')}", placement)

    def _wait(self, ray, actor, ref, launch: Launch, what: str) -> Any:
        """The call's result, waited for within the start's deadline and ended by a stop signal."""
        while not ray.wait([ref], timeout=0.1)[0]:
            if launch.cancel.is_set():
                raise StartCancelled(f"{self.name}: a stop signal came while its Ray actor was being {what}")
            if time.monotonic() > launch.deadline:
                raise LaunchFailed(f"its Ray actor was not {what} in bundle {self.bundle} within the start's "
                                   "time (rollout.server.startup_timeout_s): is the placement group's node up?")
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise LaunchFailed(f"its Ray actor in bundle {self.bundle} died before the server was "
                               f"{what}: {actor_loss_cause(exc)}") from None


def ray_launchers(names: list[str], record: Record) -> list[RayActorLauncher] | None:
    """The servers' launchers when the Ray launcher placed them (rank 0 under `--launcher ray`), else None."""
    bundles = os.environ.get(SERVER_BUNDLES_ENV)
    if not bundles:
        return None
    indices = [int(b) for b in bundles.split(",")]
    if len(indices) != len(names):
        raise ConfigError(f"the Ray launcher reserved {len(indices)} server bundle(s) for {len(names)} server(s): "
                          "launch with the same rollout.server settings the ranks run with")
    import ray

    group = ray.util.get_current_placement_group()
    gpus = os.environ.get(SERVER_GPUS_ENV) == "1"
    return [RayActorLauncher(name, group, index, gpus, record) for name, index in zip(names, indices)]
