"""Deliberate failures from the config, so users and tests can rehearse what the guard does.

Every fault goes through this injector, at named points of a step: `before_rollout` (arms the server
engine's failures), `corrupt_completions` and `wrap_reward` (inside the collector), `after_rollout`
(a rank killed mid-step), `nan_loss` (inside the update), `before_record` (the process stops itself, so
a test can attach to it), and `after_step` (a crash once the step is recorded).

Each fault of the rollout and update fires at most once per step number in a process: a step replayed
after a rollback runs clean, as it would after a transient outage.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

from grpo.config import FaultsConfig
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus
from grpo.rewards import RewardFn


class InjectedFault(RuntimeError):
    pass


class FaultInjector:
    def __init__(self, cfg: FaultsConfig, seed: int = 0, rank: int = 0) -> None:
        self.cfg = cfg
        self.rank = rank
        self.rng = random.Random(seed)
        self.done: set[int] = set()

    def _active(self, steps: list[int], step: int) -> bool:
        return step in steps and step not in self.done

    def step_done(self, step: int) -> None:
        self.done.add(step)

    def before_rollout(self, step: int, engine: RolloutEngine) -> None:
        engine.arm_faults(self.server_faults(step))

    def after_rollout(self, step: int, run_dir: Path) -> None:
        self.kill_rank(step, run_dir)

    def before_record(self, step: int) -> None:
        """Stop this process (SIGSTOP) just before the step is recorded: a test attaches to it there."""
        if self.cfg.stop_before_record_at_step == step:
            os.kill(os.getpid(), signal.SIGSTOP)

    def after_step(self, step: int) -> None:
        if self.cfg.crash_at_step == step:
            raise RuntimeError(f"injected crash after step {step} (faults.crash_at_step)")

    def corrupt_completions(self, completions: list[Completion], step: int) -> list[Completion]:
        if self._active(self.cfg.empty_rollouts_at_steps, step):
            return [Completion([], [], "", "stop", SampleStatus.EMPTY, "injected empty rollout") for _ in completions]
        if self._active(self.cfg.fail_rollouts_at_steps, step):
            return [
                Completion([], [], "", "error", SampleStatus.FAILED, "injected rollout failure")
                if self.rng.random() < self.cfg.fail_fraction
                else c
                for c in completions
            ]
        return completions

    def wrap_reward(self, fn: RewardFn, step: int) -> RewardFn:
        if self._active(self.cfg.reward_raises_at_steps, step):

            def raising(completions: list[str], **columns: list) -> list[float | None]:
                raise InjectedFault("injected reward function failure")

            return raising
        if self._active(self.cfg.zero_reward_at_steps, step):
            return lambda completions, **columns: [0.0] * len(completions)
        return fn

    def nan_loss(self, step: int) -> bool:
        on_rank = self.cfg.nan_loss_on_rank is None or self.cfg.nan_loss_on_rank == self.rank
        return on_rank and self._active(self.cfg.nan_loss_at_steps, step)

    def kill_rank(self, step: int, run_dir: Path) -> None:
        """SIGKILL this rank mid-step, once per run: a marker in the run directory keeps the
        restarted group (torchrun --max-restarts) from killing it again."""
        target = self.cfg.kill_rank_at_step
        if not target or target != [self.rank, step]:
            return
        marker = Path(run_dir) / f".fault-kill-rank{self.rank}-step{step}"
        if marker.exists():
            return
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)

    def server_faults(self, step: int) -> set[str]:
        """Server failures to arm for this step's rollout and sync (the server engine carries them out)."""
        lists = {
            "kill_server": self.cfg.kill_server_at_steps, "kill_server_actor": self.cfg.kill_server_actor_at_steps,
            "hang_server": self.cfg.hang_server_at_steps,
            "garbage_server": self.cfg.garbage_server_at_steps,
            "skip_weight_sync": self.cfg.skip_weight_sync_at_steps,
            "stale_head_sync": self.cfg.stale_head_sync_at_steps, "no_cache_reset": self.cfg.no_cache_reset_at_steps,
        }
        return {name for name, steps in lists.items() if self._active(steps, step)}
