"""The GRPO training loop. Each step reads top to bottom in named phases:

rollout -> reward -> filter (one phase, in RolloutCollector) -> advantages -> update -> sync -> checkpoint

Breakers check the batch before the update (a bad batch is never trained on) and the update after it.
"""

from __future__ import annotations

import copy
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
from grpo.rundir.checkpoints import CheckpointManager, capture_rng, load_checkpoint, restore_rng
from grpo.config import ConfigError, RunConfig, save_config, to_dict
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.evaluate import evaluate, format_table
from grpo.guard.events import EventLog
from grpo.guard.faults import FaultInjector
from grpo.guard.breakers import Guard, Trip, most_severe
from grpo.algo.loss import LossConfig
from grpo.metrics import MetricsLogger
from grpo.policy.models import load_model_and_tokenizer, resolve_device
from grpo.policy.optim import MasterWeightAdamW, lr_at
from grpo.phases import PhaseTimer
from grpo.guard.recovery import RunStopped, notify, wait_while_paused, write_stop_report
from grpo.rewards import get_reward
from grpo.rollout.collector import RolloutBatch, RolloutCollector, rollout_metrics
from grpo.tasks import build_task
from grpo.policy.update import TrainBatch, UpdateResult, completion_logprobs, collate, micro_batches, update_policy

log = logging.getLogger(__name__)


class Trainer:
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
        self.model, self.tokenizer = load_model_and_tokenizer(cfg.model, self.device)
        self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False) if cfg.algo.kl_coef > 0 else None
        self.optimizer = MasterWeightAdamW(self.model, cfg.actor)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.faults = FaultInjector(cfg.faults, seed)
        self.engine = EmbeddedEngine(self.model, self.tokenizer, cfg.rollout.generation_batch_size)
        self.collector = RolloutCollector(
            self.engine, self.tokenizer, self.task, cfg.task, cfg.rollout, self.reward_fn, self.faults, seed
        )
        self.guard = Guard(cfg.guard)
        self.events = EventLog(self.run_dir / "events.jsonl")
        self.checkpoints = CheckpointManager(self.run_dir / "checkpoints", cfg.checkpoint)
        self.loss_cfg = LossConfig(cfg.algo.clip_low, cfg.algo.clip_high, cfg.algo.loss_agg, cfg.algo.kl_coef,
                                   cfg.algo.kl_estimator, cfg.rollout.max_new_tokens)
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
            self.checkpoints.save(0, self.model, self.tokenizer, self._state(), healthy=True, score=None)

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
            self._save(healthy=self.guard.healthy and self.optimizer.params_finite())
        if self.cfg.eval.after_training:
            summary["after"] = self._evaluate("after")
        self.metrics.close()
        return summary

    def _train_step(self, step: int) -> None:
        timer = PhaseTimer(self.device)
        started = time.perf_counter()
        self.optimizer.set_lr(lr_at(step - 1, self.total_steps, self.cfg.actor) * self.lr_scale)
        checkpoint_due = self._checkpoint_due(step)

        # Rollout, reward, filter: failed samples retried, invalid groups dropped and refilled.
        with timer.phase("rollout"):
            batch = self.collector.collect(step, self.data_index, self.generator)
        m: dict[str, Any] = rollout_metrics(batch)
        with timer.phase("guard"):
            trips = self.guard.check("rollout", step, m)
        blocked = [t for t in trips if t.action != "warn"]

        result = UpdateResult(False, skip_reason=f"breaker {blocked[0].breaker} tripped" if blocked else None)
        if not blocked:
            with timer.phase("advantages"):
                train_batch, no_signal = self._advantages(batch)
            if train_batch is None:
                result.skip_reason = "no trainable groups" if not batch.groups else "no learning signal"
                m["update/no_signal"] = int(no_signal)
            else:
                with timer.phase("update"):
                    result = update_policy(
                        self.model, self.optimizer, train_batch, self.loss_cfg,
                        updates=self.cfg.algo.updates_per_batch, micro_batch_size=self.cfg.algo.micro_batch_size,
                        max_grad_norm=self.cfg.actor.max_grad_norm, temperature=self.cfg.rollout.temperature,
                        pad_id=self.tokenizer.pad_token_id, inject_nan=self.faults.nan_loss(step),
                    )
            with timer.phase("guard"):
                # With a finite, clipped gradient an AdamW step cannot make a finite fp32/bf16 weight
                # non-finite, so the full scan (a pass over every weight) runs only where that does
                # not hold, and before every checkpoint, which must never hold a poisoned model.
                scan = self.cfg.actor.max_grad_norm <= 0 or self.cfg.model.dtype == "float16"
                if result.applied and (scan or checkpoint_due) and not self.optimizer.params_finite():
                    # The weights did change: only a rollback (the breaker's default) undoes this.
                    result.skip_reason = "non-finite parameters after the update"
            m.update({f"actor/{k}": v for k, v in result.metrics.items()})
            m["update/applied"] = int(result.applied)
            m["update/nonfinite"] = int(result.skip_reason is not None and "non-finite" in result.skip_reason)
            with timer.phase("guard"):
                trips += self.guard.check("update", step, m)

        with timer.phase("sync"):
            self.engine.sync_weights(self.model)
        self.step, self.data_index = step, batch.next_data_index
        self.faults.step_done(step)
        blocked = [t for t in trips if t.action != "warn"]
        healthy = not blocked and self.guard.healthy
        if not trips:
            self.guard.observe({**m, "update/applied": int(result.applied)})
        if not blocked:
            if self.cfg.eval.every_steps and step % self.cfg.eval.every_steps == 0:
                m.update({f"eval/{k}": v for k, v in self._evaluate(f"step {step}").items()})
            with timer.phase("checkpoint"):
                if checkpoint_due:
                    self._save(healthy=healthy)

        m.update(timer.pop())
        m.setdefault("update/no_signal", 0)
        m.update({
            "update/applied": int(result.applied), "update/skip_reason": result.skip_reason,
            "actor/lr": self.optimizer.optimizer.param_groups[0]["lr"], "data/index": self.data_index,
            "guard/trips": [t.breaker for t in trips], "guard/rollbacks": self.guard.rollbacks,
            "time/step_s": time.perf_counter() - started,
        })
        m["perf/tokens_per_s"] = m["perf/generated_tokens"] / m["time/step_s"]
        self.metrics.log(step, m)
        self._respond(trips, step)
        if self.cfg.faults.crash_at_step == step:
            raise RuntimeError(f"injected crash after step {step} (faults.crash_at_step)")

    def _advantages(self, batch: RolloutBatch) -> tuple[TrainBatch | None, bool]:
        if not batch.groups:
            return None, False
        advantages = group_advantages(batch.rewards(), self.cfg.algo.advantage_norm).flatten()  # [N*G]
        if self.ref_model is None and bool((advantages == 0).all()):
            return None, True  # a zero-gradient step would still move AdamW by its momentum
        samples = [s for g in batch.groups for s in g.samples]
        train_batch = TrainBatch(
            prompt_ids=[s.prompt_ids for s in samples],
            completion_ids=[s.completion.token_ids for s in samples],
            old_logprobs=[s.completion.logprobs for s in samples],
            advantages=advantages,
        )
        if self.cfg.algo.recompute_old_logprobs:
            train_batch.old_logprobs = self._logprobs(self.model, train_batch)
        if self.ref_model is not None:
            train_batch.ref_logprobs = [torch.tensor(lp) for lp in self._logprobs(self.ref_model, train_batch)]
        return train_batch, False

    @torch.no_grad()
    def _logprobs(self, model: torch.nn.Module, batch: TrainBatch) -> list[list[float]]:
        out: list[list[float]] = []
        for rows in micro_batches(batch, self.cfg.algo.micro_batch_size):
            mb = collate(batch, rows, self.tokenizer.pad_token_id, self.device)
            logprobs, _ = completion_logprobs(model, mb, self.cfg.rollout.temperature)
            out.extend(logprobs[i, : len(batch.completion_ids[r])].tolist() for i, r in enumerate(rows))
        return out

    # --- breakers -----------------------------------------------------------------------------

    def _respond(self, trips: list[Trip], step: int) -> None:
        for trip in trips:
            event = self.events.record("trip", step, trip.message, breaker=trip.breaker, action=trip.action,
                                       **trip.evidence)
            log.warning("step %d: breaker %s tripped (%s): %s", step, trip.breaker, trip.action, trip.message)
            for error in notify(event, self.cfg.guard.on_trip_command, self.cfg.guard.on_trip_webhook):
                self.events.record("notify_failed", step, error)
        worst = most_severe(trips)
        if worst is None or worst.action == "warn":
            return
        if worst.action == "stop":
            self._stop(worst)
        if worst.action == "pause":
            self._pause(worst)
        if worst.action == "rollback":
            self._rollback(worst)

    def _rollback(self, trip: Trip) -> None:
        self.guard.rollbacks += 1
        good = self.checkpoints.last_good()
        if self.guard.rollbacks > self.cfg.guard.max_rollbacks or good is None:
            why = "no healthy checkpoint to roll back to" if good is None else (
                f"{self.cfg.guard.max_rollbacks} rollbacks already done")
            self._stop(trip, f"{trip.message}; not rolling back: {why}")
        rollbacks = self.guard.rollbacks
        self._restore(good.path)
        self.guard.rollbacks = rollbacks
        self.lr_scale *= self.cfg.guard.rollback_lr_factor
        self.checkpoints.discard_after(good.step)
        self.events.record("rollback", trip.step, f"rolled back to step {good.step} after {trip.breaker}",
                           checkpoint=str(good.path), lr_scale=self.lr_scale, rollbacks=rollbacks)
        log.warning("rolled back to %s (lr x%g)", good.path, self.lr_scale)

    def _pause(self, trip: Trip) -> None:
        pause_file = self.run_dir / "PAUSED"
        pause_file.write_text(f"{trip.message}\nDelete this file to continue the run.\n")
        self.events.record("pause", trip.step, f"paused: delete {pause_file} to continue", breaker=trip.breaker)
        log.warning("paused after %s: delete %s to continue", trip.breaker, pause_file)
        if not wait_while_paused(pause_file, self.cfg.guard.pause_poll_s, self.cfg.guard.pause_timeout_s):
            self._stop(trip, f"{trip.message}; paused {self.cfg.guard.pause_timeout_s:g}s with no one resuming")
        self.events.record("unpause", trip.step, "resumed after pause")

    def _stop(self, trip: Trip, message: str | None = None) -> None:
        good = self.checkpoints.last_good()
        cause = message or trip.message
        report = write_stop_report(self.run_dir, f"{trip.breaker}: {cause}", trip.step, trip.evidence,
                                   good.path if good else None)
        self.events.record("stop", trip.step, cause, report=report)
        self.metrics.close()
        raise RunStopped(f"run stopped at step {trip.step} by breaker {trip.breaker}: {cause}\n"
                         f"last good checkpoint: {report['last_good_checkpoint']}\n"
                         f"resume with: {report['resume_command']}", report)

    # --- state --------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {"step": self.step, "data_index": self.data_index, "lr_scale": self.lr_scale, "score": self.score,
                "optimizer": self.optimizer.state_dict(), "rng": capture_rng(self.generator),
                "guard": self.guard.state_dict()}

    def _restore(self, path: Path) -> None:
        state = load_checkpoint(path, self.model)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.data_index, self.lr_scale, self.score = (
            state["step"], state["data_index"], state["lr_scale"], state["score"])
        restore_rng(state["rng"], self.generator)
        self.guard.load_state_dict(state["guard"])

    def _checkpoint_due(self, step: int) -> bool:
        every, minutes = self.cfg.checkpoint.every_steps, self.cfg.checkpoint.every_minutes
        return bool((every and step % every == 0) or (minutes and time.monotonic() - self.last_save > minutes * 60))

    def _save(self, healthy: bool = True) -> None:
        self.checkpoints.save(self.step, self.model, self.tokenizer, self._state(), healthy=healthy, score=self.score)
        self.last_save = time.monotonic()

    def _evaluate(self, label: str) -> dict[str, float]:
        problems = self.task.eval_problems(self.cfg.eval.max_samples)
        result = evaluate(self.engine, self.tokenizer, problems, self.cfg.task, self.reward_fn,
                          max_new_tokens=self.cfg.eval.max_new_tokens or self.cfg.rollout.max_new_tokens)
        self.score = result["accuracy"]
        with (self.run_dir / "eval.jsonl").open("a") as f:
            f.write(json.dumps({"step": self.step, "label": label, **result}) + "\n")
        print(format_table(result, f"held-out evaluation ({label}, step {self.step})"), flush=True)
        return result


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
