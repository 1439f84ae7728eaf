"""The rollout and reward phases: groups of completions per problem, each sample with a status.

Failed samples are retried with backoff, then dropped; a group is kept only when every member is
valid, and lost groups are refilled with new problems within a bounded number of rounds. A failed
sample never gets a reward, so it can never be trained on as a 0.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch

from grpo.algo.advantages import zero_variance_groups
from grpo.config import RolloutConfig, TaskConfig
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus, SamplingParams
from grpo.guard.faults import FaultInjector
from grpo.prompts import encode_prompt
from grpo.rewards import RewardFn, score_completions
from grpo.tasks import Problem, Task, reward_columns

log = logging.getLogger(__name__)


@dataclass
class Sample:
    problem: Problem
    prompt_ids: list[int]
    completion: Completion
    status: SampleStatus
    reward: float | None = None
    error: str | None = None


@dataclass
class Group:
    problem: Problem
    samples: list[Sample]

    @property
    def valid(self) -> bool:
        return all(s.status.trainable and s.reward is not None for s in self.samples)


@dataclass
class RolloutBatch:
    groups: list[Group]  # only complete, valid groups: what the update trains on
    next_data_index: int
    attempts: Counter = field(default_factory=Counter)  # status -> count, over every attempt
    final: Counter = field(default_factory=Counter)  # status -> count, final state of each sample
    retries: int = 0
    rounds: int = 0
    groups_dropped_invalid: int = 0
    groups_dropped_zero_variance: int = 0
    groups_zero_variance: int = 0
    groups_complete: int = 0
    complete_rewards: list[float] = field(default_factory=list)  # every valid group, filtered or not
    reward_errors: list[str] = field(default_factory=list)
    generated_tokens: int = 0
    generate_s: float = 0.0
    reward_s: float = 0.0

    def rewards(self) -> torch.Tensor:
        """[N, G] rewards of the kept groups."""
        return torch.tensor([[s.reward for s in g.samples] for g in self.groups], dtype=torch.float32)


class RolloutCollector:
    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer,
        task: Task,
        task_cfg: TaskConfig,
        cfg: RolloutConfig,
        reward_fn: RewardFn,
        faults: FaultInjector,
        data_seed: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.engine, self.tokenizer, self.task, self.task_cfg = engine, tokenizer, task, task_cfg
        self.cfg, self.reward_fn, self.faults, self.data_seed, self.sleep = cfg, reward_fn, faults, data_seed, sleep
        self.params = SamplingParams(cfg.max_new_tokens, cfg.temperature, cfg.top_p, tuple(cfg.stop))
        self.jitter = random.Random(data_seed)
        self.revision: int | None = None

    def collect(self, step: int, data_index: int, generator: torch.Generator, revision: int | None = None
                ) -> RolloutBatch:
        """`revision`: the policy weights the samples must come from; an engine that tags its
        completions with another (a server that missed a sync) has its samples failed and retried."""
        batch = RolloutBatch(groups=[], next_data_index=data_index)
        self.revision = revision
        while len(batch.groups) < self.cfg.problems_per_step and batch.rounds <= self.cfg.max_refill_rounds:
            need = self.cfg.problems_per_step - len(batch.groups)
            problems = [self.task.train_problem(batch.next_data_index + i, self.data_seed) for i in range(need)]
            batch.next_data_index += need
            batch.rounds += 1
            groups = self._generate_groups(problems, step, generator, batch)
            self._score(groups, step, batch)
            self._keep_valid(groups, batch)
        return batch

    def _generate_groups(self, problems: list[Problem], step: int, generator: torch.Generator, batch: RolloutBatch):
        G = self.cfg.samples_per_problem
        prompts = [encode_prompt(self.tokenizer, p, self.task_cfg) for p in problems]
        slots: list[Sample | None] = [None] * (len(problems) * G)
        pending = list(range(len(slots)))
        start = time.perf_counter()
        for attempt in range(self.cfg.max_retries + 1):
            if attempt > 0:
                batch.retries += len(pending)
                delay = self.cfg.retry_backoff_s * 2 ** (attempt - 1) * (1 + self.jitter.random())
                log.warning("step %d: retrying %d failed samples in %.1fs (attempt %d)", step, len(pending), delay, attempt)
                self.sleep(delay)
            completions = self.engine.generate([prompts[i // G] for i in pending], self.params, generator)
            completions = self.faults.corrupt_completions(completions, step)
            for completion in completions:
                produced_by = completion.meta.get("revision", self.revision)
                if produced_by != self.revision and completion.status.trainable:
                    completion.status = SampleStatus.FAILED
                    completion.error = f"sampled from weights revision {produced_by}, not the current {self.revision}"
            still_pending = []
            for slot, completion in zip(pending, completions):
                batch.attempts[completion.status.value] += 1
                batch.generated_tokens += len(completion.token_ids)
                problem = problems[slot // G]
                slots[slot] = Sample(problem, prompts[slot // G], completion, completion.status, error=completion.error)
                if completion.status.retryable:
                    still_pending.append(slot)
            pending = still_pending
            if not pending:
                break
        batch.generate_s += time.perf_counter() - start
        return [Group(problems[i], slots[i * G : (i + 1) * G]) for i in range(len(problems))]

    def _score(self, groups: list[Group], step: int, batch: RolloutBatch) -> None:
        start = time.perf_counter()
        scorable = [s for g in groups for s in g.samples if s.status.trainable]
        if scorable:
            rewards, errors = score_completions(
                self.faults.wrap_reward(self.reward_fn, step),
                [s.completion.text for s in scorable],
                reward_columns([s.problem for s in scorable]),
            )
            for sample, reward, error in zip(scorable, rewards, errors):
                sample.reward = reward
                if reward is None:
                    batch.attempts[sample.status.value] -= 1
                    batch.attempts[SampleStatus.UNSCORABLE.value] += 1
                    sample.status = SampleStatus.UNSCORABLE
                    sample.error = error or "reward is None (unscorable gold or answer)"
                    if error:
                        batch.reward_errors.append(error)
        batch.reward_s += time.perf_counter() - start

    def _keep_valid(self, groups: list[Group], batch: RolloutBatch) -> None:
        for group in groups:
            for sample in group.samples:
                batch.final[sample.status.value] += 1
            if not group.valid:
                batch.groups_dropped_invalid += 1
                continue
            batch.groups_complete += 1
            batch.complete_rewards.extend(s.reward for s in group.samples)
            rewards = torch.tensor([[s.reward for s in group.samples]])
            if bool(zero_variance_groups(rewards)[0]):
                batch.groups_zero_variance += 1
                if self.cfg.filter_zero_variance:
                    batch.groups_dropped_zero_variance += 1
                    continue
            batch.groups.append(group)


def rollout_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Counts of every status over all attempts, group bookkeeping, and reward/response statistics."""
    m: dict[str, float] = {f"rollout/{status.value}": batch.attempts.get(status.value, 0) for status in SampleStatus}
    total = sum(batch.attempts.values())
    # A failed generation and an answer the reward cannot score have different causes (the engine vs
    # the data or reward function), different remedies, and different breakers.
    failed = sum(batch.attempts.get(s.value, 0) for s in SampleStatus if s.retryable)
    generated = total - failed
    unscorable = batch.attempts.get(SampleStatus.UNSCORABLE.value, 0)
    m.update({
        "rollout/attempts": total,
        "rollout/failed_frac": failed / total if total else 0.0,
        "rollout/unscorable_frac": unscorable / generated if generated else 0.0,
        "rollout/retries": batch.retries,
        "rollout/rounds": batch.rounds,
        "rollout/reward_errors": len(batch.reward_errors),
        "groups/trained": len(batch.groups),
        "groups/dropped_invalid": batch.groups_dropped_invalid,
        "groups/dropped_zero_std": batch.groups_dropped_zero_variance,
        "groups/zero_std_frac": batch.groups_zero_variance / batch.groups_complete if batch.groups_complete else 0.0,
    })
    finals = sum(batch.final.values())
    if finals:
        m["response/empty_frac"] = batch.final.get(SampleStatus.EMPTY.value, 0) / finals
        m["response/truncated_frac"] = batch.final.get(SampleStatus.TRUNCATED.value, 0) / finals
    if batch.complete_rewards:
        rewards = torch.tensor(batch.complete_rewards)
        m.update({
            "reward/mean": rewards.mean().item(),
            "reward/std": rewards.std(unbiased=False).item(),
            "reward/min": rewards.min().item(),
            "reward/max": rewards.max().item(),
            "reward/accuracy": (rewards >= 1.0).float().mean().item(),
        })
    sources = {f"{s.completion.meta['server']}#{s.completion.meta['incarnation']}"
               for g in batch.groups for s in g.samples if "server" in s.completion.meta}
    if sources:  # which server incarnations produced what is trained on (none that failed)
        m["rollout/sources"] = sorted(sources)
    lengths = [len(s.completion.token_ids) for g in batch.groups for s in g.samples]
    if lengths:
        m["response/length_mean"] = sum(lengths) / len(lengths)
        m["response/length_max"] = max(lengths)
    m["perf/generated_tokens"] = batch.generated_tokens
    m["perf/generate_tokens_per_s"] = batch.generated_tokens / batch.generate_s if batch.generate_s else 0.0
    m["time/generate_s"] = batch.generate_s
    m["time/reward_s"] = batch.reward_s
    return m
