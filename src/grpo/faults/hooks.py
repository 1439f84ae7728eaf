"""`testing.faults` as the run's hooks (grpo.hooks): the rollout and server faults wrap the
collector and the server backend as they are built; the update's and the process's act at the step's
seams: a NaN loss (the input embeddings' output made NaN for the update, as an overflow would), a rank
killed once its batch is in (SIGKILL, once per run), the trainer stopped (SIGSTOP) just before it
records a step so a test can attach to it, and a crash once a step is recorded."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grpo.config import FaultsConfig
from grpo.faults.rollout import FaultyCollector
from grpo.faults.schedule import Schedule
from grpo.faults.server import ServerFaults
from grpo.hooks import RunView, StepHooks
from grpo.rollout.collector import RolloutCollector
from grpo.rollout.server.backend import Backend


class Faults(StepHooks):
    rehearses_faults = True

    def __init__(self, cfg: FaultsConfig, seed: int = 0, rank: int = 0) -> None:
        self.cfg, self.rank = cfg, rank
        self.schedule = Schedule(cfg, seed, rank)
        self.server: ServerFaults | None = None  # with a server engine: its backend
        self.model = None
        self.run_dir: Path | None = None

    def wrap_backend(self, backend: Backend) -> Backend:
        self.server = ServerFaults(backend, self.schedule)
        return self.server

    def wrap_collector(self, collector: RolloutCollector) -> RolloutCollector:
        return FaultyCollector(collector, self.schedule, self.server)

    def built(self, run: RunView) -> None:
        self.model, self.run_dir = run.model, run.run_dir
        if self.server is not None:
            self.server.engine = run.server_engine

    def after_rollout(self, step: int) -> None:
        """SIGKILL this rank, once per run: a marker in the run directory keeps the group restarted
        (torchrun --max-restarts, the Ray launcher) from killing it again."""
        if self.cfg.kill_rank_at_step != [self.rank, step]:
            return
        marker = self.run_dir / f".fault-kill-rank{self.rank}-step{step}"
        if marker.exists():
            return
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)

    @contextmanager
    def around_update(self, step: int) -> Iterator[None]:
        on_rank = self.cfg.nan_loss_on_rank is None or self.cfg.nan_loss_on_rank == self.rank
        if not (on_rank and self.schedule.fires("nan_loss", step)):
            yield
            return
        handle = self.model.get_input_embeddings().register_forward_hook(lambda module, args, out: out * float("nan"))
        try:
            yield
        finally:
            handle.remove()

    def before_record(self, step: int) -> None:
        if self.cfg.stop_before_record_at_step == step:
            os.kill(os.getpid(), signal.SIGSTOP)

    def step_end(self, step: int) -> None:
        self.schedule.step_done(step)
        if self.cfg.crash_at_step == step:
            raise RuntimeError(f"injected crash after step {step} (testing.faults.crash_at_step)")
