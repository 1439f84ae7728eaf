"""Rollout faults, around the collector: each step's collection generates through the engine with its
completions corrupted (failed or empty samples, as a dead server's or a broken model's would be), and
scores with reward functions that raise or give 0. The collector itself knows nothing of them."""

from __future__ import annotations

from typing import Any

from grpo.faults.schedule import Schedule
from grpo.faults.server import ServerFaults
from grpo.rewards import Reward
from grpo.rollout.collector import RolloutBatch, RolloutCollector
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus, SamplingParams


class InjectedFault(RuntimeError):
    pass


class FaultyCollector:
    """A collector whose collections carry their step's faults; otherwise the collector it wraps."""

    def __init__(self, inner: RolloutCollector, schedule: Schedule, server: ServerFaults | None) -> None:
        self.inner, self.schedule, self.server = inner, schedule, server

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def using(self, engine: RolloutEngine | None = None, rewards: list[Reward] | None = None) -> FaultyCollector:
        return FaultyCollector(self.inner.using(engine, rewards), self.schedule, self.server)

    def collect(self, step: int, data_index: int, revision: int | None = None) -> RolloutBatch:
        if self.server is not None:
            self.server.arm(step)
        engine = StepGeneration(self.inner.engine, step, self.schedule, self.server)
        rewards = [Reward(r.name, self._reward(r.fn, step), r.weight) for r in self.inner.rewards]
        return self.inner.using(engine, rewards).collect(step, data_index, revision)

    def _reward(self, fn, step: int):
        if self.schedule.fires("reward_raises", step):

            def raising(completions: list[str], **columns: list) -> list[float | None]:
                raise InjectedFault("injected reward function failure")

            return raising
        if self.schedule.fires("zero_reward", step):
            return lambda completions, **columns: [0.0] * len(completions)
        return fn


class StepGeneration:
    """The engine as one step's collection sees it: the server's armed failures fire in its first call."""

    def __init__(self, engine: RolloutEngine, step: int, schedule: Schedule, server: ServerFaults | None) -> None:
        self.engine, self.step, self.schedule, self.server = engine, step, schedule, server
        self.first = True

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seeds: list[int] | None = None) -> list[Completion]:
        if self.first and self.server is not None:
            self.first = False
            with self.server.window():
                completions = self.engine.generate(prompts, params, seeds)
        else:
            completions = self.engine.generate(prompts, params, seeds)
        return self._corrupt(completions)

    def _corrupt(self, completions: list[Completion]) -> list[Completion]:
        if self.schedule.fires("empty_rollouts", self.step):
            return [Completion([], [], "", "stop", SampleStatus.EMPTY, "injected empty rollout") for _ in completions]
        if self.schedule.fires("fail_rollouts", self.step):
            return [Completion([], [], "", "error", SampleStatus.FAILED, "injected rollout failure")
                    if self.schedule.rng.random() < self.schedule.cfg.fail_fraction else c for c in completions]
        return completions
