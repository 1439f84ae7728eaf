"""Supervision of one inference server: start it, know when it is ready (a real one-token
generation answered), see it fail (exit seen at once by a watcher thread; a hang seen by a request
timeout and then a failed health generation), restart it with backoff within a budget, and when
the budget is spent, give up with a diagnosis: exit code or signal, OOM kills from the kernel log
where readable, and the last lines of its log.

    STOPPED --ensure_ready--> STARTING --one token--> READY --exit | hang--> FAILED
    FAILED --ensure_ready, budget left--> STARTING          FAILED --budget spent--> GAVE_UP

A server grpo did not start (attached by URL) is watched the same way but cannot be restarted: a
failed one is waited for, then given up on, and the diagnosis says so.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grpo.config import ServerConfig
from grpo.rollout.server.backend import Backend
from grpo.rollout.server.client import HttpClient, ServerError
from grpo.rollout.server.process import ServerProcess, free_port, oom_kills

Record = Callable[..., None]  # record(kind, message, **evidence) into the run's event log


class ServerState(str, enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    GAVE_UP = "gave_up"


class ServerGaveUp(Exception):
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


class Supervisor:
    def __init__(self, name: str, backend: Backend, cfg: ServerConfig, *, model_dir: Path, dtype: str, seed: int,
                 log_dir: Path, record: Record, health_ids: list[int], url: str | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.name, self.backend, self.cfg = name, backend, cfg
        self.model_dir, self.dtype, self.seed = model_dir, dtype, seed
        self.log_path = log_dir / f"{name}.log"
        self.record, self.health_ids, self.sleep = record, health_ids, sleep
        self.attached_url = url
        self.state = ServerState.STOPPED
        self.incarnation = 0  # bumped at every (re)start: samples carry it
        self.dead: set[int] = set()  # incarnations that failed: nothing they produced is used
        self.process: ServerProcess | None = None
        self.client: HttpClient | None = None
        self.url = url
        self.budget = RestartBudget(cfg.max_restarts, cfg.restart_backoff_s)
        self.failures: list[dict[str, Any]] = []
        self.revision: int | None = None  # the policy weights verified on this incarnation
        self._lock = threading.RLock()

    @property
    def attached(self) -> bool:
        return self.attached_url is not None

    # --- starting ---------------------------------------------------------------------------

    def ensure_ready(self) -> bool:
        """Block until the server is READY, (re)starting it if needed: -> True when it was (re)started
        (its weights must be verified again). Raises ServerGaveUp when that cannot be done."""
        with self._lock:
            if self.state == ServerState.READY and not (self.process and self.process.exited.is_set()):
                return False
            if self.state == ServerState.GAVE_UP:
                raise self._gave_up("it was given up on earlier")
            first = self.state == ServerState.STOPPED
            while True:
                if not first:
                    delay = self.budget.next_delay()
                    if delay is None:
                        raise self._give_up(f"{self.cfg.max_restarts} restarts used up")
                    self.record("server_restart", f"{self.name}: restarting in {delay:g}s "
                                f"(restart {self.budget.used} of {self.cfg.max_restarts})",
                                server=self.name, restart=self.budget.used, delay_s=delay)
                    self.sleep(delay)
                first = False
                if self._start_once():
                    return True

    def _start_once(self) -> bool:
        self.incarnation += 1
        self.revision = None
        self.state = ServerState.STARTING
        started = time.monotonic()
        if self.client is not None:
            self.client.close()
        if self.attached:
            url = self.attached_url
        else:
            port = self.cfg.port or free_port(self.cfg.host)
            url = f"http://{self.cfg.host}:{port}"
            spec = self.backend.launch(self.cfg, self.cfg.python or _this_python(), self.model_dir, self.cfg.host,
                                       port, self.dtype, self.seed)
            if self.cfg.command:
                spec.argv = self.cfg.command.format(python=self.cfg.python or _this_python(), model=self.model_dir,
                                                    host=self.cfg.host, port=port, dtype=self.dtype,
                                                    seed=self.seed).split()
            spec.argv += self.cfg.extra_args
            spec.env.update(dict(kv.split("=", 1) for kv in self.cfg.env))
            self.process = ServerProcess(spec.argv, spec.env, self.log_path, self._on_exit)
            self.process.start()
        self.url = url
        self.client = HttpClient(url, self.cfg.request_timeout_s, self.cfg.max_concurrent_requests)
        self.record("server_start", f"{self.name}: starting at {url}" + (" (attached)" if self.attached else ""),
                    server=self.name, url=url, incarnation=self.incarnation,
                    pid=self.process.pid if self.process else None, log=str(self.log_path))
        error = self._wait_ready(time.monotonic() + self.cfg.startup_timeout_s)
        if error is None:
            self.state = ServerState.READY
            self.record("server_ready", f"{self.name}: ready in {time.monotonic() - started:.1f}s",
                        server=self.name, incarnation=self.incarnation, seconds=round(time.monotonic() - started, 2))
            return True
        self._fail(error, kill=True)
        return False

    def _wait_ready(self, deadline: float) -> str | None:
        """Poll with a one-token generation until it answers: -> None, or why it never did."""
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.exited.is_set():
                return f"the server process {self.process.describe_exit()} while starting"
            try:
                self.backend.health_generate(self.client, self.health_ids, self.cfg.health_timeout_s)
                return None
            except ServerError as exc:
                last = str(exc)
            if self.process is not None:
                self.process.exited.wait(min(1.0, max(deadline - time.monotonic(), 0)))
            else:
                self.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
        return f"not ready after {self.cfg.startup_timeout_s:g}s (last: {last})"

    # --- failing ----------------------------------------------------------------------------

    def _on_exit(self, process: ServerProcess) -> None:
        """From the watcher thread, the moment the process ends on its own."""
        with self._lock:
            if process is self.process and self.state in (ServerState.READY, ServerState.STARTING):
                self._fail(f"the server process {process.describe_exit()}", kill=False)

    def check_health(self) -> bool:
        """After a request timed out: a server that cannot produce one token in time is hung."""
        with self._lock:
            if self.state != ServerState.READY:
                return False
            try:
                self.backend.health_generate(self.client, self.health_ids, self.cfg.health_timeout_s)
                return True
            except ServerError as exc:
                self._fail(f"hung: no one-token generation in {self.cfg.health_timeout_s:g}s ({exc})", kill=True)
                return False

    def fail(self, reason: str) -> None:
        """The engine saw the server misbehave (e.g. weights that do not verify): take it down."""
        with self._lock:
            self._fail(reason, kill=True)

    def _fail(self, reason: str, kill: bool) -> None:
        self.state = ServerState.FAILED
        self.dead.add(self.incarnation)
        if self.client is not None:
            self.client.cancel_all()  # nothing may keep waiting on a dead or hung server
        if kill and self.process is not None and not self.process.exited.is_set():
            self.process.kill()
        failure = {"server": self.name, "incarnation": self.incarnation, "reason": reason, "time": time.time()}
        if self.process is not None:
            failure.update(exit=self.process.describe_exit(), pid=self.process.pid, log_tail=self.process.tail(20),
                           oom_kills=oom_kills(self.process.pid))
        self.failures.append(failure)
        self.record("server_failed", f"{self.name}: {reason}", **failure)

    def _give_up(self, why: str) -> ServerGaveUp:
        self.state = ServerState.GAVE_UP
        error = self._gave_up(why)
        self.record("server_gave_up", str(error), **error.diagnosis)
        return error

    def _gave_up(self, why: str) -> ServerGaveUp:
        last = self.failures[-1] if self.failures else {}
        cause = likely_cause(last, self.attached)
        diagnosis = {"server": self.name, "why": why, "likely_cause": cause, "last_failure": last.get("reason"),
                     "exit": last.get("exit"), "oom_kills": last.get("oom_kills", []),
                     "log": str(self.log_path), "log_tail": last.get("log_tail", []),
                     "restarts": self.budget.used}
        return ServerGaveUp(f"inference server {self.name} gave up ({why}): {cause}", diagnosis)

    # --- stopping and status ----------------------------------------------------------------

    def stop(self) -> None:
        with self._lock:
            if self.client is not None:
                self.client.close()
            if self.process is not None:
                self.process.stop()
            if self.state != ServerState.GAVE_UP:
                self.state = ServerState.STOPPED

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name, "backend": self.backend.name, "url": self.url, "attached": self.attached,
            "state": self.state.value, "pid": self.process.pid if self.process else None,
            "incarnation": self.incarnation, "restarts": self.budget.used, "max_restarts": self.cfg.max_restarts,
            "failures": self.failures[-5:], "log": None if self.attached else str(self.log_path),
        }


def likely_cause(failure: dict[str, Any], attached: bool) -> str:
    reason, exit_ = failure.get("reason", ""), failure.get("exit") or ""
    if failure.get("oom_kills"):
        return ("the kernel killed it for lack of memory (OOM): lower rollout.server.memory_fraction, "
                "kv_cache_gib or max_concurrent_requests")
    if attached:
        return f"an attached server stopped answering ({reason}); grpo cannot restart a server it did not start"
    if "SIGKILL" in exit_:
        return "it was killed by SIGKILL (often the OOM killer; the kernel log was not readable to confirm)"
    if "killed by" in exit_:
        return f"it was {exit_}"
    if "hung" in reason:
        return f"it stopped answering: {reason}"
    if "exited with status" in exit_ or "while starting" in reason:
        return f"it {exit_ or 'exited'} while starting or serving: see the last lines of its log"
    return reason or "unknown"


def _this_python() -> str:
    import sys

    return sys.executable
