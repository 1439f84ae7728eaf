"""The GRPO training loop. It drives the roles (policy, rollout, guard, run directory) and each step
reads top to bottom in named phases:

    rollout -> check rollouts -> advantages -> update -> check update -> sync -> evaluate -> record
    -> checkpoint -> act on the guard's verdict

Rollout breakers run before the update, so a bad batch is never trained on. The guard only decides;
restoring, pausing and stopping are done here, through the policy and checkpoint APIs. A stop signal
abandons a step before its update is applied (or lets an applied one finish), saves, and exits.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
import yaml

from grpo.algo.advantages import group_advantages
from grpo.config import ConfigError, RunConfig, config_yaml, to_dict
from grpo.dist import SINGLE, Ranks
from grpo import progress
from grpo.console import alert, say
from grpo.evaluate import EvaluationFailed, evaluate, format_table, merge_evaluations
from grpo.guard.breakers import Guard, Trip, Verdict
from grpo.guard.faults import FaultInjector
from grpo.guard.recovery import RunStopped, notify, resume_command, wait_while_paused, write_stop_report
from grpo.guard.signals import SignalWatch, StopRequested
from grpo.metrics import MetricsLogger
from grpo.phases import PhaseTimer
from grpo.progress import Progress
from grpo.policy.models import resolve_device
from grpo.policy.optim import lr_at
from grpo.policy.policy import Policy
from grpo.policy.update import TrainBatch, UpdateResult
from grpo.rewards import get_reward
from grpo.rollout.collector import RolloutBatch, RolloutCollector, rollout_metrics, sample_records
from grpo.rollout.engines import GenerationCancelled, RolloutEngine
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rollout.engines.select import resolve_engine
from grpo.rollout.server.supervisor import ServerGaveUp
from grpo.rollout.server.weights import WeightSyncFailed
from grpo.rundir.checkpoints import CheckpointInfo, CheckpointInvalid, capture_rng, restore_rng
from grpo.rundir.files import DiskError, is_disk_error, read_json
from grpo.rundir.run import RunDir
from grpo.tasks import build_task

log = logging.getLogger(__name__)


class RunInterrupted(Exception):
    """A signal stopped the run after its state was saved; the message says how to resume."""


class TrainingLoop:
    def __init__(self, cfg: RunConfig, resume_from: str | None = None, run: RunDir | None = None,
                 ranks: Ranks = SINGLE) -> None:
        """With `ranks` of a group (torchrun), every rank runs this loop on its share of each step;
        rank 0 alone writes the run directory."""
        self.cfg, self.ranks = cfg, ranks
        self.run = run or RunDir(cfg.resolved_run_dir, cfg.checkpoint, writes=ranks.main).acquire()
        self.metrics: MetricsLogger | None = None
        self.signals = SignalWatch()
        try:
            self._build()
            self._start(resume_from)
        except BaseException:
            self.close()
            raise

    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def checkpoints(self):
        return self.run.checkpoints

    @property
    def events(self):
        return self.run.events

    def _build(self) -> None:
        cfg, seed = self.cfg, self.cfg.train.seed
        random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
        self.task = build_task(cfg.task)  # data errors surface here, before the model is loaded
        self.total_steps = self._total_steps()
        try:
            self.reward_fn = get_reward(cfg.task.reward)
        except (KeyError, AttributeError, TypeError, ImportError) as exc:
            raise ConfigError(f"task.reward={cfg.task.reward!r}: {exc}") from exc
        try:
            self.eval_reward_fn = get_reward(cfg.eval.reward) if cfg.eval.reward else self.reward_fn
        except (KeyError, AttributeError, TypeError, ImportError) as exc:
            raise ConfigError(f"eval.reward={cfg.eval.reward!r}: {exc}") from exc
        self.device = resolve_device(cfg.model.device, self.ranks.local_rank)
        self.engine_name = resolve_engine(cfg.rollout.engine)
        if self.ranks.distributed and self.engine_name != "embedded":
            raise ConfigError(f"rollout.engine={self.engine_name} does not run under torchrun yet: use "
                              "rollout.engine=embedded (each rank generates its share)")
        self.policy = Policy(cfg, self.device, self.ranks)
        self.faults = FaultInjector(cfg.faults, seed, self.ranks.rank)
        self.engine = self._build_engine()
        # A server's kernels differ from the trainer's, and LoRA merged into half-precision weights for
        # generation is rounded: then the sampler's log-probs are not the trainer's old log-probs.
        self.recompute_old = (cfg.algo.recompute_old_logprobs if cfg.algo.recompute_old_logprobs is not None
                              else self.engine_name != "embedded" or not self.policy.inference_is_exact)
        self.collector = RolloutCollector(
            self.engine, self.policy.tokenizer, self.task, cfg.task, cfg.rollout, self.reward_fn, self.faults, seed,
            ranks=self.ranks,
        )
        self.guard = Guard(cfg.guard)
        self.step, self.data_index, self.lr_scale, self.score = 0, 0, 1.0, None
        self.last_save = time.monotonic()
        self.explained: set[str] = set()  # skip reasons already explained to the user

    def _build_engine(self) -> RolloutEngine:
        cfg = self.cfg
        if self.engine_name == "embedded":
            # Ranks must stop together, at a step's end: a signal may not cut one rank's generation short.
            cancel = None if self.ranks.distributed else self.signals.event
            return EmbeddedEngine(self.policy.model, self.policy.tokenizer, cfg.rollout.generation_batch_size,
                                  cancel=cancel, inference=self.policy.inference_weights)
        from grpo.rollout.engines.server import ServerEngine, make_backend

        return ServerEngine(make_backend(self.engine_name), cfg.rollout.server, self.policy.tokenizer,
                            run_dir=self.run.path, dtype=cfg.model.dtype, seed=cfg.train.seed,
                            record=self._record_server_event, cancel=self.signals.event)

    def _record_server_event(self, kind: str, message: str, **evidence: Any) -> None:
        """Server events arrive from watcher threads too; each is one appended line."""
        self.events.record(kind, self.step, message, **evidence)
        log.warning("%s", message) if kind in ("server_failed", "server_gave_up", "weight_sync_mismatch") else (
            log.info("%s", message))

    def _total_steps(self) -> int:
        if self.cfg.train.steps is not None:
            return self.cfg.train.steps
        if self.task.num_train is None:
            raise ConfigError(f"task {self.task.name} is unlimited: set train.steps")
        return math.ceil(self.task.num_train * self.cfg.train.epochs / self.cfg.rollout.problems_per_step)

    def _start(self, resume_from: str | None) -> None:
        if resume_from:  # checked before anything in the directory is touched
            try:
                info = self.checkpoints.open(Path(resume_from))
            except CheckpointInvalid as exc:
                valid = ", ".join(str(i.path) for i in self.checkpoints.list()) or "none"
                raise ConfigError(f"resume_from={resume_from} is not a usable checkpoint: {exc.reason}; "
                                  f"valid checkpoints here: {valid}") from None
        for note in self.run.open():
            self.events.record("repaired", 0, note)
            log.warning("run directory repaired: %s", note)
        self.ranks.barrier()  # rank 0's repairs are done before any rank reads a checkpoint
        if resume_from:
            self._restore(info)
        elif self.cfg.recover == "auto" and (candidates := self.checkpoints.list()):
            info = self._restore_newest(candidates)
            if info is None:
                raise ConfigError(f"no checkpoint in {self.checkpoints.root} loads: all {len(candidates)} were "
                                  f"invalid and are now in {self.checkpoints.root / 'invalid'} (see events.jsonl); "
                                  "start over with a new run_dir")
        elif self.checkpoints.list():
            raise ConfigError(f"{self.run_dir} already has checkpoints and recover=off: pick a new run_dir")
        else:
            info = None
        previous_stop, _ = read_json(self.run.stopped_path)
        if info is not None:
            set_aside = self.checkpoints.set_aside_after(self.step) if resume_from else []
            cut = self.run.rewind_logs(info.log_offsets)
            if self.ranks.main:
                self.run.stopped_path.unlink(missing_ok=True)
            self.events.record("restart", self.step, f"resumed from {info.path}", previous_stop=previous_stop,
                               set_aside=[str(p) for p in set_aside], log_lines_replayed=cut)
            log.info("resumed from %s at step %d", info.path, self.step)
        else:
            self.run.rewind_logs({})  # lines from a start that never saved a checkpoint
            # A step-0 checkpoint gives a rollback target before the first periodic save.
            self._save(healthy=True)
        # Only now, with the start done, does the config on disk change: a failed resume leaves the
        # run's config (and the resume command that names it) as it was.
        self._write_config()
        self.metrics = MetricsLogger(self.run_dir, self.cfg.logging, self.total_steps, self.cfg.name,
                                     to_dict(self.cfg), start_step=self.step, enabled=self.ranks.main)

    def _write_config(self) -> None:
        text = config_yaml(self.cfg)
        if self.run.config_path.is_file():
            try:
                before = _flatten(yaml.safe_load(self.run.config_path.read_text()) or {})
            except (yaml.YAMLError, OSError, UnicodeDecodeError):
                before = {}
            after = _flatten(to_dict(self.cfg))
            changed = {k: [before.get(k), after.get(k)] for k in before.keys() | after.keys()
                       if before.get(k) != after.get(k)}
            if changed:
                self.events.record("config_changed", self.step,
                                   f"{len(changed)} config keys differ from the saved run", changed=changed)
        self.run.write(self.run.config_path, text)

    def close(self) -> None:
        progress.activate(None)
        if getattr(self, "engine", None) is not None:
            self.engine.close()
        if self.metrics is not None:
            self.metrics.close()
        self.signals.uninstall()
        self.run.close()

    # ---------------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        self.signals.install()
        self.progress = (Progress(self.total_steps, self.cfg.logging.progress_interval_s)
                         if self.cfg.logging.progress and self.ranks.main else None)
        progress.activate(self.progress)
        try:
            return self._train()
        except RunStopped:
            raise
        except StopRequested as stop:
            raise self._interrupted(stop) from None
        except BaseException as exc:  # recorded, then re-raised: a crash is never silent
            raise self._crashed(exc) from exc
        finally:
            self.close()

    def _train(self) -> dict[str, Any]:
        started = time.time()
        summary: dict[str, Any] = {}
        try:
            self.engine.start(self.policy)
        except (ServerGaveUp, WeightSyncFailed) as exc:
            self._server_stop(exc, self.step)
        if self.cfg.eval.before_training and self.step == 0:
            summary["before"] = self._evaluate("before")
        while self.step < self.total_steps:
            self._check_signals()
            if self.progress is not None:
                self.progress.start_step(self.step + 1)
            self._train_step(self.step + 1)
            if self.progress is not None:
                self.progress.end_step()
            self._check_signals()
        latest = self.checkpoints.latest()
        if self.cfg.checkpoint.save_final and (latest is None or latest.step != self.step):
            self._save(healthy=self.guard.healthy and self.policy.params_finite())
        if self.cfg.eval.after_training:
            summary["after"] = self._evaluate("after")
        final = self.checkpoints.latest()
        self.run.write(self.run.summary_path, json.dumps({
            "status": "finished", "steps": self.step, "wall_s": time.time() - started, "ranks": self.ranks.world,
            "final_checkpoint": str(final.path) if final else None,
            "final_model": str(final.model_dir) if final else None, **summary,
        }, indent=2, default=str))
        return summary

    def _check_signals(self) -> None:
        """A stop signal ends the run at a step's boundary; under torchrun every rank must agree, so
        the ranks decide together (a signal that reached one rank stops them all)."""
        if self.ranks.distributed:
            if self.ranks.any(self.signals.requested):
                raise StopRequested(self.signals.signum or signal.SIGTERM)
            return
        self.signals.check()

    def _train_step(self, step: int) -> None:
        timer = PhaseTimer(self.device)
        started = time.perf_counter()
        self.policy.set_lr(lr_at(step - 1, self.total_steps, self.cfg.actor) * self.lr_scale)
        checkpoint_due = self.ranks.broadcast(self._checkpoint_due(step))  # rank 0's clock decides
        self.engine.arm_faults(self.faults.server_faults(step))
        at_start = self._loop_state()
        try:
            batch, m, trips, result = self._rollout_and_update(step, timer, checkpoint_due)
        except (StopRequested, GenerationCancelled):
            # Nothing of this step reached the weights: put back what it consumed (RNG, streaks) so
            # the saved state resumes exactly as if the step had never begun.
            self._load_loop_state(at_start)
            raise StopRequested(self.signals.signum or signal.SIGTERM) from None
        except (ServerGaveUp, WeightSyncFailed) as exc:
            self._load_loop_state(at_start)
            self._server_stop(exc, step)

        with timer.phase("sync"):
            try:
                m.update(self.engine.sync_weights(self.policy))
            except (ServerGaveUp, WeightSyncFailed) as exc:
                self._server_stop(exc, step)
        self.step, self.data_index = step, batch.next_data_index
        self.faults.step_done(step)
        blocked = _blocking_reason(trips) is not None
        if not trips:
            self.guard.observe({**m, "update/applied": int(result.applied)})
        if not blocked and self.cfg.eval.every_steps and step % self.cfg.eval.every_steps == 0:
            if (evaluation := self._evaluate(f"step {step}")) is not None:
                m.update({f"eval/{k}": v for k, v in evaluation.items()})

        m.update(timer.pop())
        m.setdefault("update/no_signal", 0)
        m.update({
            "update/applied": int(result.applied), "update/skip_reason": result.skip_reason,
            "actor/lr": self.policy.lr, "data/index": self.data_index, "policy/version": self.policy.version,
            "guard/trips": [t.breaker for t in trips], "guard/rollbacks": self.guard.rollbacks,
            "time/step_s": time.perf_counter() - started,
        })
        m["perf/tokens_per_s"] = m["perf/generated_tokens"] / m["time/step_s"]
        if self.ranks.main:
            self._explain_skip(step, result, m)
        if self.cfg.faults.stop_before_record_at_step == step:
            os.kill(os.getpid(), signal.SIGSTOP)
        # The line is written before the checkpoint, whose manifest records the log's size: a resume
        # from it keeps this line, and a resume from an older one moves it aside, never duplicates it.
        self.metrics.log(step, m)
        if self.cfg.logging.samples_per_step:
            samples = [{"step": step, **r} for r in sample_records(batch, self.policy.tokenizer,
                                                                   self.cfg.logging.samples_per_step)]
            for record in samples:
                self.run.logs["samples.jsonl"].append(record)
            self.metrics.log_samples(step, samples)
        if not blocked and checkpoint_due:
            self._save(healthy=self.guard.healthy)
        self._record_trips(trips, step)
        self._act(self.guard.decide(trips, self.checkpoints.last_good()))
        if self.cfg.faults.crash_at_step == step:
            raise RuntimeError(f"injected crash after step {step} (faults.crash_at_step)")

    def _rollout_and_update(self, step: int, timer: PhaseTimer, checkpoint_due: bool):
        with timer.phase("rollout"), progress.phase("rollout"), self.policy.unsharded():
            # generate, score, filter; failures retried, lost groups refilled
            batch = self.collector.collect(step, self.data_index, self.policy.revision)
        self.faults.kill_rank(step, self.run_dir)
        m: dict[str, Any] = rollout_metrics(batch, self.ranks)
        with timer.phase("guard"):
            trips = self.guard.check("rollout", step, m)
        result = UpdateResult(False, skip_reason=_blocking_reason(trips))
        if result.skip_reason is not None:
            return batch, m, trips, result
        with timer.phase("advantages"):
            train_batch, signal_here = self._advantages(batch)
            rows, signal_anywhere = self.ranks.sum([len(train_batch), float(signal_here)])
            if rows and signal_anywhere:
                m.update(self.policy.prepare(train_batch, self.recompute_old))
        m["update/no_signal"] = int(bool(rows) and not signal_anywhere)
        if not rows:
            result.skip_reason = "no trainable groups"
        elif not signal_anywhere:
            result.skip_reason = "no learning signal"
        else:
            if not self.ranks.distributed:
                self.signals.check()
            with timer.phase("update"), progress.phase("update"):
                result = self.policy.update(train_batch, inject_nan=self.faults.nan_loss(step),
                                            check_stop=lambda: None if self.ranks.distributed else self.signals.check())
        with timer.phase("guard"):
            self._check_params(result, checkpoint_due)
            m.update({f"actor/{k}": v for k, v in result.metrics.items()})
            m["update/applied"] = int(result.applied)
            m["update/nonfinite"] = int(result.skip_reason is not None and "non-finite" in result.skip_reason)
            trips += self.guard.check("update", step, m)
        return batch, m, trips, result

    def _advantages(self, batch: RolloutBatch) -> tuple[TrainBatch, bool]:
        """-> (this rank's rows to train on, whether they carry a learning signal). With no signal
        anywhere the update is skipped: a zero-gradient step would still move AdamW by its momentum."""
        samples = [s for g in batch.groups for s in g.samples]
        if not samples:
            return TrainBatch([], [], [], torch.zeros(0)), False
        advantages = group_advantages(batch.rewards(), self.cfg.algo.advantage_norm).flatten()  # [N*G]
        signal_here = self.policy.uses_reference or not bool((advantages == 0).all())
        return TrainBatch(
            prompt_ids=[s.prompt_ids for s in samples],
            completion_ids=[s.completion.token_ids for s in samples],
            old_logprobs=[s.completion.logprobs for s in samples],
            advantages=advantages,
        ), signal_here

    def _check_params(self, result: UpdateResult, checkpoint_due: bool) -> None:
        # With a finite, clipped gradient an AdamW step cannot make a finite fp32/bf16 weight
        # non-finite, so the full scan (a pass over every weight) runs only where that does not
        # hold, and before every checkpoint, which must never hold a poisoned model.
        scan = self.cfg.actor.max_grad_norm <= 0 or self.cfg.model.dtype == "float16"
        if result.applied and (scan or checkpoint_due) and not self.policy.params_finite():
            # The weights did change: only a rollback (the breaker's default) undoes this.
            result.skip_reason = "non-finite parameters after the update"

    # --- acting on the guard's verdict ---------------------------------------------------------

    def _record_trips(self, trips: list[Trip], step: int) -> None:
        for trip in trips:
            event = self.events.record("trip", step, trip.message, breaker=trip.breaker, action=trip.action,
                                       **trip.evidence)
            log.warning("step %d: breaker %s tripped (%s): %s", step, trip.breaker, trip.action, trip.message)
            for error in notify(event, self.cfg.guard.on_trip_command, self.cfg.guard.on_trip_webhook):
                self.events.record("notify_failed", step, error)

    def _act(self, verdict: Verdict) -> None:
        if verdict.action == "stop":
            self._stop(verdict)
        elif verdict.action == "pause":
            self._pause(verdict)
        elif verdict.action == "rollback":
            self._rollback(verdict)

    def _rollback(self, verdict: Verdict) -> None:
        trip, target = verdict.trip, verdict.rollback_to
        assert trip is not None and target is not None
        candidates = [i for i in self.checkpoints.list() if i.healthy and i.step <= target.step]
        good = self._restore_newest(candidates)
        if good is None:
            self._stop(Verdict("stop", trip, f"{trip.message}; not rolling back: no healthy checkpoint loads"))
        self.lr_scale *= self.cfg.guard.rollback_lr_factor
        self.checkpoints.discard_after(good.step)
        self.events.record("rollback", trip.step, f"rolled back to step {good.step} after {trip.breaker}",
                           checkpoint=str(good.path), lr_scale=self.lr_scale, rollbacks=self.guard.rollbacks)
        log.warning("rolled back to %s (lr x%g)", good.path, self.lr_scale)

    def _pause(self, verdict: Verdict) -> None:
        trip = verdict.trip
        assert trip is not None
        pause_file = self.run.paused_path
        self.run.write(pause_file, f"{trip.message}\nDelete this file to continue the run.\n")
        self.ranks.barrier()  # every rank waits on the same file
        self.events.record("pause", trip.step, f"paused: delete {pause_file} to continue", breaker=trip.breaker)
        log.warning("paused after %s: delete %s to continue", trip.breaker, pause_file)
        if not wait_while_paused(pause_file, self.cfg.guard.pause_poll_s, self.cfg.guard.pause_timeout_s,
                                 self.signals.event):
            self.signals.check()
            reason = f"{trip.message}; paused {self.cfg.guard.pause_timeout_s:g}s with no one resuming"
            self._stop(Verdict("stop", trip, reason))
        self.events.record("unpause", trip.step, "resumed after pause")

    def _stop(self, verdict: Verdict) -> NoReturn:
        trip = verdict.trip
        assert trip is not None
        good = self.checkpoints.last_good()
        cause = verdict.reason or trip.message
        report = write_stop_report(self.run_dir, f"{trip.breaker}: {cause}", trip.step, trip.evidence,
                                   good.path if good else None, write=self.ranks.main)
        self.events.record("stop", trip.step, cause, report=report)
        raise RunStopped(f"run stopped at step {trip.step} by breaker {trip.breaker}: {cause}\n"
                         f"last good checkpoint: {report['last_good_checkpoint']}\n"
                         f"resume with: {report['resume_command']}", report)

    def _server_stop(self, exc: ServerGaveUp | WeightSyncFailed, step: int) -> NoReturn:
        """The server side cannot go on: the guard turns that into a stop with its diagnosis."""
        breaker = "inference_server" if isinstance(exc, ServerGaveUp) else "weight_sync"
        evidence = exc.diagnosis if isinstance(exc, ServerGaveUp) else exc.evidence
        trip = Trip(breaker, "stop", step, str(exc), evidence)
        self._record_trips([trip], step)
        verdict = self.guard.decide([trip], self.checkpoints.last_good())
        self._act(verdict)
        raise AssertionError("a stop verdict always stops")

    def _interrupted(self, stop: StopRequested) -> RunInterrupted:
        """Save where the run stands (the last whole step) and say how to go on."""
        name = signal.Signals(stop.signum).name
        latest = self.checkpoints.latest()
        if latest is None or latest.step != self.step:
            self._save(healthy=self.guard.healthy and self.policy.params_finite())
        command = resume_command(self.run_dir, None)
        self.events.record("interrupted", self.step, f"{name}: state saved at step {self.step}", signal=name,
                           resume_command=command)
        log.warning("%s: saved step %d; resume with: %s", name, self.step, command)
        return RunInterrupted(f"interrupted by {name}: state saved at step {self.step}; resume with: {command}")

    def _crashed(self, exc: BaseException) -> BaseException:
        """Record a crash without letting the record hide it; a disk error becomes one that names the disk."""
        if is_disk_error(exc):
            self.run.release_reserve()  # room for the event below
            exc = exc if isinstance(exc, DiskError) else DiskError(getattr(exc, "filename", None) or self.run_dir, exc)
        try:
            self.events.record("crash", self.step + 1, f"{type(exc).__name__}: {exc}")
        except OSError as record_error:
            log.error("could not record the crash in %s: %s", self.events.path, record_error)
        return exc

    # --- state ---------------------------------------------------------------------------------

    def _loop_state(self) -> dict[str, Any]:
        return {"step": self.step, "data_index": self.data_index, "lr_scale": self.lr_scale, "score": self.score,
                "rng": capture_rng(), "guard": self.guard.state_dict()}

    def _load_loop_state(self, state: dict[str, Any]) -> None:
        self.step, self.data_index, self.lr_scale, self.score = (
            state["step"], state["data_index"], state["lr_scale"], state["score"])
        restore_rng(state["rng"])
        self.guard.load_state_dict(state["guard"])

    def _restore(self, info: CheckpointInfo) -> None:
        """Every rank loads the same checkpoint (its own shards of the policy, resharded to this world
        size) and rank 0's loop state."""
        state = self.checkpoints.load_state(info)
        try:
            self.policy.load_state(info.path)
        except ValueError as exc:
            raise ConfigError(f"checkpoint {info.path} does not fit model.name={self.cfg.model.name}: {exc}") from None
        self.policy.load_state_dict(state["policy"])
        self._load_loop_state(state)

    def _restore_newest(self, candidates: list[CheckpointInfo]) -> CheckpointInfo | None:
        """Restore the newest checkpoint that verifies; invalid ones are moved aside and recorded."""
        for info in reversed(candidates):
            try:
                self.checkpoints.verify(info)
                self._restore(info)
                return info
            except CheckpointInvalid as exc:
                moved = self.checkpoints.quarantine(info.path, exc.reason)
                self.events.record("checkpoint_invalid", info.step, str(exc), moved_to=str(moved))
                log.warning("%s; moved to %s, trying an older one", exc, moved)
        return None

    def _checkpoint_due(self, step: int) -> bool:
        every, minutes = self.cfg.checkpoint.every_steps, self.cfg.checkpoint.every_minutes
        return bool((every and step % every == 0) or (minutes and time.monotonic() - self.last_save > minutes * 60))

    def _save(self, healthy: bool = True) -> None:
        started = time.perf_counter()
        state = {**self._loop_state(), "policy": self.policy.state_dict(), "ranks": self.ranks.world}

        def write(directory: Path) -> None:
            self.policy.save_model(directory / "model")
            self.policy.save_state(directory / "policy")

        info = self.checkpoints.save(self.step, write, state, healthy=healthy, score=self.score,
                                     logs=self.run.log_offsets(), ranks=self.ranks)
        self.last_save = time.monotonic()
        size = sum(f["size"] for f in info.meta.get("files", {}).values())
        self.events.record("checkpoint", self.step, f"saved {info.path.name}", healthy=healthy, bytes=size,
                           seconds=round(time.perf_counter() - started, 3), ranks=self.ranks.world)

    def _evaluate(self, label: str) -> dict[str, float] | None:
        """Held-out accuracy (each rank evaluates its share of the problems); None when a stop signal
        cut it short (the step itself stands)."""
        problems = self.task.eval_problems(self.cfg.eval.max_samples)[self.ranks.rank :: self.ranks.world]
        try:
            with progress.phase(f"evaluate ({label})"), self.policy.unsharded():
                result = evaluate(self.engine, self.policy.tokenizer, problems, self.cfg.task, self.eval_reward_fn,
                                  max_new_tokens=self.cfg.eval.max_new_tokens or self.cfg.rollout.max_new_tokens)
        except GenerationCancelled:
            return None
        except (EvaluationFailed, ServerGaveUp, WeightSyncFailed) as exc:
            self._evaluation_failed(label, exc)
        result = merge_evaluations(self.ranks.gather(result))
        self.score = result["accuracy"]
        self.run.logs["eval.jsonl"].append({"step": self.step, "label": label, **result})
        self.metrics.log_eval(self.step, label, result)
        say(format_table(result, f"held-out evaluation ({label}, step {self.step})"))
        return result

    def _evaluation_failed(self, label: str, exc: EvaluationFailed | ServerGaveUp | WeightSyncFailed) -> NoReturn:
        """An evaluation that cannot complete has no accuracy: it is recorded as failed (never as 0%)
        and stops the run (exit 3); resuming evaluates again."""
        self.run.logs["eval.jsonl"].append({"step": self.step, "label": label, "status": "failed", "error": str(exc)})
        breaker, evidence = (("evaluation", exc.evidence) if isinstance(exc, EvaluationFailed) else
                             ("inference_server", exc.diagnosis) if isinstance(exc, ServerGaveUp) else
                             ("weight_sync", exc.evidence))
        trip = Trip(breaker, "stop", self.step, f"held-out evaluation ({label}) failed: {exc}", evidence)
        self._record_trips([trip], self.step)
        self._act(self.guard.decide([trip], self.checkpoints.last_good()))
        raise AssertionError("a stop verdict always stops")

    def _explain_skip(self, step: int, result: UpdateResult, m: dict[str, Any]) -> None:
        """The first time an update is skipped for a reason, say why and what to change, loudly."""
        reason = result.skip_reason
        if result.applied or reason is None or reason in self.explained or reason.startswith("breaker"):
            return
        self.explained.add(reason)
        if reason == "no learning signal":
            mean, truncated = m.get("reward/mean"), m.get("response/truncated_frac") or 0.0
            why = ("every answer was wrong" if mean == 0 else "every answer was right" if mean == m.get("reward/max")
                   and mean else "in every group all answers got the same reward")
            remedy = ("more samples per problem (rollout.samples_per_problem) so some answers differ, "
                      "dynamic sampling (rollout.filter_zero_variance=true) to refill with groups that disagree, "
                      "a task matched to the model, or a small format bonus in the reward")
            if truncated > 0.3:
                remedy = f"longer answers (rollout.max_new_tokens: {truncated:.0%} were cut off), " + remedy
            alert(f"step {step}: NO UPDATE: {why} (mean reward {mean}), so GRPO has no signal. Try {remedy}.")
        elif reason == "no trainable groups":
            alert(f"step {step}: NO UPDATE: no group had every sample generated and scored "
                  f"({m.get('rollout/failed', 0)} failed, {m.get('rollout/unscorable', 0)} unscorable); "
                  "the guard's breakers watch this (grpo doctor shows the failures).")


def _blocking_reason(trips: list[Trip]) -> str | None:
    """Why the update must not run: a tripped breaker that does more than warn."""
    blocking = [t for t in trips if t.action != "warn"]
    return f"breaker {blocking[0].breaker} tripped" if blocking else None


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
