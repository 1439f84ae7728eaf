"""The one way into a training run, for `grpo train`, `grpo quickstart`, the Python API and each rank of
the Ray launcher: `train(cfg)` sets up the ranks, refuses a run that cannot fit in memory, locks the
run directory, installs the hooks the config asks for (`testing.faults`: grpo.faults) and runs the loop,
raising what ends it; a refused first start leaves no run directory behind. `run(config, overrides)`
is the command line's: the same, with every way a run ends turned into its exit status and one line
(grpo.errors)."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo.config import FaultsConfig, RunConfig, load_config, split_overrides
from grpo.console import alert, say
from grpo.console import setup as setup_console
from grpo.dist import Ranks, from_environment
from grpo.errors import (
    EXIT_BAD_INPUT,
    EXIT_CRASH,
    EXIT_OK,
    EXIT_SIGINT,
    START_INTERRUPTED,
    ConfigError,
    DiskError,
    RunDirLocked,
    RunInterrupted,
    RunStopped,
    exit_status,
    one_line,
)
from grpo.hooks import StepHooks
from grpo.policy.models import check_model, resolve_device
from grpo.rundir.resume import record_launch, resume_command
from grpo.rundir.run import RunDir
from grpo.tasks.prompts import check_chat_template
from grpo.tools.plan import device_kind, refusal
from grpo.tools.report import report_line
from grpo.train.expected_gain import quickstart_expectation
from grpo.train.loop import TrainingLoop
from grpo.train.metrics import check_trackers


@dataclass
class OpenedRun:
    """A run past its opening checks: its ranks, its run directory locked, its hooks."""

    cfg: RunConfig
    ranks: Ranks
    run_dir: RunDir
    fresh: bool  # the directory did not exist before this start
    hooks: list[StepHooks]


def hooks_for(cfg: RunConfig, rank: int = 0) -> list[StepHooks]:
    """The hooks the config asks for: grpo.faults when `testing.faults` sets anything."""
    if cfg.testing.faults == FaultsConfig():
        return []
    from grpo import faults

    return [faults.install(cfg, rank)]


def open_run(cfg: RunConfig) -> OpenedRun:
    """The ranks set up, a model that cannot be trained or a run that cannot fit in memory refused, the hooks
    installed, the run directory locked and train.log opened. Raises ConfigError, RunDirLocked, DiskError, ...
    before any work."""
    ranks = from_environment(resolve_device(cfg.model.device, int(os.environ.get("LOCAL_RANK", "0"))))
    # A model that cannot be trained is refused before its run directory exists: a fixed config then
    # starts afresh, not as "a run on other data".
    check_chat_template(check_model(cfg.model), cfg.task)
    check_trackers(cfg.logging)
    refused = refusal(cfg, device_kind(cfg), sharded=ranks.distributed)
    if refused:
        raise ConfigError(refused)
    hooks = hooks_for(cfg, ranks.rank)
    # The lock comes first: a second trainer on this directory must not even open its log. Under
    # torchrun, rank 0 holds it and writes the run directory.
    fresh = not Path(cfg.resolved_run_dir).exists()
    run_dir = RunDir(cfg.resolved_run_dir, cfg.checkpoint, writes=ranks.main).acquire()
    if ranks.main:
        record_launch(run_dir.path, ranks.world)
    setup_console(run_dir.path if ranks.main else None, quiet=not ranks.main)
    return OpenedRun(cfg, ranks, run_dir, fresh, hooks)


def train_opened(opened: OpenedRun, resume_from: str | None = None) -> dict[str, Any]:
    """The loop, run to its end: -> its summary (evaluations before/after training). What ends it early is
    raised; a crash's traceback goes to train.log first, and a first start refused as bad input, or
    interrupted while it builds (before the loop watches for signals), before its first checkpoint leaves no
    run directory behind."""
    run_dir, ranks = opened.run_dir, opened.ranks
    try:
        try:
            loop = TrainingLoop(opened.cfg, resume_from=resume_from, run=run_dir, ranks=ranks, hooks=opened.hooks)
        except KeyboardInterrupt:
            _forget_first_start(opened)
            raise RunInterrupted(START_INTERRUPTED) from None
        return loop.train()
    except Exception as exc:
        status = exit_status(exc)
        if status == EXIT_CRASH:  # a bug or an unexpected failure
            logging.getLogger("grpo").exception("the run crashed")
        if status == EXIT_BAD_INPUT:
            _forget_first_start(opened)
        raise


def _forget_first_start(opened: OpenedRun) -> None:
    """A first start that ends before its first checkpoint leaves no run directory behind."""
    if opened.fresh and opened.ranks.main and not opened.run_dir.checkpoints.list():
        shutil.rmtree(opened.run_dir.path, ignore_errors=True)


def train(cfg: RunConfig, resume_from: str | None = None) -> dict[str, Any]:
    """One run, as `grpo train` makes it, raising what ends it early (the Python API's way in)."""
    return train_opened(open_run(cfg), resume_from)


def run(config: str | None, overrides: list[str]) -> int:
    """`grpo train`: -> the run's exit status, with one line saying how it ended."""
    try:
        config_overrides, resume_from = split_overrides(overrides)
        cfg = load_config(config, config_overrides)
        opened = open_run(cfg)
    except (ConfigError, RunDirLocked, FileNotFoundError, PermissionError, DiskError) as exc:
        alert(one_line(exc))
        return exit_status(exc)
    run_dir, main = opened.run_dir.path, opened.ranks.main
    try:
        summary = train_opened(opened, resume_from)
    except KeyboardInterrupt:  # a second Ctrl-C: recorded in events.jsonl; a one-liner, not a traceback
        alert(f"interrupted twice: exited without saving; resume from the newest checkpoint with: "
              f"{resume_command(run_dir, None)}")
        return EXIT_SIGINT
    except Exception as exc:
        status = exit_status(exc)
        if status == EXIT_CRASH:
            alert(f"{one_line(exc)}\nthe traceback is in {run_dir / 'train.log'}; "
                  f"resume from the newest checkpoint with: {resume_command(run_dir, None)}")
        else:
            alert(one_line(exc))
        if isinstance(exc, RunStopped) and main:
            say(report_line(run_dir, cfg.logging.report))
        return status
    _say_result(cfg, summary)
    if main:
        say(report_line(run_dir, cfg.logging.report))
    return EXIT_OK


def _say_result(cfg: RunConfig, summary: dict) -> None:
    before, after = summary.get("before"), summary.get("after")
    if before and after:
        rows = after.get("scored", after["n"])  # an eval.jsonl line older than "scored" counted every row
        over = f"{rows} problems" if rows == after["n"] else f"the {rows} scored problems of {after['n']}"
        say(f"\nheld-out greedy accuracy on {over}: "
            f"{before['accuracy']:.1%} before -> {after['accuracy']:.1%} after "
            f"({100 * (after['accuracy'] - before['accuracy']):+.1f} points)")
        expectation = quickstart_expectation(cfg, resolve_device(cfg.model.device).type)
        if expectation:
            say(expectation)
    say(f"run directory: {cfg.resolved_run_dir}")
