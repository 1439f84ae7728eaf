"""Server faults, through a backend wrapped around the server engine's own: the engine generates,
syncs and verifies as always, and meets the failure where a real one would reach it.

A step's failures are armed as its collection begins. Those of the rollout (`SERVER_ROLLOUT`) fire in
the window of the step's first generation: kill (SIGKILL) or hang (SIGSTOP) the first server's process,
or kill its Ray actor, as the first request to it goes out; or answer every request with garbage.
Whatever did not fire in that window is disarmed with it. Those of the sync (`SERVER_SYNC`) fire at
the next reload: the first server killed as its reload goes out, the reload skipped, done by the
server's stock reload (a stale tied head), or not followed by a cache reset. Each fault is recorded as a `fault_injected` event.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from grpo.config import ServerConfig
from grpo.faults import signals
from grpo.faults.names import SERVER, SERVER_ROLLOUT, key
from grpo.faults.schedule import Schedule
from grpo.rollout.engines import SamplingParams
from grpo.rollout.server.backend import Backend, Generation, LaunchSpec, ReloadMode
from grpo.rollout.server.client import HttpClient, ServerError
from grpo.rollout.server.ray_host import ActorServer


class ServerFaults(Backend):
    """The backend the server engine is given: its own, with the armed failures."""

    def __init__(self, inner: Backend, schedule: Schedule | None = None) -> None:
        self.inner, self.schedule, self.name = inner, schedule, inner.name
        self.engine = None  # the server engine, once built: its servers and its event record
        self.armed: set[str] = set()
        self.open = False
        self.lock = threading.Lock()  # requests go out from the engine's pool of threads

    # --- arming ------------------------------------------------------------------------------

    def arm(self, step: int) -> None:
        """The failures `testing.faults` lists at `step`."""
        if self.schedule is not None:
            self.arm_now(name for name in SERVER if self.schedule.fires(name, step))

    def arm_now(self, names: Iterable[str]) -> None:
        names = set(names)
        unknown = names - set(SERVER)
        if unknown:
            raise ValueError(f"unknown server faults {sorted(unknown)}; valid: {', '.join(SERVER)}")
        with self.lock:
            self.armed |= names

    @contextmanager
    def window(self) -> Iterator[None]:
        """A generation in which the armed rollout failures fire; after it they are disarmed."""
        with self.lock:
            self.open = True
        try:
            yield
        finally:
            with self.lock:
                self.open = False
                self.armed -= set(SERVER_ROLLOUT)

    @contextmanager
    def during(self, names: Iterable[str]) -> Iterator[None]:
        """`names` armed, then fired within this block's generations (a test's own disturbance)."""
        self.arm_now(names)
        with self.window():
            yield

    def _take(self, name: str) -> bool:
        with self.lock:
            if name in self.armed:
                self.armed.discard(name)
                return True
            return False

    def _record(self, name: str, message: str, **evidence) -> None:
        if self.engine is not None:
            self.engine.record("fault_injected", f"{name}: {message}", fault=key(name), **evidence)

    # --- the backend -------------------------------------------------------------------------

    def generate(self, client: HttpClient, prompt_ids: list[int], params: SamplingParams, seed: int,
                 timeout_s: float | None = None) -> Generation:
        if self.open:
            self._fire_at(client)
            if "garbage_server" in self.armed:
                raise ServerError("garbage", f"unexpected answer: injected garbage ({key('garbage_server')})")
        return self.inner.generate(client, prompt_ids, params, seed, timeout_s)

    def _fire_at(self, client: HttpClient) -> None:
        """As the first request to the first server goes out: its process killed or stopped, or its actor killed."""
        first = self.engine.servers[0] if self.engine is not None else None
        if first is None or first.process is None or client is not first.client:
            return
        where = dict(server=first.name, incarnation=first.incarnation)
        if isinstance(first.process, ActorServer) and self._take("kill_server_actor"):
            self._record("kill_server_actor", f"SIGKILL to {first.name}'s Ray actor mid-rollout", **where)
            signals.kill_actor(first.process)
        for name, sig in (("kill_server", signal.SIGKILL), ("hang_server", signal.SIGSTOP)):
            if self._take(name):
                signals.send(first.process, sig)
                self._record(name, f"sent {signal.Signals(sig).name} to {first.name} mid-rollout", **where)

    def reload_weights(self, client: HttpClient, model_dir: Path, mode: str) -> None:
        first = self.engine.servers[0] if self.engine is not None else None
        if first is not None and first.process is not None and client is first.client and \
                self._take("kill_server_in_sync"):
            signals.send(first.process, signal.SIGKILL)
            self._record("kill_server_in_sync", f"sent SIGKILL to {first.name} as its weight reload went out",
                         server=first.name, incarnation=first.incarnation)
        if mode == ReloadMode.FULL:
            for name, instead in (("skip_weight_sync", ReloadMode.SKIP), ("stale_head_sync", ReloadMode.STOCK)):
                if self._take(name):
                    self._record(name, f"a {instead} reload instead of a full one", mode=instead)
                    mode = instead
                    break
        self.inner.reload_weights(client, model_dir, mode)

    def reset_cache(self, client: HttpClient) -> None:
        if self._take("no_cache_reset"):
            self._record("no_cache_reset", "the prefix cache was not reset after the reload")
            return
        self.inner.reset_cache(client)

    def launch(self, cfg: ServerConfig, python: str, model_dir: Path, host: str, port: int, dtype: str,
               seed: int) -> LaunchSpec:
        return self.inner.launch(cfg, python, model_dir, host, port, dtype, seed)

    def prompt_logprobs(self, client: HttpClient, token_ids: list[int]) -> list[float]:
        return self.inner.prompt_logprobs(client, token_ids)

    def fingerprint(self, client: HttpClient) -> dict | None:
        return self.inner.fingerprint(client)

    def identify(self, client: HttpClient) -> None:
        self.inner.identify(client)

    def health_generate(self, client: HttpClient, token_ids: list[int], timeout_s: float) -> None:
        self.inner.health_generate(client, token_ids, timeout_s)

