"""`run(config, overrides) -> exit status`: one training run, start to end. `grpo train`, `grpo quickstart`
and each rank of the Ray launcher come here; every way a run ends becomes its exit status and one line
(grpo.errors)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from grpo.config import RunConfig, load_config, split_overrides
from grpo.console import alert, say
from grpo.console import setup as setup_console
from grpo.dist import from_environment
from grpo.errors import EXIT_BAD_INPUT, EXIT_CRASH, EXIT_OK, ConfigError, DiskError, RunDirLocked, RunStopped, exit_status, one_line
from grpo.train.loop import TrainingLoop
from grpo.tools.plan import device_kind, refusal
from grpo.policy.models import resolve_device
from grpo.tools.report import report_line
from grpo.rundir.resume import resume_command
from grpo.rundir.run import RunDir


def run(config: str | None, overrides: list[str]) -> int:
    try:
        config_overrides, resume_from = split_overrides(overrides)
        cfg = load_config(config, config_overrides)
        ranks = from_environment(resolve_device(cfg.model.device, int(os.environ.get("LOCAL_RANK", "0"))))
        if not ranks.distributed:  # sharded ranks hold a share each: the plan models one process
            refused = refusal(cfg, device_kind(cfg))
            if refused:
                raise ConfigError(refused)
        # The lock comes first: a second trainer on this directory must not even open its log. Under
        # torchrun, rank 0 holds it and writes the run directory.
        fresh = not Path(cfg.resolved_run_dir).exists()
        run_dir = RunDir(cfg.resolved_run_dir, cfg.checkpoint, writes=ranks.main).acquire()
    except (ConfigError, RunDirLocked, FileNotFoundError, PermissionError, DiskError) as exc:
        alert(one_line(exc))
        return exit_status(exc)
    setup_console(run_dir.path if ranks.main else None, quiet=not ranks.main)
    try:
        summary = TrainingLoop(cfg, resume_from=resume_from, run=run_dir, ranks=ranks).train()
    except Exception as exc:
        status = exit_status(exc)
        if status == EXIT_CRASH:  # a bug or an unexpected failure: the traceback goes to train.log too
            logging.getLogger("grpo").exception("the run crashed")
            alert(f"{one_line(exc)}\nthe traceback is in {run_dir.path / 'train.log'}; "
                  f"resume from the newest checkpoint with: {resume_command(run_dir.path, None)}")
        else:
            alert(one_line(exc))
        if status == EXIT_BAD_INPUT and fresh and ranks.main and not run_dir.checkpoints.list():
            shutil.rmtree(run_dir.path, ignore_errors=True)  # a refused first start leaves no skeleton behind
        if isinstance(exc, RunStopped) and ranks.main:
            say(report_line(run_dir.path, cfg.logging.report))
        return status
    _say_result(cfg, summary)
    if ranks.main:
        say(report_line(run_dir.path, cfg.logging.report))
    return EXIT_OK


def _say_result(cfg: RunConfig, summary: dict) -> None:
    before, after = summary.get("before"), summary.get("after")
    if before and after:
        say(f"\nheld-out greedy accuracy on {after['n']} problems: "
            f"{before['accuracy']:.1%} before -> {after['accuracy']:.1%} after "
            f"({100 * (after['accuracy'] - before['accuracy']):+.1f} points)")
    say(f"run directory: {cfg.resolved_run_dir}")
