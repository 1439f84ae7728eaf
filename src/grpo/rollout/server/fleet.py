"""Several supervised servers serving one policy (`rollout.server.replicas=N`, or N `rollout.server.urls`):
which of them may serve now, requests spread over those, and a failed one restarted on its own while
the others keep serving.

A server serves only while it is READY with the policy's current weights verified on it (the engine
probes it). One that fails is restarted in a background thread when another can serve meanwhile; its
samples in flight fail and are retried on the servers still serving, and it rejoins once its weights
are verified again. With no other server to serve, the restart is waited for (one server: as before).

Which server serves a sample never changes the sample: its seed comes with the request
(grpo.rollout.seeds), so the same run with one server or several draws the same completions.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from grpo.rollout.server.supervisor import ServerState, Supervisor


class EitherEvent:
    """Set when either event is: a server's waits end on a stop signal, or when the engine closes
    (a background restart must not hold the close up for a whole start)."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                return False
            self.a.wait(left)
        return True


@dataclass
class Restart:
    future: Future  # Supervisor.ensure_ready in the background: True, or ServerGaveUp / StartCancelled
    revision: int | None  # the weights exported when it began: a later sync means it must reload


class Fleet:
    def __init__(self, servers: list[Supervisor]) -> None:
        self.servers = servers
        self._restarts: dict[str, Restart] = {}
        self._pool = ThreadPoolExecutor(len(servers), thread_name_prefix="server-restart")
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()  # answered requests per server, over the run

    def restarting(self, server: Supervisor) -> bool:
        return server.name in self._restarts

    def can_restart_aside(self, server: Supervisor) -> bool:
        """Another server is up to serve while this one restarts (attached ones are never restarted)."""
        return not server.attached and any(
            other is not server and other.state == ServerState.READY and not self.restarting(other)
            for other in self.servers)

    def start_together(self, servers: list[Supervisor]) -> set[str]:
        """First starts side by side (a vLLM start takes minutes): -> the names of those started. A
        start's ServerGaveUp or StartCancelled is raised once all have ended."""
        futures = [self._pool.submit(server.ensure_ready) for server in servers]
        wait(futures)
        for future in futures:
            future.result()
        return {server.name for server in servers}

    def restart_aside(self, server: Supervisor, revision: int | None) -> None:
        self._restarts[server.name] = Restart(self._pool.submit(server.ensure_ready), revision)

    def restarted(self) -> list[tuple[Supervisor, int | None]]:
        """The servers whose background restart ended, with the weights exported when it began; the
        restart's ServerGaveUp (or StartCancelled) is raised here, in the caller's thread."""
        done = []
        for server in self.servers:
            restart = self._restarts.get(server.name)
            # READY: its start is over but for recording it (a moment)
            if restart is not None and (restart.future.done() or server.state == ServerState.READY):
                del self._restarts[server.name]
                restart.future.result()
                done.append((server, restart.revision))
        return done

    def wait_for_restarts(self) -> None:
        """Until one background restart ends (none may serve meanwhile)."""
        futures = [restart.future for restart in self._restarts.values()]
        if futures:
            wait(futures, return_when=FIRST_COMPLETED)

    def serving(self, revision: int | None) -> list[Supervisor]:
        """READY, not restarting, and verified on the weights `revision`."""
        return [s for s in self.servers if s.state == ServerState.READY and not self.restarting(s)
                and s.revision == revision and not (s.process is not None and s.process.exited.is_set())]

    def answered(self, server: Supervisor) -> None:
        with self._lock:
            self._requests[server.name] += 1

    def requests(self, server: Supervisor) -> int:
        with self._lock:
            return self._requests[server.name]

    def close(self) -> None:
        """After the servers were told to stop (their cancel event set): the restarts end with them."""
        self._pool.shutdown(wait=True, cancel_futures=True)
