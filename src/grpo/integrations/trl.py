"""grpo's guard inside TRL's GRPOTrainer:

    from grpo.integrations.trl import GrpoGuardCallback
    trainer = GRPOTrainer(..., callbacks=[GrpoGuardCallback()])

At each logged step (`on_log`) the callback puts TRL's metrics into a `RunRecord` under the doctor's
names and judges it as `grpo watch` judges a live run: the doctor's timeline and causes, so a streak
trips after its patience (`grpo.checks`, in steps: at TRL's default logging_steps=10, a patience of
10 steps is 3 logged steps, 30 steps). At the first problem it has the
trainer save a checkpoint where it stopped (`control.should_save`), stops training
(`control.should_training_stop`), and writes the diagnosis to OUTPUT_DIR/grpo-guard.json and the
log, with the `resume_from_checkpoint` to use: the newest checkpoint saved before the first bad step,
not the one it just saved (that one holds the bad steps' updates; it is kept to look at).

A run the doctor finds healthy is never stopped. Neither torch nor TRL nor transformers is imported
until `GrpoGuardCallback` is first looked up: `import grpo.integrations.trl` is cheap anywhere.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

REPORT = "grpo-guard.json"
log = logging.getLogger(__name__)

__all__ = ["GrpoGuardCallback", "REPORT"]


def __getattr__(name: str) -> Any:
    if name == "GrpoGuardCallback":
        callback = _build_callback()
        globals()[name] = callback
        return callback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _build_callback() -> type:
    from transformers import TrainerCallback

    from grpo.tools.doctor import judge, render
    from grpo.tools.doctor import trl as reader
    from grpo.tools.doctor.record import Evidence, RunRecord

    class GrpoGuardCallback(TrainerCallback):
        """Stops a GRPOTrainer run at the first problem grpo's doctor finds in its logged steps.

        stop: stop training at a problem (False: only report it). save: save a checkpoint where it
        stopped. report_path: where the diagnosis goes (default OUTPUT_DIR/grpo-guard.json)."""

        def __init__(self, stop: bool = True, save: bool = True, report_path: str | os.PathLike | None = None):
            self.stop, self.save = stop, save
            self.report_path = Path(report_path) if report_path is not None else None
            self.record: RunRecord | None = None
            self.diagnosis = None
            self.tripped_at: int | None = None
            self.saved_checkpoint: str | None = None
            self.earlier: dict[str, Any] | None = None  # the report of a stop this run resumed from

        def on_train_begin(self, args, state, control, **kwargs):
            self.record = RunRecord("trl", str(args.output_dir), running=True)
            self.record.total_steps = state.max_steps or None
            for entry in state.log_history:  # a resumed run's earlier steps
                if isinstance(entry.get("step"), int):
                    self._put(args, entry["step"], entry)
            path = self.report_path or Path(args.output_dir) / REPORT
            self.earlier = _read_report(path) if state.global_step else None  # a stop this run resumes from
            every = max(1, int(getattr(args, "logging_steps", 1) or 1))
            if state.is_world_process_zero and every > 1:
                log.warning("grpo guard: TRL logs every %d steps, so a problem is seen only at the next logged step "
                            "(up to %d steps late) and a check trips after %d logged steps at least; the checkpoint "
                            "it names is one saved before the logged step ahead of the first bad one. "
                            "logging_steps=1 stops soonest", every, every - 1, 3)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.record is None or self.diagnosis is not None or not logs or "train_runtime" in logs:
                return control
            step = state.global_step
            self._put(args, step, logs)
            if step not in self.record.metrics:
                return control  # nothing the doctor reads (an evaluation's logs)
            self.record.checkpoints = reader.checkpoints_in(Path(args.output_dir))
            diagnosis = judge(self.record)
            if diagnosis.status != "problem":
                if self.earlier is not None and state.is_world_process_zero:
                    self._report_resumed(args, step, diagnosis)  # the stop before is history now
                return control
            self.diagnosis, self.tripped_at = diagnosis, step
            if self.stop:
                control.should_training_stop = True
                control.should_save = control.should_save or self.save
            if state.is_world_process_zero:  # every rank judges the same gathered metrics and stops
                self._report(args)
                log.warning("grpo guard: %s at step %d\n%s", "stopping the run" if self.stop else "a problem",
                            step, "\n".join(render(diagnosis, self.record)))
            return control

        def on_save(self, args, state, control, **kwargs):
            if self.diagnosis is not None and state.global_step == self.tripped_at:
                self.saved_checkpoint = str(Path(args.output_dir) / f"checkpoint-{state.global_step}")
                if state.is_world_process_zero:
                    self._report(args)
            return control

        def _put(self, args, step: int, entry: dict[str, Any]) -> None:
            shown = ", ".join(f"{k}: {entry[k]:.4g}" for k in ("loss", "grad_norm", "reward", "reward_std",
                                                                "frac_reward_zero_std")
                              if isinstance(entry.get(k), (int, float)))
            where = Path(args.output_dir) / f"checkpoint-{step}" / reader.STATE
            reader.put_entry(self.record, step, entry, Evidence(f"{where} (log_history)", 0, f"step {step}: {shown}"))

        def _report_resumed(self, args, step: int, diagnosis) -> None:
            earlier, self.earlier = self.earlier, None
            said = (f"stopped at step {earlier.get('stopped_at_step')} with {earlier.get('cause')} from step "
                    f"{earlier.get('first_bad_step')}; resumed, healthy at step {step}")
            self._write(args, {"stopped": False, "status": diagnosis.status, "resumed": True, "at_step": step,
                               **diagnosis.to_json(), "history": [said] + list(earlier.get("history") or [])})

        def _report(self, args) -> None:
            d = self.diagnosis
            report = {"stopped": self.stop, "stopped_at_step": self.tripped_at, **d.to_json(),
                      "resume_from_checkpoint": d.last_good_checkpoint,
                      "checkpoint_saved_at_stop": self.saved_checkpoint}
            self._write(args, report)

        def _write(self, args, report: dict[str, Any]) -> None:
            path = self.report_path or Path(args.output_dir) / REPORT
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(report, indent=2) + "\n")
            os.replace(tmp, path)

    def _read_report(path: Path) -> dict[str, Any] | None:
        """The report a stop left, when it says the run was stopped (anything else: none)."""
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            return None
        return report if isinstance(report, dict) and report.get("stopped") else None

    GrpoGuardCallback.__module__, GrpoGuardCallback.__qualname__ = __name__, "GrpoGuardCallback"
    return GrpoGuardCallback
