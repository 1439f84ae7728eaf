"""Supervision of one inference server: start it, know when it is ready (a real one-token
generation answered), see it fail (exit seen at once by a watcher thread; a hang seen by a request
timeout and then a failed health generation), restart it with backoff within a budget, and when
the budget is spent or a start fails the same way twice, give up with a diagnosis: exit code or
signal, OOM kills from the kernel log where readable, the server's own error line with the knob to
change, and the last lines of its log. Every wait (a start, a backoff) ends within a fraction of a
second of a stop signal (`cancel`): a SIGTERM during a 2-minute vLLM start is not left waiting.

    STOPPED --ensure_ready--> STARTING --one token--> READY --exit | hang--> FAILED
    FAILED --ensure_ready, budget left--> STARTING          FAILED --budget spent--> GAVE_UP

Where a started server's processes run is its launcher's concern (grpo.rollout.server.launcher: this
trainer's children, or a Ray actor); everything above is the same for either.

A server grpo did not start (attached by URL) is checked at once (`check_attached`: nothing listening,
or something that is not such a server, is a config error), watched the same way, and never
restarted: once failed, it is given up on, and the diagnosis says so.
"""

from __future__ import annotations

import enum
import threading
import time
from concurrent.futures import wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grpo.config import ServerConfig
from grpo.errors import ConfigError
from grpo.rollout.server.backend import Backend, LaunchSpec
from grpo.rollout.server.client import HttpClient, ServerError
from grpo.rollout.server.diagnosis import ended, likely_cause, read_log, same_failure
from grpo.rollout.server.launcher import Launch, LaunchFailed, LocalLauncher, ServerHandle, ServerLauncher
from grpo.rollout.server.process import Activity, oom_kills
from grpo.rollout.server.seed_check import SeedVerdict, check_seeds
from grpo.rollout.types import EngineGaveUp, GenerationCancelled

Record = Callable[..., None]  # record(kind, message, **evidence) into the run's event log


class ServerState(str, enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    GAVE_UP = "gave_up"


class StartCancelled(GenerationCancelled):
    """A stop signal ended a server start or a restart's wait: the caller stops, nothing failed."""


class ServerGaveUp(EngineGaveUp):
    """The server cannot be brought back; `diagnosis` says why, for STOPPED.json."""

    def __init__(self, message: str, diagnosis: dict[str, Any]) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis


@dataclass
class RestartBudget:
    """Restarts left, and the backoff before each: doubling from `backoff_s`, capped at a minute."""

    max_restarts: int
    backoff_s: float
    used: int = 0

    def next_delay(self) -> float | None:
        if self.used >= self.max_restarts:
            return None
        delay = min(self.backoff_s * 2**self.used, 60.0)
        self.used += 1
        return delay


@dataclass
class Liveness:
    """What a server owing answers has done since they were sent: when it last used CPU, since when it
    has been stopped."""

    since: float  # when the requests were sent (the engine's time.monotonic())
    cpu_mark: float  # its CPU time when it was last seen working
    working_at: float  # time.monotonic() then
    stopped_at: float | None = None

    MIN_WORK_S = 0.05  # CPU seconds that count as working (an idle HTTP loop uses a few ms)

    def hang(self, activity: Activity, now: float, stall_s: float) -> str | None:
        """-> why it is hung, or None while it may still answer."""
        if activity.stopped:
            self.stopped_at = self.stopped_at or now
            if now - self.stopped_at >= stall_s:
                return f"its processes have been stopped (SIGSTOP) for {now - self.stopped_at:.1f}s"
            return None
        self.stopped_at = None
        if activity.cpu_s - self.cpu_mark >= self.MIN_WORK_S:
            self.cpu_mark, self.working_at = activity.cpu_s, now
        elif now - self.working_at >= stall_s:
            return f"its processes used {activity.cpu_s - self.cpu_mark:.2f}s of CPU in {now - self.working_at:.1f}s"
        return None


class Supervisor:
    def __init__(self, name: str, backend: Backend, cfg: ServerConfig, *, model_dir: Path, dtype: str, seed: int,
                 log_dir: Path, record: Record, health_ids: list[int], url: str | None = None,
                 cancel: threading.Event | None = None, last_incarnation: int = 0,
                 remove_when_orphaned: Path | None = None, launcher: ServerLauncher | None = None) -> None:
        """`last_incarnation`: the highest this server had in the run before (a resume goes on from it,
        so `rollout/sources` never names two servers alike); `remove_when_orphaned`: see ServerProcess;
        `launcher`: where its processes run (default: this trainer's children, on rollout.server.host)."""
        self.name, self.backend, self.cfg = name, backend, cfg
        self.model_dir, self.dtype, self.seed = model_dir, dtype, seed
        self.log_path = log_dir / f"{name}.log"
        self.record, self.health_ids = record, health_ids
        self.cancel = cancel or threading.Event()
        self.remove_when_orphaned = remove_when_orphaned
        self.launcher = launcher or LocalLauncher(cfg.host, cfg.port)
        self.attached_url = url
        self.state = ServerState.STOPPED
        self.incarnation = last_incarnation  # bumped at every (re)start: samples carry it
        self.dead: set[int] = set()  # incarnations that failed: nothing they produced is used
        self.process: ServerHandle | None = None
        self.client: HttpClient | None = None
        self.url = url
        self.budget = RestartBudget(cfg.max_restarts, cfg.restart_backoff_s)
        self.failures: list[dict[str, Any]] = []
        self.revision: int | None = None  # the policy weights verified on this incarnation
        self.seeds: SeedVerdict | None = None  # checked once, at the first start
        self._liveness: Liveness | None = None
        self._lock = threading.RLock()

    @property
    def attached(self) -> bool:
        return self.attached_url is not None

    # --- starting ---------------------------------------------------------------------------

    def check_attached(self) -> None:
        """For a server given by URL, before any work: something answers there, and answers as this
        backend's server. -> ConfigError in one line (the CLI's exit 2) otherwise."""
        client = HttpClient(self.attached_url, min(self.cfg.health_timeout_s, 10.0), 1, retries=0)
        try:
            self.backend.identify(client)
        except ServerError as exc:
            if exc.kind == "connect":
                raise ConfigError(f"rollout.server.urls: nothing answers at {self.attached_url} ({exc}): start the "
                                  "server first, or leave rollout.server.urls empty for grpo to start one") from None
            raise ConfigError(f"rollout.server.urls: {self.attached_url} does not answer as a {self.backend.name} "
                              f"server ({exc}): check the URL and rollout.engine") from None
        finally:
            client.close()

    def ensure_ready(self) -> bool:
        """Block until the server is READY, (re)starting it if needed: -> True when it was (re)started
        (its weights must be verified again). Raises ServerGaveUp when that cannot be done, and
        StartCancelled when a stop signal came first."""
        with self._lock:
            if self.state == ServerState.READY and not (self.process and self.process.exited.is_set()):
                return False
            if self.state == ServerState.GAVE_UP:
                raise self._gave_up("it was given up on earlier")
            first = self.state == ServerState.STOPPED
            if self.attached and not first:
                raise self._give_up("an attached server failed")
            while True:
                if not first:
                    if self._failed_alike():
                        raise self._give_up("it failed the same way twice")
                    delay = self.budget.next_delay()
                    if delay is None:
                        raise self._give_up(f"{self.cfg.max_restarts} restarts used up")
                    self.record("server_restart", f"{self.name}: restarting in {delay:g}s "
                                f"(restart {self.budget.used} of {self.cfg.max_restarts})",
                                server=self.name, restart=self.budget.used, delay_s=delay)
                    if self.cancel.wait(delay):
                        raise StartCancelled(f"{self.name}: a stop signal came before its restart")
                first = False
                if self._start_once():
                    return True
                if self.attached:
                    raise self._give_up("an attached server never became ready")

    def _failed_alike(self) -> bool:
        """The last two starts failed with the same exit and the same error line: a third would too."""
        if len(self.failures) < 2:
            return False
        a, b = self.failures[-2:]
        return bool(a.get("while_starting") and b.get("while_starting") and b["incarnation"] == a["incarnation"] + 1
                    and same_failure(a, b))

    def _start_once(self) -> bool:
        self.incarnation += 1
        self.revision = None
        self.state = ServerState.STARTING
        started = time.monotonic()
        if self.client is not None:
            self.client.close()
        deadline = started + self.cfg.startup_timeout_s
        placement: dict[str, Any] = {}
        if self.attached:
            url = self.attached_url
        else:
            self.process = None  # the last incarnation's is gone; a launch that fails leaves none
            try:
                launched = self.launcher.launch(Launch(self._launch_spec, self.log_path, self._on_exit,
                                                       self.remove_when_orphaned, self.cancel, deadline))
            except StartCancelled:
                self.state = ServerState.STOPPED
                raise
            except LaunchFailed as exc:
                self._fail(str(exc), kill=False, while_starting=True)
                return False
            self.process, url, placement = launched.handle, launched.url, launched.placement
        self.url = url
        self.client = HttpClient(url, self.cfg.request_timeout_s, self.cfg.max_concurrent_requests)
        self.record("server_start", f"{self.name}: starting at {url}" + (" (attached)" if self.attached else ""),
                    server=self.name, url=url, incarnation=self.incarnation,
                    pid=self.process.pid if self.process else None, log=str(self.log_path), **placement)
        try:
            error = self._wait_ready(deadline)
            if error is None and self.seeds is None:
                error = self._check_seeds()
        except StartCancelled:
            if self.process is not None:
                self.process.kill()  # a server half started holds nothing worth a graceful stop
            self.state = ServerState.STOPPED
            raise
        if error is None:
            self.state = ServerState.READY
            self.record("server_ready", f"{self.name}: ready in {time.monotonic() - started:.1f}s",
                        server=self.name, incarnation=self.incarnation, seconds=round(time.monotonic() - started, 2))
            return True
        self._fail(error, kill=True, while_starting=True)
        return False

    def _launch_spec(self, host: str, port: int) -> LaunchSpec:
        """The server's command and environment, listening on `host`:`port`."""
        python = self.cfg.python or _this_python()
        spec = self.backend.launch(self.cfg, python, self.model_dir, host, port, self.dtype, self.seed)
        if self.cfg.command:
            spec.argv = self.cfg.command.format(python=python, model=self.model_dir, host=host, port=port,
                                                dtype=self.dtype, seed=self.seed).split()
        spec.argv += self.cfg.extra_args
        spec.env.update(dict(kv.split("=", 1) for kv in self.cfg.env))
        return spec

    def _wait_ready(self, deadline: float) -> str | None:
        """Poll with a one-token generation until it answers: -> None, or why it never did. A stop
        signal cancels the generation in flight: StartCancelled within a fraction of a second."""
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.exited.is_set():
                return f"the server process {ended(self.process.describe_exit())} while starting"
            try:
                self._interruptible(lambda: self.backend.health_generate(self.client, self.health_ids,
                                                                         self.cfg.health_timeout_s))
                return None
            except ServerError as exc:
                last = str(exc)
            self._pause(min(time.monotonic() + 1.0, deadline))
        return f"not ready after {self.cfg.startup_timeout_s:g}s (last: {last})"

    def _check_seeds(self) -> str | None:
        """Whether this server honours a request's seed (grpo.rollout.server.seed_check): -> None, or
        why the start failed (the server died during the check). A check that only ran out of time (48
        tokens on a loaded machine) says it could not tell: it never costs a healthy server a restart."""
        try:
            self.seeds = self._interruptible(lambda: check_seeds(self.backend, self.client, self.health_ids,
                                                                 self.cfg.health_timeout_s))
        except ServerError as exc:
            if self.process is not None and self.process.exited.is_set():
                return f"the seed check failed: the server process {ended(self.process.describe_exit())}"
            self.seeds = SeedVerdict(None, f"could not be checked ({exc}): whether samples are reproducible "
                                           "is unknown")
        self.record("server_seeds", f"{self.name}: {self.seeds.detail}", server=self.name,
                    incarnation=self.incarnation, reproducible=self.seeds.reproducible)
        return None

    def _interruptible(self, call: Callable[[], Any]) -> Any:
        """`call` on the client's pool, given up (and its request cancelled) on a stop signal or the
        server process's exit."""
        assert self.client is not None
        future = self.client.pool.submit(call)
        while not wait([future], timeout=0.1).done:
            if self.cancel.is_set() or (self.process is not None and self.process.exited.is_set()):
                self.client.cancel_all()
                self._check_cancel()
                if not wait([future], timeout=5).done:
                    raise ServerError("cancelled", "the server process exited")
        return future.result()

    def _pause(self, until: float) -> None:
        """Until `until`, or the server process's exit; StartCancelled on a stop signal."""
        while time.monotonic() < until and not (self.process is not None and self.process.exited.is_set()):
            self._check_cancel()
            self.cancel.wait(min(0.1, max(until - time.monotonic(), 0)))
        self._check_cancel()

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise StartCancelled(f"{self.name}: a stop signal came while it was starting")

    # --- failing ----------------------------------------------------------------------------

    def _on_exit(self, process: ServerHandle) -> None:
        """From the watcher thread, the moment the process ends on its own."""
        with self._lock:
            if process is self.process and self.state in (ServerState.READY, ServerState.STARTING):
                self._fail(f"the server process {ended(process.describe_exit())}", kill=False,
                           while_starting=self.state == ServerState.STARTING)

    def check_health(self) -> bool:
        """After a request timed out or a connection failed: a server that cannot produce one token in
        time is hung; one whose process is exiting is recorded by its exit, not as hung."""
        with self._lock:
            if self.state != ServerState.READY:
                return False
            try:
                self.backend.health_generate(self.client, self.health_ids, self.cfg.health_timeout_s)
                return True
            except ServerError as exc:
                # A refused or reset connection is how a dying process looks for a moment before its
                # watcher sees the exit (0.1 s after a SIGKILL): wait for that, and name the exit.
                if self.process is not None and self.process.exited.wait(2.0 if exc.kind != "timeout" else 0):
                    self._fail(f"the server process {ended(self.process.describe_exit())}", kill=False)
                elif exc.kind == "timeout":
                    self._fail(f"hung: no one-token generation in {self.cfg.health_timeout_s:g}s ({exc})", kill=True)
                else:
                    self._fail(f"its one-token generation failed ({exc})", kill=True)
                return False

    def check_liveness(self, waiting_since: float, waiting: int) -> None:
        """While `waiting` requests sent at `waiting_since` (time.monotonic()) are unanswered: a server of
        this machine whose processes were stopped, or used no CPU, for rollout.server.stall_s is hung,
        and is taken down now rather than at the request timeout (minutes). A server working on them
        uses a core; one sleeping on nothing is what a hang looks like from outside."""
        with self._lock:
            if not self.cfg.stall_s or self.state != ServerState.READY or self.process is None:
                return
            activity = self.process.activity()
            if activity is None:
                return
            now = time.monotonic()
            if self._liveness is None or self._liveness.since != waiting_since:
                self._liveness = Liveness(waiting_since, activity.cpu_s, now)
            reason = self._liveness.hang(activity, now, self.cfg.stall_s)
            if reason is not None:
                self._fail(f"hung: {reason}, with {waiting} request(s) waiting", kill=True)

    def fail(self, reason: str) -> None:
        """The engine saw the server misbehave (e.g. weights that do not verify): take it down."""
        with self._lock:
            self._fail(reason, kill=True)

    def _fail(self, reason: str, kill: bool, while_starting: bool = False) -> None:
        self.state = ServerState.FAILED
        self.dead.add(self.incarnation)
        if self.client is not None:
            self.client.cancel_all()  # nothing may keep waiting on a dead or hung server
        if kill and self.process is not None and not self.process.exited.is_set():
            self.process.kill()
        failure: dict[str, Any] = {"server": self.name, "incarnation": self.incarnation, "reason": reason,
                                   "time": time.time(), "while_starting": while_starting}
        if self.process is not None:
            reading = read_log(self.process.output())
            failure.update(exit=self.process.describe_exit(), stopped_by_grpo=self.process.expected_exit,
                           pid=self.process.pid, server_error=reading.line, server_cause=reading.cause,
                           knob=reading.knob,
                           log_tail=self.process.tail(20), oom_kills=oom_kills(self.process.started_at))
        self.failures.append(failure)
        said = failure.get("server_error")
        self.record("server_failed", f"{self.name}: {reason}" + (f" (the server said: {said})" if said else ""),
                    **failure)

    def _give_up(self, why: str) -> ServerGaveUp:
        self.state = ServerState.GAVE_UP
        error = self._gave_up(why)
        self.record("server_gave_up", str(error), **error.diagnosis)
        return error

    def _gave_up(self, why: str) -> ServerGaveUp:
        last = self.failures[-1] if self.failures else {}
        cause = likely_cause(last, self.attached)
        diagnosis = {"server": self.name, "why": why, "likely_cause": cause, "last_failure": last.get("reason"),
                     "exit": last.get("exit"), "server_error": last.get("server_error"), "knob": last.get("knob"),
                     "oom_kills": last.get("oom_kills"), "log": None if self.attached else str(self.log_path),
                     "log_tail": last.get("log_tail", []), "restarts": self.budget.used}
        return ServerGaveUp(f"inference server {self.name} gave up ({why}): {cause}", diagnosis)

    # --- stopping and status ----------------------------------------------------------------

    def stop(self) -> None:
        """A ready server is asked to shut down (SIGTERM, then SIGKILL); any other is killed at once."""
        with self._lock:
            if self.client is not None:
                self.client.close()
            if self.process is not None:
                if self.state == ServerState.READY:
                    self.process.stop()
                else:
                    self.process.kill()
            if self.state != ServerState.GAVE_UP:
                self.state = ServerState.STOPPED

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name, "backend": self.backend.name, "url": self.url, "attached": self.attached,
            "state": self.state.value, "pid": self.process.pid if self.process else None,
            "incarnation": self.incarnation, "restarts": self.budget.used, "max_restarts": self.cfg.max_restarts,
            "failures": self.failures[-5:], "log": None if self.attached else str(self.log_path),
            "seeds": self.seeds.as_dict() if self.seeds else None,
        }


def _this_python() -> str:
    import sys

    return sys.executable
