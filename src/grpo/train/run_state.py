"""Where a run stands, and its one way in and out of the run directory: start (fresh, resumed from a
named checkpoint, or recovered from the newest valid one), save, restore, and the records of how a run
ended when it did not finish (a signal, a crash).

The state is the step reached, the data position, the learning-rate scale left by rollbacks, the last
evaluation score, the RNG streams, the guard's streaks and the rollout queue's batches
(grpo.rollout.queue); with the policy's weights and optimizer it is all a checkpoint holds, so a resume
continues exactly.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from grpo.config import RunConfig, config_yaml, to_dict
from grpo.dist import Ranks
from grpo.errors import ConfigError, DiskError, RunInterrupted, is_disk_error
from grpo.guard.breakers import Guard
from grpo.policy.policy import Policy
from grpo.rollout.queue import RolloutQueue
from grpo.rundir.checkpoints import CheckpointInfo, CheckpointInvalid, capture_rng, restore_rng
from grpo.rundir.direct import Written
from grpo.rundir.files import read_json
from grpo.rundir.identity import (
    FINGERPRINT_FILE,
    REWARD_FILE,
    check_same_run,
    data_fingerprint,
    differences,
    is_identity,
    may_change,
    reward_changes,
    reward_fingerprint,
)
from grpo.rundir.resume import resume_command
from grpo.rundir.run import RunDir
from grpo.train.signals import StopRequested

log = logging.getLogger(__name__)


class RunState:
    def __init__(self, cfg: RunConfig, run: RunDir, policy: Policy, guard: Guard, ranks: Ranks,
                 rollouts: RolloutQueue) -> None:
        self.cfg, self.run, self.policy, self.guard, self.ranks = cfg, run, policy, guard, ranks
        self.rollouts = rollouts
        self.checkpoints, self.events = run.checkpoints, run.events
        self.step, self.data_index, self.lr_scale, self.score = 0, 0, 1.0, None
        self.last_save = time.monotonic()
        self.last_save_s: float | None = None  # how long the last save took, to judge a save at a signal

    # --- start -----------------------------------------------------------------------------------

    def start(self, resume_from: str | None) -> None:
        if resume_from or (self.cfg.recover == "auto" and self.checkpoints.list()):
            check_same_run(self.run.path, self._saved_config(), self.cfg, to_dict(self.cfg))
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
            self.restore(info)
        elif self.cfg.recover == "auto" and (candidates := self.checkpoints.list()):
            info = self.restore_newest(candidates)
            if info is None:
                raise ConfigError(f"no checkpoint in {self.checkpoints.root} loads: all {len(candidates)} were "
                                  f"invalid and are now in {self.checkpoints.root / 'invalid'} (see events.jsonl); "
                                  "start over with a new run_dir")
        elif self.checkpoints.list():
            raise ConfigError(f"{self.run.path} already has checkpoints and recover=off: pick a new run_dir")
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
            self.save(healthy=True)
        # Only now, with the start done, does the config on disk change: a failed resume leaves the
        # run's config (and the resume command that names it) as it was.
        self._write_config()

    def _saved_config(self) -> dict[str, Any] | None:
        try:
            return yaml.safe_load(self.run.config_path.read_text()) or {}
        except (yaml.YAMLError, OSError, UnicodeDecodeError):
            return None

    def _write_config(self) -> None:
        # resume_with_changes acts on this start only: the saved config never carries it to the next
        cfg = replace(self.cfg, resume_with_changes=False)
        saved = self._saved_config() if self.run.config_path.is_file() else None
        if saved is not None:
            changed = {**differences(saved, to_dict(cfg)), **reward_changes(self.run.path, cfg.task)}
            if changed:
                self.events.record("config_changed", self.step,
                                   f"{len(changed)} config keys differ from the saved run", changed=changed)
                hyper = [k for k in changed if not may_change(k) and not is_identity(k)]
                if hyper:
                    log.warning("resumed with changed settings: %s", ", ".join(
                        f"{k} {changed[k][0]} -> {changed[k][1]}" for k in hyper))
        self.run.write(self.run.config_path, config_yaml(cfg))
        self.run.write(self.run.path / FINGERPRINT_FILE, json.dumps(data_fingerprint(cfg.task), indent=1) + "\n")
        self.run.write(self.run.path / REWARD_FILE, json.dumps(reward_fingerprint(cfg.task), indent=1) + "\n")

    # --- the state in memory -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {"step": self.step, "data_index": self.data_index, "lr_scale": self.lr_scale, "score": self.score,
                "rng": capture_rng(), "guard": self.guard.state_dict()}

    def rewind(self, snapshot: dict[str, Any]) -> None:
        """Back to a snapshot: what an abandoned step consumed (RNG, streaks) is put back."""
        self.step, self.data_index, self.lr_scale, self.score = (
            snapshot["step"], snapshot["data_index"], snapshot["lr_scale"], snapshot["score"])
        restore_rng(snapshot["rng"])
        self.guard.load_state_dict(snapshot["guard"])

    def evaluation(self, label: str) -> dict[str, Any] | None:
        """The last completed evaluation recorded under `label` in eval.jsonl (it survives resumes)."""
        records = [r for r in self.run.logs["eval.jsonl"].read()[0] if r.get("label") == label and "accuracy" in r]
        return {k: v for k, v in records[-1].items() if k not in ("step", "label")} if records else None

    # --- checkpoints -------------------------------------------------------------------------------

    def restore(self, info: CheckpointInfo, queued: bool = True) -> None:
        """Every rank loads the same checkpoint (its own shards of the policy, resharded to this world
        size) and rank 0's loop state; with the batches it queued ahead, unless `queued` is False (a
        rollback: those may hold the batch that tripped the breaker)."""
        state = self.checkpoints.load_state(info)
        try:
            self.policy.load_state(info.path)
        except ValueError as exc:
            raise ConfigError(f"checkpoint {info.path} does not fit model.name={self.cfg.model.name}: {exc}") from None
        self.policy.load_state_dict(state["policy"])
        self.rewind(state)
        discarded = self.rollouts.load_state_dict(state.get("rollouts"), self.step, keep=queued)
        if discarded:
            self.events.record("rollouts_discarded", self.step, f"{len(discarded)} queued batch(es) "
                               f"discarded: generated by weights the restore replaced", steps=discarded)

    def restore_newest(self, candidates: list[CheckpointInfo], queued: bool = True) -> CheckpointInfo | None:
        """Restore the newest checkpoint that verifies; invalid ones are moved aside and recorded."""
        for info in reversed(candidates):
            try:
                self.checkpoints.verify(info)
                self.restore(info, queued)
                return info
            except CheckpointInvalid as exc:
                moved = self.checkpoints.quarantine(info.path, exc.reason)
                self.events.record("checkpoint_invalid", info.step, str(exc), moved_to=str(moved))
                log.warning("%s; moved to %s, trying an older one", exc, moved)
        return None

    def checkpoint_due(self, step: int) -> bool:
        every, minutes = self.cfg.checkpoint.every_steps, self.cfg.checkpoint.every_minutes
        return bool((every and step % every == 0) or (minutes and time.monotonic() - self.last_save > minutes * 60))

    def save(self, healthy: bool = True) -> None:
        started = time.perf_counter()
        state = {**self.snapshot(), "policy": self.policy.state_dict(), "ranks": self.ranks.world,
                 "rollouts": self.rollouts.state_dict(self.step)}

        def write(directory: Path) -> dict[Path, Written]:
            self.policy.save_model(directory / "model")
            return self.policy.save_state(directory / "policy")

        info = self.checkpoints.save(self.step, write, state, healthy=healthy, score=self.score,
                                     logs=self.run.log_offsets(), ranks=self.ranks)
        self.last_save = time.monotonic()
        self.last_save_s = time.perf_counter() - started
        size = sum(f["size"] for f in info.meta.get("files", {}).values())
        self.events.record("checkpoint", self.step, f"saved {info.path.name}", healthy=healthy, bytes=size,
                           seconds=round(time.perf_counter() - started, 3), ranks=self.ranks.world)

    def save_final(self, healthy: bool | None = None) -> None:
        """Save the current step unless the newest checkpoint holds it; `healthy` by default: no breaker
        part-way to tripping and finite weights."""
        latest = self.checkpoints.latest()
        if latest is None or latest.step != self.step:
            self.save(healthy=self.guard.healthy and self.policy.params_finite() if healthy is None else healthy)

    # --- how a run ended, when it did not finish -----------------------------------------------------

    def interrupted(self, stop: StopRequested, received_at: float | None = None) -> RunInterrupted:
        """Save where the run stands (the last whole step), unless the save would outlast the grace a
        scheduler gives after its signal and a checkpoint exists to resume from; say how to go on."""
        name = signal.Signals(stop.signum).name
        command = resume_command(self.run.path, None)
        latest = self.checkpoints.latest()
        grace = self.cfg.checkpoint.stop_grace_s
        waited = time.monotonic() - received_at if received_at is not None else 0.0
        if (grace and latest is not None and latest.step != self.step and self.last_save_s is not None
                and waited + self.last_save_s > grace):
            redo = self.step - latest.step
            self.events.record("interrupted", self.step, f"{name}: not saved (a save takes {self.last_save_s:.1f}s, "
                               f"{waited:.1f}s of checkpoint.stop_grace_s={grace:g} gone); {latest.path.name} "
                               f"resumes, {redo} step(s) to redo", signal=name, saved=False,
                               resume_from=str(latest.path), resume_command=command)
            log.warning("%s: not saved, to stop within %gs; %s resumes (%d step(s) to redo): %s", name, grace,
                        latest.path.name, redo, command)
            return RunInterrupted(f"interrupted by {name}: stopped without saving step {self.step} to stay within "
                                  f"checkpoint.stop_grace_s={grace:g}; {latest.path.name} resumes exactly, redoing "
                                  f"{redo} step(s); resume with: {command}")
        self.save_final()
        self.events.record("interrupted", self.step, f"{name}: state saved at step {self.step}", signal=name,
                           saved=True, resume_command=command)
        log.warning("%s: saved step %d; resume with: %s", name, self.step, command)
        return RunInterrupted(f"interrupted by {name}: state saved at step {self.step}; resume with: {command}")

    def abandoned(self) -> None:
        """A second SIGINT: the user would not wait for the save. Recorded as an interruption, not a crash."""
        latest = self.checkpoints.latest()
        try:
            self.events.record("interrupted", self.step, "SIGINT twice: exited without saving; "
                               f"{latest.path.name if latest else 'no checkpoint'} resumes", signal="SIGINT",
                               saved=False, resume_command=resume_command(self.run.path, None))
        except OSError as record_error:
            log.error("could not record the interruption in %s: %s", self.events.path, record_error)

    def crashed(self, exc: BaseException) -> BaseException:
        """Record a crash without letting the record hide it; a disk error becomes one that names the disk."""
        if is_disk_error(exc):
            self.run.release_reserve()  # room for the event below
            exc = exc if isinstance(exc, DiskError) else DiskError(getattr(exc, "filename", None) or self.run.path, exc)
        try:
            self.events.record("crash", self.step + 1, f"{type(exc).__name__}: {exc}")
        except OSError as record_error:
            log.error("could not record the crash in %s: %s", self.events.path, record_error)
        return exc

