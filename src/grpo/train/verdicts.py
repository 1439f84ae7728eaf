"""Carrying out the guard's verdicts: the guard decides (grpo.guard.breakers), and this acts on the
decision: record the trips and tell the user's hooks, roll back to a healthy checkpoint, pause until
the user says go on, or stop with a report that names the last good checkpoint and the resume command.
A server that cannot go on is turned into a trip the guard decides on like any other.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, NoReturn

from grpo.config import GuardConfig
from grpo.dist import Ranks
from grpo.errors import RunStopped
from grpo.evaluate import EvaluationFailed
from grpo.guard.breakers import Guard, Trip, Verdict
from grpo.rollout.server.supervisor import ServerGaveUp
from grpo.rollout.types import EngineGaveUp
from grpo.rundir.resume import write_stop_report
from grpo.rundir.run import RunDir
from grpo.train.run_state import RunState
from grpo.train.signals import SignalWatch

log = logging.getLogger(__name__)


# Breakers of failures outside the model (_breaker_of): a stop for them saves a healthy checkpoint.
OUTSIDE_THE_MODEL = ("inference_server", "weight_sync", "evaluation")


class VerdictActions:
    def __init__(self, cfg: GuardConfig, guard: Guard, state: RunState, run: RunDir, ranks: Ranks,
                 signals: SignalWatch, save_before_stop: Callable[[bool], None] | None = None) -> None:
        """`save_before_stop(healthy)`: saves where the run stands before a stop's report names the
        checkpoints (the loop's: it knows whether a step is under way)."""
        self.cfg, self.guard, self.state, self.run, self.ranks = cfg, guard, state, run, ranks
        self.signals = signals  # a stop signal ends a pause at once
        self.save_before_stop = save_before_stop

    def act_on(self, trips: list[Trip], step: int) -> None:
        """Record this step's trips, then carry out the guard's verdict on them."""
        self.record(trips, step)
        verdict = self.guard.decide(trips, self.run.checkpoints.last_good())
        if verdict.action == "stop":
            self.stop(verdict)
        elif verdict.action == "pause":
            self.pause(verdict)
        elif verdict.action == "rollback":
            self.rollback(verdict)

    def record(self, trips: list[Trip], step: int) -> None:
        for trip in trips:
            event = self.run.events.record("trip", step, trip.message, breaker=trip.breaker, action=trip.action,
                                           **trip.evidence)
            log.warning("step %d: breaker %s tripped (%s): %s", step, trip.breaker, trip.action, trip.message)
            for error in notify(event, self.cfg.on_trip_command, self.cfg.on_trip_webhook):
                self.run.events.record("notify_failed", step, error)

    def rollback(self, verdict: Verdict) -> None:
        trip, target = verdict.trip, verdict.rollback_to
        assert trip is not None and target is not None
        checkpoints = self.run.checkpoints
        good = self.state.restore_newest([i for i in checkpoints.list() if i.healthy and i.step <= target.step],
                                         queued=False)
        if good is None:  # the weights may be half restored: nothing of them is saved
            self.stop(Verdict("stop", trip, f"{trip.message}; not rolling back: no healthy checkpoint loads"),
                      save=False)
        self.state.lr_scale *= self.cfg.rollback_lr_factor
        checkpoints.discard_after(good.step)
        # The steps after the checkpoint will be run again: their lines move aside, as a resume's do,
        # so each step is logged once.
        cut = self.run.rewind_logs(good.log_offsets, through_step=good.step)
        self.run.events.record("rollback", trip.step, f"rolled back to step {good.step} after {trip.breaker}",
                               checkpoint=str(good.path), to_step=good.step, lr_factor=self.cfg.rollback_lr_factor,
                               lr_scale=self.state.lr_scale, rollbacks=self.guard.rollbacks, log_lines_replayed=cut)
        log.warning("rolled back to %s (lr x%g)", good.path, self.state.lr_scale)

    def pause(self, verdict: Verdict) -> None:
        trip = verdict.trip
        assert trip is not None
        pause_file = self.run.paused_path
        self.run.write(pause_file, f"{trip.message}\nDelete this file to continue the run.\n")
        self.ranks.barrier()  # every rank waits on the same file
        self.run.events.record("pause", trip.step, f"paused: delete {pause_file} to continue", breaker=trip.breaker)
        log.warning("paused after %s: delete %s to continue", trip.breaker, pause_file)
        if not wait_while_paused(pause_file, self.cfg.pause_poll_s, self.cfg.pause_timeout_s, self.signals.event):
            self.signals.check()
            reason = f"{trip.message}; paused {self.cfg.pause_timeout_s:g}s with no one resuming"
            self.stop(Verdict("stop", trip, reason))
        self.run.events.record("unpause", trip.step, "resumed after pause")

    def stop(self, verdict: Verdict, save: bool = True) -> NoReturn:
        trip = verdict.trip
        assert trip is not None
        if save and self.save_before_stop is not None:
            # A stop for a failure outside the model leaves it as good as it was; a breaker's, not.
            self.save_before_stop(trip.breaker in OUTSIDE_THE_MODEL and self.guard.healthy)
        good = self.run.checkpoints.last_good()
        cause = verdict.reason or trip.message
        report = write_stop_report(self.run.path, f"{trip.breaker}: {cause}", trip.step, trip.evidence,
                                   good.path if good else None, write=self.ranks.main)
        self.run.events.record("stop", trip.step, cause, report=report)
        raise RunStopped(f"run stopped at step {trip.step} by breaker {trip.breaker}: {cause}\n"
                         f"last good checkpoint: {report['last_good_checkpoint']}\n"
                         f"resume with: {report['resume_command']}", report)

    def server_stop(self, exc: EngineGaveUp, step: int) -> NoReturn:
        """The server side cannot go on: the guard turns that into a stop with its diagnosis."""
        self.act_on([Trip(*_breaker_of(exc), step, str(exc), _evidence_of(exc))], step)
        raise AssertionError("a stop verdict always stops")

    def evaluation_failed(self, label: str, exc: EvaluationFailed | EngineGaveUp,
                          step: int) -> NoReturn:
        """An evaluation that cannot complete has no accuracy: it is recorded as failed (never as 0%)
        and stops the run (exit 3); resuming evaluates again."""
        self.run.logs["eval.jsonl"].append({"step": step, "label": label, "status": "failed", "error": str(exc)})
        message = f"held-out evaluation ({label}) failed: {exc}"
        self.act_on([Trip(*_breaker_of(exc), step, message, _evidence_of(exc))], step)
        raise AssertionError("a stop verdict always stops")


def _breaker_of(exc: Exception) -> tuple[str, str]:
    """-> (the breaker a failure outside the step's metrics trips, its action: always a stop)."""
    if isinstance(exc, EvaluationFailed):
        return "evaluation", "stop"
    return ("inference_server" if isinstance(exc, ServerGaveUp) else "weight_sync"), "stop"


def _evidence_of(exc: Exception) -> dict[str, Any]:
    return exc.diagnosis if isinstance(exc, ServerGaveUp) else exc.evidence  # type: ignore[attr-defined]


def notify(event: dict[str, Any], command: str | None, webhook: str | None) -> list[str]:
    """Call the user's hook(s) with the event as JSON; return errors instead of raising (a hook must
    never take the run down), so the caller can record them."""
    payload = json.dumps(event, default=str)
    errors = []
    if command:
        try:
            subprocess.run(command, shell=True, input=payload, text=True, timeout=30, check=True)
        except (subprocess.SubprocessError, OSError) as exc:
            errors.append(f"on_trip_command failed: {exc}")
    if webhook:
        request = urllib.request.Request(webhook, data=payload.encode(), headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except OSError as exc:
            errors.append(f"on_trip_webhook failed: {exc}")
    return errors


def wait_while_paused(pause_file: Path, poll_s: float, timeout_s: float,
                      stop: threading.Event | None = None) -> bool:
    """Block until the user deletes `pause_file` (True), or the timeout passes or `stop` is set (False)."""
    stop = stop or threading.Event()
    deadline = time.monotonic() + timeout_s
    while pause_file.exists():
        if time.monotonic() >= deadline or stop.is_set():
            return False
        stop.wait(min(poll_s, max(deadline - time.monotonic(), 0.0)))
    return True
