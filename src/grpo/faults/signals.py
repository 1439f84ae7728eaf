"""A server's processes reached from outside grpo's control, as the OOM killer, a crash or a lost node
would reach them: their exit is unexpected. The server's handle gives where they are (the reaper's pid,
a Ray actor's node and pid); the signal goes there directly, through no method of the handle."""

from __future__ import annotations

import os
import signal

from grpo.rollout.server.launcher import ServerHandle
from grpo.rollout.server.process import signal_server
from grpo.rollout.server.ray_host import CALL_TIMEOUT_S, ActorServer


def send(handle: ServerHandle, sig: int) -> None:
    """`sig` to the server's processes (not its reaper, which then cleans up and exits as the server did)."""
    if isinstance(handle, ActorServer):
        _on_node(handle, signal_server, handle.server_pid, sig)
    elif handle.pid is not None:
        signal_server(handle.pid, sig)


def kill_actor(handle: ActorServer) -> None:
    """SIGKILL the server's Ray actor, and wait until its loss is seen."""
    _on_node(handle, _kill, handle.placement["actor_pid"], signal.SIGKILL)
    handle.exited.wait(60)


def _kill(pid: int, sig: int) -> None:
    os.kill(pid, sig)


def _on_node(handle: ActorServer, function, *args) -> None:
    """`function(*args)` in a Ray task on the node of the server's actor, waited for."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(function).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(handle.placement["node_id"], soft=False))
    ray.get(task.remote(*args), timeout=CALL_TIMEOUT_S)
