"""The GRPO training loop. It drives the roles (policy, rollout, guard, run directory) and each step
reads top to bottom in named phases:

    rollout -> check rollouts -> advantages -> update -> check update -> sync -> evaluate -> checkpoint
    -> record -> act on the guard's verdict

Rollout breakers run before the update, so a bad batch is never trained on. The guard only decides;
restoring, pausing and stopping are done here, through the policy and checkpoint APIs.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from grpo.algo.advantages import group_advantages
from grpo.config import ConfigError, RunConfig, save_config, to_dict
from grpo.evaluate import evaluate, format_table
from grpo.guard.breakers import Guard, Trip, Verdict
from grpo.guard.events import EventLog
from grpo.guard.faults import FaultInjector
from grpo.guard.recovery import RunStopped, notify, wait_while_paused, write_stop_report
from grpo.metrics import MetricsLogger
from grpo.phases import PhaseTimer
from grpo.policy.models import resolve_device
from grpo.policy.optim import lr_at
from grpo.policy.policy import Policy
from grpo.policy.update import TrainBatch, UpdateResult
from grpo.rewards import get_reward
from grpo.rollout.collector import RolloutBatch, RolloutCollector, rollout_metrics
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rundir.checkpoints import CheckpointManager, capture_rng, load_state, restore_rng
from grpo.tasks import build_task

log = logging.getLogger(__name__)


class TrainingLoop:
    def __init__(self, cfg: RunConfig, resume_from: str | None = None) -> None:
        self.cfg = cfg
        self.run_dir = cfg.resolved_run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        seed = cfg.train.seed
        random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
        self.task = build_task(cfg.task)
        self.total_steps = self._total_steps()
        try:
            self.reward_fn = get_reward(cfg.task.reward)
        except (KeyError, AttributeError, TypeError, ImportError) as exc:
            raise ConfigError(f"task.reward={cfg.task.reward!r}: {exc}") from exc
        self.device = resolve_device(cfg.model.device)
        self.policy = Policy(cfg, self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.faults = FaultInjector(cfg.faults, seed)
        self.engine = EmbeddedEngine(self.policy.model, self.policy.tokenizer, cfg.rollout.generation_batch_size)
        self.collector = RolloutCollector(
            self.engine, self.policy.tokenizer, self.task, cfg.task, cfg.rollout, self.reward_fn, self.faults, seed
        )
        self.guard = Guard(cfg.guard)
        self.events = EventLog(self.run_dir / "events.jsonl")
        self.checkpoints = CheckpointManager(self.run_dir / "checkpoints", cfg.checkpoint)
        self.step, self.data_index, self.lr_scale, self.score = 0, 0, 1.0, None
        self.last_save = time.monotonic()
        self._save_config()
        self.metrics = MetricsLogger(self.run_dir, cfg.logging, self.total_steps, cfg.name, to_dict(cfg))
        self._start(resume_from)

    def _save_config(self) -> None:
        """Write the resolved config; a resume with a different one records what changed."""
        path = self.run_dir / "config.yaml"
        if path.is_file():
            before, after = _flatten(yaml.safe_load(path.read_text()) or {}), _flatten(to_dict(self.cfg))
            changed = {k: [before.get(k), after.get(k)] for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            if changed:
                self.events.record("config_changed", 0, f"{len(changed)} config keys differ from the saved run",
                                   changed=changed)
        save_config(self.cfg, path)

    def _total_steps(self) -> int:
        if self.cfg.train.steps is not None:
            return self.cfg.train.steps
        if self.task.num_train is None:
            raise ConfigError(f"task {self.task.name} is unlimited: set train.steps")
        return math.ceil(self.task.num_train * self.cfg.train.epochs / self.cfg.rollout.problems_per_step)

    def _start(self, resume_from: str | None) -> None:
        stopped = self.run_dir / "STOPPED.json"
        source = Path(resume_from) if resume_from else None
        if source is None and self.cfg.recover == "auto" and (latest := self.checkpoints.latest()) is not None:
            source = latest.path
        if source is not None:
            self._restore(source)
            abandoned = self.checkpoints.set_aside_after(self.step) if resume_from else []
            previous = json.loads(stopped.read_text()) if stopped.is_file() else None
            stopped.unlink(missing_ok=True)
            self.events.record("restart", self.step, f"resumed from {source}", previous_stop=previous,
                               set_aside=[str(p) for p in abandoned])
            log.info("resumed from %s at step %d", source, self.step)
        elif self.checkpoints.latest() is not None:
            raise ConfigError(f"{self.run_dir} already has checkpoints and recover=off: pick a new run_dir")
        else:
            # A step-0 checkpoint gives a rollback target before the first periodic save.
            self._save(healthy=True)

    # ---------------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        try:
            return self._train()
        except RunStopped:
            raise
        except BaseException as exc:  # recorded, then re-raised: a crash is never silent
            self.events.record("crash", self.step + 1, f"{type(exc).__name__}: {exc}")
            self.metrics.close()
            raise

    def _train(self) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        if self.cfg.eval.before_training and self.step == 0:
            summary["before"] = self._evaluate("before")
        while self.step < self.total_steps:
            self._train_step(self.step + 1)
        latest = self.checkpoints.latest()
        if self.cfg.checkpoint.save_final and (latest is None or latest.step != self.step):
            self._save(healthy=self.guard.healthy and self.policy.params_finite())
        if self.cfg.eval.after_training:
            summary["after"] = self._evaluate("after")
        self.metrics.close()
        return summary

    def _train_step(self, step: int) -> None:
        timer = PhaseTimer(self.device)
        started = time.perf_counter()
        self.policy.set_lr(lr_at(step - 1, self.total_steps, self.cfg.actor) * self.lr_scale)
        checkpoint_due = self._checkpoint_due(step)

        with timer.phase("rollout"):  # generate, score, filter: failed samples retried, bad groups refilled
            batch = self.collector.collect(step, self.data_index, self.generator)
        m: dict[str, Any] = rollout_metrics(batch)
        with timer.phase("guard"):
            trips = self.guard.check("rollout", step, m)

        result = UpdateResult(False, skip_reason=_blocking_reason(trips))
        if result.skip_reason is None:
            with timer.phase("advantages"):
                train_batch, no_signal = self._advantages(batch)
            m["update/no_signal"] = int(no_signal)
            if train_batch is None:
                result.skip_reason = "no learning signal" if no_signal else "no trainable groups"
            else:
                with timer.phase("update"):
                    result = self.policy.update(train_batch, inject_nan=self.faults.nan_loss(step))
            with timer.phase("guard"):
                self._check_params(result, checkpoint_due)
                m.update({f"actor/{k}": v for k, v in result.metrics.items()})
                m["update/applied"] = int(result.applied)
                m["update/nonfinite"] = int(result.skip_reason is not None and "non-finite" in result.skip_reason)
                trips += self.guard.check("update", step, m)

        with timer.phase("sync"):
            self.engine.sync_weights(self.policy.model)
        self.step, self.data_index = step, batch.next_data_index
        self.faults.step_done(step)
        blocked = _blocking_reason(trips) is not None
        if not trips:
            self.guard.observe({**m, "update/applied": int(result.applied)})
        if not blocked:
            if self.cfg.eval.every_steps and step % self.cfg.eval.every_steps == 0:
                m.update({f"eval/{k}": v for k, v in self._evaluate(f"step {step}").items()})
            with timer.phase("checkpoint"):
                if checkpoint_due:
                    self._save(healthy=self.guard.healthy)

        m.update(timer.pop())
        m.setdefault("update/no_signal", 0)
        m.update({
            "update/applied": int(result.applied), "update/skip_reason": result.skip_reason,
            "actor/lr": self.policy.lr, "data/index": self.data_index,
            "guard/trips": [t.breaker for t in trips], "guard/rollbacks": self.guard.rollbacks,
            "time/step_s": time.perf_counter() - started,
        })
        m["perf/tokens_per_s"] = m["perf/generated_tokens"] / m["time/step_s"]
        self.metrics.log(step, m)
        self._record_trips(trips, step)
        self._act(self.guard.decide(trips, self.checkpoints.last_good()))
        if self.cfg.faults.crash_at_step == step:
            raise RuntimeError(f"injected crash after step {step} (faults.crash_at_step)")

    def _advantages(self, batch: RolloutBatch) -> tuple[TrainBatch | None, bool]:
        """-> (the batch to train on, or None; whether it was dropped for having no learning signal)."""
        if not batch.groups:
            return None, False
        advantages = group_advantages(batch.rewards(), self.cfg.algo.advantage_norm).flatten()  # [N*G]
        if self.policy.ref_model is None and bool((advantages == 0).all()):
            return None, True  # a zero-gradient step would still move AdamW by its momentum
        samples = [s for g in batch.groups for s in g.samples]
        train_batch = TrainBatch(
            prompt_ids=[s.prompt_ids for s in samples],
            completion_ids=[s.completion.token_ids for s in samples],
            old_logprobs=[s.completion.logprobs for s in samples],
            advantages=advantages,
        )
        return self.policy.prepare(train_batch), False

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
        trip, good = verdict.trip, verdict.rollback_to
        assert trip is not None and good is not None
        self._restore(good.path)
        self.lr_scale *= self.cfg.guard.rollback_lr_factor
        self.checkpoints.discard_after(good.step)
        self.events.record("rollback", trip.step, f"rolled back to step {good.step} after {trip.breaker}",
                           checkpoint=str(good.path), lr_scale=self.lr_scale, rollbacks=self.guard.rollbacks)
        log.warning("rolled back to %s (lr x%g)", good.path, self.lr_scale)

    def _pause(self, verdict: Verdict) -> None:
        trip = verdict.trip
        assert trip is not None
        pause_file = self.run_dir / "PAUSED"
        pause_file.write_text(f"{trip.message}\nDelete this file to continue the run.\n")
        self.events.record("pause", trip.step, f"paused: delete {pause_file} to continue", breaker=trip.breaker)
        log.warning("paused after %s: delete %s to continue", trip.breaker, pause_file)
        if not wait_while_paused(pause_file, self.cfg.guard.pause_poll_s, self.cfg.guard.pause_timeout_s):
            reason = f"{trip.message}; paused {self.cfg.guard.pause_timeout_s:g}s with no one resuming"
            self._stop(Verdict("stop", trip, reason))
        self.events.record("unpause", trip.step, "resumed after pause")

    def _stop(self, verdict: Verdict) -> None:
        trip = verdict.trip
        assert trip is not None
        good = self.checkpoints.last_good()
        cause = verdict.reason or trip.message
        report = write_stop_report(self.run_dir, f"{trip.breaker}: {cause}", trip.step, trip.evidence,
                                   good.path if good else None)
        self.events.record("stop", trip.step, cause, report=report)
        self.metrics.close()
        raise RunStopped(f"run stopped at step {trip.step} by breaker {trip.breaker}: {cause}\n"
                         f"last good checkpoint: {report['last_good_checkpoint']}\n"
                         f"resume with: {report['resume_command']}", report)

    # --- state ---------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {"step": self.step, "data_index": self.data_index, "lr_scale": self.lr_scale, "score": self.score,
                "policy": self.policy.state_dict(), "rng": capture_rng(self.generator),
                "guard": self.guard.state_dict()}

    def _restore(self, path: Path) -> None:
        state = load_state(path)
        self.policy.load_model(Path(path) / "model")
        self.policy.load_state_dict(state["policy"])
        self.step, self.data_index, self.lr_scale, self.score = (
            state["step"], state["data_index"], state["lr_scale"], state["score"])
        restore_rng(state["rng"], self.generator)
        self.guard.load_state_dict(state["guard"])

    def _checkpoint_due(self, step: int) -> bool:
        every, minutes = self.cfg.checkpoint.every_steps, self.cfg.checkpoint.every_minutes
        return bool((every and step % every == 0) or (minutes and time.monotonic() - self.last_save > minutes * 60))

    def _save(self, healthy: bool = True) -> None:
        self.checkpoints.save(self.step, self.policy.save_model, self._state(), healthy=healthy, score=self.score)
        self.last_save = time.monotonic()

    def _evaluate(self, label: str) -> dict[str, float]:
        problems = self.task.eval_problems(self.cfg.eval.max_samples)
        result = evaluate(self.engine, self.policy.tokenizer, problems, self.cfg.task, self.reward_fn,
                          max_new_tokens=self.cfg.eval.max_new_tokens or self.cfg.rollout.max_new_tokens)
        self.score = result["accuracy"]
        with (self.run_dir / "eval.jsonl").open("a") as f:
            f.write(json.dumps({"step": self.step, "label": label, **result}) + "\n")
        print(format_table(result, f"held-out evaluation ({label}, step {self.step})"), flush=True)
        return result


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
