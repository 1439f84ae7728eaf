"""The rollout and reward phases: groups of completions per problem, each sample with a status.

Failed samples are retried with backoff, then dropped; a group is kept only when every member is
valid, and lost groups are refilled with new problems within a bounded number of rounds. A failed
sample never gets a reward, so it can never be trained on as a 0.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from grpo.algo.advantages import group_advantages, zero_variance_groups
from grpo.config import RolloutConfig, TaskConfig
from grpo.dist import SINGLE, Ranks
from grpo.guard import inputs
from grpo.policy.update import TrainBatch
from grpo.rollout.seeds import sample_seed
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus, SamplingParams
from grpo.tasks.prompts import encode_prompt
from grpo.rewards import Reward, RewardFn, TrainerState, check_rewards, score
from grpo.tasks import Problem, Task, reward_inputs

log = logging.getLogger(__name__)


class RolloutFaults(Protocol):
    """Deliberate failures the collector lets in (grpo.faults implements them), so the guard can be
    rehearsed against the same code paths a real failure takes."""

    def corrupt_completions(self, completions: list[Completion], step: int) -> list[Completion]: ...

    def wrap_reward(self, fn: RewardFn, step: int) -> RewardFn: ...


@dataclass
class Sample:
    problem: Problem
    prompt_ids: list[int]
    completion: Completion
    status: SampleStatus
    reward: float | None = None  # the weighted total of the reward functions
    error: str | None = None
    reward_parts: dict[str, float | None] = field(default_factory=dict)  # each reward function's own


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
    dropped: list[Group] = field(default_factory=list)  # groups left out (a failed or unscorable member)
    attempts: Counter = field(default_factory=Counter)  # status -> count, over every attempt
    final: Counter = field(default_factory=Counter)  # status -> count, final state of each sample
    retries: int = 0
    rounds: int = 0
    groups_dropped_invalid: int = 0
    groups_dropped_zero_variance: int = 0
    groups_zero_variance: int = 0
    groups_complete: int = 0
    complete_rewards: list[float] = field(default_factory=list)  # every valid group, filtered or not
    complete_parts: list[tuple[str, float]] = field(default_factory=list)  # (reward name, its reward), likewise
    complete_correct: list[bool] = field(default_factory=list)  # reward >= task.correct_threshold, likewise
    reward_errors: list[str] = field(default_factory=list)
    generated_tokens: int = 0
    generate_s: float = 0.0
    reward_s: float = 0.0
    policy_version: int | None = None  # the policy version whose weights generated every sample (grpo.rollout.ahead)
    staleness: int = 0  # versions between those weights and the policy being updated on the batch

    def rewards(self) -> torch.Tensor:
        """[N, G] rewards of the kept groups."""
        return torch.tensor([[s.reward for s in g.samples] for g in self.groups], dtype=torch.float32)

    def train_batch(self, advantage_norm: str, uses_reference: bool) -> tuple[TrainBatch, bool]:
        """-> (the rows to train on, whether they carry a learning signal). All-zero advantages carry
        none unless a reference KL term still pulls: then the update is skipped, since a zero-gradient
        step would still move AdamW by its momentum."""
        samples = [s for g in self.groups for s in g.samples]
        if not samples:
            return TrainBatch([], [], [], torch.zeros(0)), False
        advantages = group_advantages(self.rewards(), advantage_norm).flatten()  # [N*G]
        return TrainBatch(
            prompt_ids=[s.prompt_ids for s in samples],
            completion_ids=[s.completion.token_ids for s in samples],
            old_logprobs=[s.completion.logprobs for s in samples],
            advantages=advantages,
        ), uses_reference or not bool((advantages == 0).all())


class RolloutCollector:
    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer,
        task: Task,
        task_cfg: TaskConfig,
        cfg: RolloutConfig,
        rewards: Sequence[Reward],
        faults: RolloutFaults,
        data_seed: int,
        sleep: Callable[[float], None] = time.sleep,
        ranks: Ranks = SINGLE,
    ) -> None:
        self.ranks = ranks
        self.engine, self.tokenizer, self.task, self.task_cfg = engine, tokenizer, task, task_cfg
        self.cfg, self.rewards, self.faults, self.data_seed, self.sleep = cfg, list(rewards), faults, data_seed, sleep
        self.params = SamplingParams(cfg.max_new_tokens, cfg.temperature, cfg.top_p, tuple(cfg.stop))
        self.jitter = random.Random(data_seed)
        self.revision: int | None = None

    def using(self, engine: RolloutEngine) -> RolloutCollector:
        """The same collector generating with `engine` (a pinned copy of the weights: grpo.rollout.ahead)."""
        other = copy.copy(self)
        other.engine = engine
        return other

    def check_rewards(self, rows: int = 4) -> None:
        """Call each reward function once on the first training rows, their gold answers as completions, so a
        wrong signature, shape or type is a one-line error before the first rollout, not a crash in it."""
        count = min(rows, self.task.num_train) if self.task.num_train is not None else rows
        problems = [self.task.train_problem(i, self.data_seed) for i in range(count)]
        golds = [p.gold for p in problems]
        ids = [self.tokenizer(g, add_special_tokens=False)["input_ids"] for g in golds]
        inputs = {**reward_inputs(problems, golds, ids), "trainer_state": TrainerState(0)}
        check_rewards(self.rewards, inputs, f"{count} training rows with their gold answers as completions")

    def collect(self, step: int, data_index: int, revision: int | None = None) -> RolloutBatch:
        """`revision`: the policy weights the samples must come from; an engine that tags its
        completions with another (a server that missed a sync) has its samples failed and retried."""
        batch = RolloutBatch(groups=[], next_data_index=data_index)
        self.revision = revision
        kept = 0  # over every rank: each generates the groups i with i % world == rank, whole
        while kept < self.cfg.problems_per_step and batch.rounds <= self.cfg.max_refill_rounds:
            need = self.cfg.problems_per_step - kept
            indices = [batch.next_data_index + i for i in range(need) if i % self.ranks.world == self.ranks.rank]
            problems = [self.task.train_problem(index, self.data_seed) for index in indices]
            batch.next_data_index += need
            batch.rounds += 1
            groups = self._generate_groups(problems, indices, step, batch)
            self._score(groups, step, batch)
            before = len(batch.groups)
            self._keep_valid(groups, batch)
            kept += int(self.ranks.sum([len(batch.groups) - before])[0])
        return batch

    def _generate_groups(self, problems: list[Problem], indices: list[int], step: int, batch: RolloutBatch):
        G = self.cfg.samples_per_problem
        prompts = [encode_prompt(self.tokenizer, p, self.task_cfg) for p in problems]
        slots: list[Sample | None] = [None] * (len(problems) * G)
        pending = list(range(len(slots)))
        start = time.perf_counter()
        for attempt in range(self.cfg.max_retries + 1):
            if attempt > 0:
                batch.retries += len(pending)
                delay = self.cfg.retry_backoff_s * 2 ** (attempt - 1) * (1 + self.jitter.random())
                log.warning("step %d: retrying %s in %.1fs (attempt %d)", step, retry_note(
                    [slots[i].status.value for i in pending if slots[i] is not None]), delay, attempt)
                self.sleep(delay)
            # Sample j of the problem at data index d, attempt a: the same draw wherever it is generated.
            seeds = [sample_seed(self.data_seed, indices[i // G], i % G, attempt) for i in pending]
            completions = self.engine.generate([prompts[i // G] for i in pending], self.params, seeds)
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
            if not self.ranks.any(bool(pending)):  # together: a server engine's calls are collective
                break
        batch.generate_s += time.perf_counter() - start
        return [Group(problems[i], slots[i * G : (i + 1) * G]) for i in range(len(problems))]

    def _score(self, groups: list[Group], step: int, batch: RolloutBatch) -> None:
        start = time.perf_counter()
        scorable = [s for g in groups for s in g.samples if s.status.trainable]
        if scorable:
            rewards = [Reward(r.name, self.faults.wrap_reward(r.fn, step), r.weight) for r in self.rewards]
            inputs = reward_inputs([s.problem for s in scorable], [s.completion.text for s in scorable],
                                   [s.completion.token_ids for s in scorable])
            scores = score(rewards, {**inputs, "trainer_state": TrainerState(step)})
            for i, (sample, reward, error) in enumerate(zip(scorable, scores.total, scores.errors)):
                sample.reward = reward
                sample.reward_parts = {name: values[i] for name, values in scores.parts.items()}
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
                batch.dropped.append(group)
                continue
            batch.groups_complete += 1
            batch.complete_rewards.extend(s.reward for s in group.samples)
            batch.complete_parts.extend((name, value) for s in group.samples for name, value in s.reward_parts.items()
                                        if value is not None)
            batch.complete_correct.extend(s.reward >= self.task_cfg.correct_threshold for s in group.samples)
            rewards = torch.tensor([[s.reward for s in group.samples]])
            if bool(zero_variance_groups(rewards)[0]):
                batch.groups_zero_variance += 1
                if self.cfg.filter_zero_variance:
                    batch.groups_dropped_zero_variance += 1
                    continue
            batch.groups.append(group)


def sample_records(batch: RolloutBatch, tokenizer, k: int) -> list[dict]:
    """Up to `k` completions to show: the best and worst answer of the first trained groups, and one
    sample of a dropped group when there is one (what a failure looked like)."""
    chosen: list[Sample] = []
    for group in batch.groups:
        ranked = sorted(group.samples, key=lambda s: s.reward)
        chosen += [ranked[-1], ranked[0]] if len(ranked) > 1 else ranked
    picked = chosen[: max(k - 1, 1)] if batch.dropped else chosen[:k]
    if batch.dropped and k > 0:
        picked.append(next((s for s in batch.dropped[0].samples if not s.status.trainable), batch.dropped[0].samples[0]))
    return [{
        "problem": s.problem.id, "prompt": tokenizer.decode(s.prompt_ids, skip_special_tokens=False),
        "completion": s.completion.text, "reward": s.reward, "status": s.status.value, "error": s.error,
        "tokens": len(s.completion.token_ids), **({"source": f"{s.completion.meta['server']}#"
                                                   f"{s.completion.meta['incarnation']}"}
                                                  if "server" in s.completion.meta else {}),
    } for s in picked[:k]]


def rollout_metrics(batch: RolloutBatch, ranks: Ranks = SINGLE) -> dict[str, Any]:
    """Counts of every status over all attempts, group bookkeeping, and reward/response statistics,
    over every rank's share of the step."""
    t = _merge(ranks.gather(_summary(batch)))
    attempts, final = t["attempts"], t["final"]
    m: dict[str, Any] = {f"rollout/{status.value}": attempts.get(status.value, 0) for status in SampleStatus}
    total = sum(attempts.values())
    # A failed generation and an answer the reward cannot score have different causes (the engine vs
    # the data or reward function), different remedies, and different breakers.
    failed = sum(attempts.get(s.value, 0) for s in SampleStatus if s.retryable)
    generated = total - failed
    unscorable = attempts.get(SampleStatus.UNSCORABLE.value, 0)
    m.update({
        "rollout/attempts": total,
        inputs.FAILED_FRAC: failed / total if total else 0.0,
        inputs.UNSCORABLE_FRAC: unscorable / generated if generated else 0.0,
        "rollout/retries": t["retries"],
        "rollout/rounds": batch.rounds,
        inputs.REWARD_ERRORS: t["reward_errors"],
        "groups/trained": t["trained"],
        "groups/dropped_invalid": t["dropped_invalid"],
        "groups/dropped_zero_std": t["dropped_zero_std"],
        inputs.ZERO_STD_FRAC: t["zero_std"] / t["complete"] if t["complete"] else 0.0,
    })
    finals = sum(final.values())
    if finals:
        m[inputs.EMPTY_FRAC] = final.get(SampleStatus.EMPTY.value, 0) / finals
        m[inputs.TRUNCATED_FRAC] = final.get(SampleStatus.TRUNCATED.value, 0) / finals
    if t["rewards"]:
        rewards = torch.tensor(t["rewards"])
        m.update({
            inputs.REWARD_MEAN: rewards.mean().item(),
            "reward/std": rewards.std(unbiased=False).item(),
            "reward/min": rewards.min().item(),
            inputs.REWARD_MAX: rewards.max().item(),
            "reward/accuracy": sum(t["correct"]) / len(t["correct"]),  # reward >= task.correct_threshold
        })
    for name in dict.fromkeys(name for name, _ in t["parts"]):  # each reward function on its own
        values = torch.tensor([value for n, value in t["parts"] if n == name])
        m[f"reward/{name}/mean"] = values.mean().item()
        m[f"reward/{name}/std"] = values.std(unbiased=False).item()
    if t["sources"]:  # which server incarnations produced what is trained on (none that failed)
        m["rollout/sources"] = sorted(t["sources"])
    if t["lengths"]:
        m[inputs.LENGTH_MEAN] = sum(t["lengths"]) / len(t["lengths"])
        m["response/length_max"] = max(t["lengths"])
    # Every sample of a batch comes from one version, so over the trained samples the mean is the batch's.
    m[inputs.STALENESS_MAX] = m["rollout/staleness_mean"] = batch.staleness
    m["perf/generated_tokens"] = t["generated_tokens"]
    m["perf/generate_tokens_per_s"] = t["generated_tokens"] / t["generate_s"] if t["generate_s"] else 0.0
    m["time/generate_s"] = t["generate_s"]
    m["time/reward_s"] = t["reward_s"]
    return m


def _summary(batch: RolloutBatch) -> dict[str, Any]:
    """What the step's metrics need from one rank's share."""
    trained = [s for g in batch.groups for s in g.samples]
    return {
        "attempts": batch.attempts, "final": batch.final, "retries": batch.retries,
        "reward_errors": len(batch.reward_errors), "trained": len(batch.groups),
        "dropped_invalid": batch.groups_dropped_invalid, "dropped_zero_std": batch.groups_dropped_zero_variance,
        "zero_std": batch.groups_zero_variance, "complete": batch.groups_complete, "rewards": batch.complete_rewards,
        "parts": batch.complete_parts, "correct": batch.complete_correct,
        "sources": {f"{s.completion.meta['server']}#{s.completion.meta['incarnation']}"
                    for s in trained if "server" in s.completion.meta},
        "lengths": [len(s.completion.token_ids) for s in trained],
        "generated_tokens": batch.generated_tokens, "generate_s": batch.generate_s, "reward_s": batch.reward_s,
    }


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts add up, lists join in rank order, times are the slowest rank's (ranks work in parallel)."""
    total = dict(parts[0])
    for part in parts[1:]:
        for key, value in part.items():
            if key in ("generate_s", "reward_s"):
                total[key] = max(total[key], value)
            elif isinstance(value, set):
                total[key] = total[key] | value
            else:
                total[key] = total[key] + value
    return total


def retry_note(statuses: list[str]) -> str:
    """'1 sample (empty)', '3 samples (2 failed, 1 empty)': what is retried, by why."""
    counts = {status: statuses.count(status) for status in dict.fromkeys(statuses)}
    why = ", ".join(f"{n} {status}" if len(counts) > 1 else status for status, n in counts.items())
    return f"{len(statuses)} sample{'s' if len(statuses) != 1 else ''} ({why})"
