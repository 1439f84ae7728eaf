"""Where a supervised server's processes run: the seam between the Supervisor, which decides when a
server starts and watches it, and what starts it.

- LocalLauncher: a session of processes under this trainer (grpo.rollout.server.process).
- RayActorLauncher (grpo.rollout.server.ray_host): a Ray actor in its own bundle of the run's
  placement group, on whichever node holds that bundle.

Either gives back a ServerHandle (what the Supervisor watches, stops and diagnoses) and the URL the
server answers at; everything else (readiness, weight syncs, restarts) is the Supervisor's alike.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from grpo.rollout.server.backend import LaunchSpec
from grpo.rollout.server.process import Activity, ServerProcess, free_port


class ServerHandle(Protocol):
    """A started server's processes, as the Supervisor sees them (ServerProcess is one)."""

    exited: threading.Event  # set the moment the server is gone, however
    expected_exit: bool  # set before grpo itself stops or kills it
    started_at: float  # time.time() of its start: OOM kills are looked for from then

    @property
    def pid(self) -> int | None: ...

    def describe_exit(self) -> str: ...

    def activity(self) -> Activity | None: ...  # None where its processes cannot be seen from here

    def kill(self) -> None: ...

    def stop(self, grace_s: float = 10.0) -> None: ...

    def output(self, limit: int = 4 * 2**20) -> list[str]: ...

    def tail(self, lines: int = 20) -> list[str]: ...


class LaunchFailed(Exception):
    """The server's processes could not be started where they were to run; the message says why."""


@dataclass
class Launch:
    """What a launcher needs to start one server."""

    spec_for: Callable[[str, int], LaunchSpec]  # (host, port) -> the command and its environment
    log_path: Path
    on_exit: Callable[[Any], None]  # called with the handle when the server ends on its own
    remove_when_orphaned: Path | None  # see ServerProcess
    cancel: Any  # an Event-like stop signal: a wait for a placement ends on it
    deadline: float  # time.monotonic() by which the server must be up (rollout.server.startup_timeout_s)


@dataclass
class Launched:
    handle: ServerHandle
    url: str
    placement: dict[str, Any] = field(default_factory=dict)  # where it runs, for the server_start event


class ServerLauncher(Protocol):
    def launch(self, launch: Launch) -> Launched:
        """Start the server; StartCancelled on a stop signal, LaunchFailed when it cannot be placed."""
        ...


class LocalLauncher:
    """The server as this trainer's child: bound to `host` on `port` (0: a free one)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def launch(self, launch: Launch) -> Launched:
        port = self.port or free_port(self.host)
        spec = launch.spec_for(self.host, port)
        process = ServerProcess(spec.argv, spec.env, launch.log_path, launch.on_exit,
                                remove_when_orphaned=launch.remove_when_orphaned)
        process.start()
        return Launched(process, f"http://{self.host}:{port}")
