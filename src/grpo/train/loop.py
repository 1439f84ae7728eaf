"""The GRPO training loop. Each step reads top to bottom in named phases:

    set the learning rate -> rollout -> check rollouts -> advantages (and, off policy, the off-policy
    check) and update (unless blocked)
    -> check the update -> sync -> evaluate if due -> record -> save if due -> act on the verdict

Rollout breakers run before the update, so a bad batch is never trained on. The guard only decides;
`VerdictActions` carries out its verdicts (roll back, pause, stop), and `RunState` starts, saves and
restores the run. A stop signal abandons a step before its update is applied (or lets an applied one
finish), saves, and exits. Components are built in grpo.train.build; the rows the update trains on (their
advantages, and which carry a gradient) are named once per step in grpo.train.advantages, then only read;
the step's record is grpo.train.step.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grpo import progress
from grpo.config import RunConfig, to_dict
from grpo.console import say
from grpo.dist import SINGLE, Ranks
from grpo.errors import RunStopped, is_disk_error
from grpo.evaluate import EvaluationFailed, format_table
from grpo.hooks import Hooks, RunView, StepHooks
from grpo.policy.optim import lr_at
from grpo.policy.update import UpdateResult
from grpo.progress import Progress
from grpo.rewards import TrainerState
from grpo.rollout.collector import RolloutBatch, rollout_stats, sample_records
from grpo.rollout.types import EngineGaveUp, GenerationCancelled
from grpo.rundir.events import ServerEvents, StepInProgress
from grpo.rundir.files import read_json
from grpo.rundir.run import RunDir
from grpo.train.advantages import rows_to_train
from grpo.train.advice import ALL_MASKED, SkipAdvice
from grpo.train.build import build
from grpo.train.evaluation import evaluate_held_out
from grpo.train.metrics import MetricsLogger
from grpo.train.run_state import RunState
from grpo.train.signals import SignalWatch, StopRequested
from grpo.train.step import StepRecord, StepState
from grpo.train.timing import PhaseTimer
from grpo.train.verdicts import VerdictActions

log = logging.getLogger(__name__)


@dataclass
class MidStep:
    """A step under way, for a stop that must save where the run stands."""

    start: dict[str, Any]  # the state at the step's start (RunState.snapshot)
    weights_moved: bool = False  # its update began: the weights are no longer the start's


class TrainingLoop:
    def __init__(self, cfg: RunConfig, resume_from: str | None = None, run: RunDir | None = None,
                 ranks: Ranks = SINGLE, hooks: Sequence[StepHooks] = ()) -> None:
        """With `ranks` of a group (torchrun), every rank runs this loop on its share of each step;
        rank 0 alone writes the run directory. `hooks`: what an entry point attaches at the run's seams
        (grpo.hooks)."""
        self.cfg, self.ranks, self.hooks = cfg, ranks, Hooks(hooks)
        self.run = run or RunDir(cfg.resolved_run_dir, cfg.checkpoint, writes=ranks.main).acquire()
        self.metrics: MetricsLogger | None = None
        self.signals = SignalWatch()
        self.engine, self.rollouts, self.state = None, None, None
        self.mid_step: MidStep | None = None
        # Set here, read by the threads that record a server's events: the step they are recorded under.
        self.step_in_progress = StepInProgress()
        server_events = ServerEvents(self.run.events, self.step_in_progress)
        try:
            parts = build(cfg, ranks, self.run.path, self.signals, server_events.record, self.hooks,
                          self.run.events.record)
            self.task, self.total_steps, self.device = parts.task, parts.total_steps, parts.device
            self.policy, self.engine, self.collector, self.guard = parts.policy, parts.engine, parts.collector, parts.guard
            self.recompute_old, self.eval_rewards = parts.recompute_old, parts.eval_rewards
            self.eval_prompt_limit = parts.eval_prompt_limit
            self.rollouts = parts.rollouts
            self.state = RunState(cfg, self.run, self.policy, self.guard, ranks, self.rollouts)
            self.verdicts = VerdictActions(cfg.guard, self.guard, self.state, self.run, ranks, self.signals,
                                           save_before_stop=self._save_before_stopping)
            self.advice = SkipAdvice()
            self.state.start(resume_from)
            self.step_in_progress.set(self.state.step)
            self.metrics = MetricsLogger(self.run.path, cfg.logging, self.total_steps, cfg.name, to_dict(cfg),
                                         start_step=self.state.step, enabled=ranks.main)
            self.hooks.built(RunView(self.run.path, self.policy.model, parts.server_engine,
                                     current_step=lambda: self.state.step))
        except BaseException as exc:
            # A disk that fills during the start (the step-0 checkpoint) is recorded like one that fills
            # later, so that `grpo doctor` and `grpo health` read the run.
            if self.state is not None and is_disk_error(exc):
                recorded = self.state.crashed(exc)
                self.close()
                if recorded is exc:
                    raise
                raise recorded from exc
            self.close()
            raise

    @property
    def step(self) -> int:
        return self.state.step

    def close(self) -> None:
        progress.activate(None)
        if self.rollouts is not None:  # before the engine: a batch in flight may be using it
            self.rollouts.close()
        if self.engine is not None:
            self.engine.close()
        if self.metrics is not None:
            self.metrics.close()
        self.signals.uninstall()
        self.run.close()

    def train(self) -> dict[str, Any]:
        self.signals.install()
        self.progress = (Progress(self.total_steps, self.cfg.logging.progress_interval_s)
                         if self.cfg.logging.progress and self.ranks.main else None)
        progress.activate(self.progress)
        try:
            try:
                return self._train()
            except (RunStopped, KeyboardInterrupt):
                raise
            except StopRequested as stop:
                raise self.state.interrupted(stop, self.signals.received_at) from None
            except BaseException as exc:  # recorded, then re-raised: a crash is never silent
                if not self.ranks.distributed and not is_disk_error(exc):  # a save is every rank's, and needs room
                    self._save_before_crashing(exc)
                raise self.state.crashed(exc) from exc
        except KeyboardInterrupt:  # a second Ctrl-C, perhaps during the first one's save
            self.state.abandoned()
            raise
        finally:
            self.close()

    def _train(self) -> dict[str, Any]:
        started = time.time()
        summary: dict[str, Any] = {}
        # The same command again on a finished run: nothing to train or evaluate, no server to start.
        finished_after = self._finished_evaluation() if self.state.step >= self.total_steps else None
        if self.state.step < self.total_steps or (self.cfg.eval.after_training and finished_after is None):
            try:
                self.engine.start(self.policy)
            except EngineGaveUp as exc:
                self.verdicts.server_stop(exc, self.state.step)
        else:
            log.info("the run had finished at step %d: nothing to do", self.state.step)
        if self.cfg.eval.before_training:  # a resumed run reports the evaluation its first start made
            summary["before"] = self._evaluate("before") if self.state.step == 0 else self.state.evaluation("before")
        while self.state.step < self.total_steps:
            self.signals.check_together(self.ranks)
            if self.progress is not None:
                self.progress.start_step(self.state.step + 1)
            self.hooks.step_start(self.state.step + 1)
            self._train_step(self.state.step + 1)
            if self.progress is not None:
                self.progress.end_step()
            self.signals.check_together(self.ranks)
        if self.cfg.checkpoint.save_final:
            self.state.save_final()
        if self.cfg.eval.after_training:
            summary["after"] = finished_after or self._evaluate("after")
        final = self.run.checkpoints.latest()
        self.run.write(self.run.summary_path, json.dumps({
            "status": "finished", "steps": self.state.step, "wall_s": time.time() - started, "ranks": self.ranks.world,
            "final_checkpoint": str(final.path) if final else None,
            "final_model": str(final.model_dir) if final else None, **summary,
        }, indent=2, default=str))
        return summary

    def _save_before_stopping(self, healthy: bool) -> None:
        """Any stop that ends the run saves where it stands first, as a stop signal does: mid-step, the
        step's start (what the step consumed put back) while its update has not moved the weights;
        nothing once it has, until the step is recorded (the newest checkpoint then resumes, redoing it)."""
        if self.mid_step is not None:
            if self.mid_step.weights_moved:
                log.warning("not saved before stopping: step %d's update was applied but the step not recorded; "
                            "the newest checkpoint resumes", self.mid_step.start["step"] + 1)
                return
            self.state.rewind(self.mid_step.start)
            self.mid_step = None
        self.state.save_final(healthy=healthy and self.policy.params_finite())

    def _save_before_crashing(self, exc: BaseException) -> None:
        """A crash the loop caught saves as a stop does; a save that fails too is said, never raised over
        the crash that caused it."""
        try:
            self._save_before_stopping(healthy=self.guard.healthy)
        except Exception as save_error:
            log.error("could not save before stopping on %s: %s: %s", type(exc).__name__,
                      type(save_error).__name__, save_error)

    def _finished_evaluation(self) -> dict[str, Any] | None:
        """The evaluation after training of the run that finished at this step, from its summary (eval.jsonl
        was cut back to the final checkpoint, saved before that evaluation)."""
        summary, _ = read_json(self.run.summary_path)
        if isinstance(summary, dict) and summary.get("status") == "finished" and summary.get("steps") == self.state.step:
            return summary.get("after")
        return None

    # --- one step ----------------------------------------------------------------------------------

    def _train_step(self, step: int) -> None:
        record, timer, started = StepRecord(step), PhaseTimer(self.device), time.perf_counter()
        self.step_in_progress.set(step)
        self.policy.set_lr(lr_at(step - 1, self.total_steps, self.cfg.actor) * self.state.lr_scale)
        checkpoint_due = self.ranks.broadcast(self.state.checkpoint_due(step))  # rank 0's clock decides
        self.mid_step = MidStep(self.state.snapshot())
        try:
            batch = self._rollout(step, timer)
            record.rollout = rollout_stats(batch, self.ranks)
            with timer.phase("guard"):
                record.trips += self.guard.check("rollout", step, record.rollout_metrics())
            if record.blocking_trip is None:
                self._advantages_and_update(step, batch, record, timer)
            if record.update is not None:
                with timer.phase("guard"):
                    self.policy.check_update(record.update, scan=checkpoint_due)
                    record.trips += self.guard.check("update", step, record.update_metrics())
        except (StopRequested, GenerationCancelled):
            # Nothing of this step reached the weights: put back what it consumed (RNG, streaks) so
            # the saved state resumes exactly as if the step had never begun.
            self.state.rewind(self.mid_step.start)
            self.mid_step = None
            raise StopRequested(self.signals.signum or signal.SIGTERM) from None
        except EngineGaveUp as exc:
            self.verdicts.server_stop(exc, step)  # saves the step's start first

        sync_failed: EngineGaveUp | None = None
        with timer.phase("sync"):
            try:
                record.sync = self.rollouts.sync_weights(self.policy)
            except EngineGaveUp as exc:
                sync_failed = exc  # the trainer's step stands: it is recorded and saved before the stop
        self.state.step, self.state.data_index = step, batch.next_data_index
        if not record.trips:
            self.guard.observe({**record.update_metrics(), **record.sync})
        blocked = record.blocking_trip is not None
        if not blocked and not sync_failed and self.cfg.eval.every_steps and step % self.cfg.eval.every_steps == 0:
            record.evaluation = self._evaluate(f"step {step}")

        record.timings, record.step_s = timer.pop(), time.perf_counter() - started
        record.state = StepState(self.policy.lr, self.state.data_index, self.policy.version, self.guard.rollbacks)
        self._record(step, record, batch)
        self.mid_step = None
        if sync_failed is not None:
            self.verdicts.server_stop(sync_failed, step)
        if not blocked and checkpoint_due:
            self.state.save(healthy=self.guard.healthy)
        self.verdicts.act_on(record.trips, step)
        self.hooks.step_end(step)

    def _rollout(self, step: int, timer: PhaseTimer) -> RolloutBatch:
        """Generated, scored and filtered (now, or queued ahead: grpo.rollout.queue); failures retried, groups
        refilled."""
        with timer.phase("rollout"), progress.phase("rollout"), self.policy.unsharded():
            batch = self.rollouts.take(step, self.state.data_index)
        self.hooks.after_rollout(step)
        return batch

    def _advantages_and_update(self, step: int, batch: RolloutBatch, record: StepRecord, timer: PhaseTimer) -> None:
        with timer.phase("advantages"):
            train_batch = rows_to_train(batch, self.cfg.algo)
            # A signal: a row with a gradient (of non-zero advantage, or any under a KL term; never a masked
            # one) on some rank. Without one the update is skipped, since a step on zero gradients would still
            # move AdamW by its momentum.
            rows, signal_anywhere, masked = self.ranks.sum([len(train_batch), float(bool(train_batch.gradient_rows)),
                                                            len(train_batch.masked_rows)])
            if self.cfg.algo.mask_truncated and rows:
                record.masked_frac = masked / rows
            if rows and signal_anywhere:
                train_batch, record.prepared = self.policy.prepare(train_batch, self.recompute_old)
                record.trips += self.guard.check("offpolicy", step, record.update_metrics())
        all_masked = bool(rows) and masked == rows
        record.no_signal = bool(rows) and not signal_anywhere and not all_masked
        if record.blocking_trip is not None:
            return
        if not rows:
            record.update = UpdateResult(False, skip_reason="no trainable groups")
        elif all_masked:
            record.update = UpdateResult(False, skip_reason=ALL_MASKED)
        elif not signal_anywhere:
            record.update = UpdateResult(False, skip_reason="no learning signal")
        else:
            # Ranks stop together, at a step's end: a signal may not cut one rank's update short.
            check_stop = (lambda: None) if self.ranks.distributed else self.signals.check
            check_stop()
            assert self.mid_step is not None
            self.mid_step.weights_moved = True
            with timer.phase("update"), progress.phase("update"), self.hooks.around_update(step):
                record.update = self.policy.update(train_batch, check_stop=check_stop)

    def _record(self, step: int, record: StepRecord, batch: RolloutBatch) -> None:
        m = record.metrics()
        if self.ranks.main:
            self.advice.after_step(step, record.applied, record.skip_reason, m)
        self.hooks.before_record(step)
        # The line is written before the checkpoint, whose manifest records the log's size: a resume
        # from it keeps this line, and a resume from an older one moves it aside, never duplicates it.
        self.metrics.log(step, m)
        if self.cfg.logging.samples_per_step:
            samples = [{"step": step, **r} for r in sample_records(batch, self.policy.tokenizer,
                                                                   self.cfg.logging.samples_per_step)]
            for sample in samples:
                self.run.logs["samples.jsonl"].append(sample)
            self.metrics.log_samples(step, samples)

    def _evaluate(self, label: str) -> dict[str, Any] | None:
        """Held-out accuracy, recorded; None when a stop signal cut it short (the step itself stands)."""
        try:
            result = evaluate_held_out(self.cfg, self.task, self.engine, self.policy, self.eval_rewards, self.ranks,
                                       label, TrainerState(self.state.step, self.total_steps), self.eval_prompt_limit)
        except (EvaluationFailed, EngineGaveUp) as exc:
            self.verdicts.evaluation_failed(label, exc, self.state.step)
        if result is not None:
            self.state.score = result["accuracy"]
            self.run.logs["eval.jsonl"].append({"step": self.state.step, "label": label, **result})
            self.metrics.log_eval(self.state.step, label, result)
            say(format_table(result, f"held-out evaluation ({label}, step {self.state.step})"))
        return result
