"""The rollout and reward phases: groups of completions per problem, each sample with a status.

Failed samples are retried with backoff, then dropped; a group is kept only when every member is
valid, and lost groups are refilled with new problems within a bounded number of rounds. A failed
sample never gets a reward, so it can never be trained on as a 0. A sample a retry brought back is
recovered: counted apart from those still failed after every retry, which alone cost the step groups.
Each round of failures is an event (`rollout_failed`) as it happens, so a step that never ends still
says what failed.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from grpo import metric_keys as keys
from grpo.algo.advantages import zero_variance_groups
from grpo.config import RolloutConfig, TaskConfig
from grpo.dist import SINGLE, Ranks
from grpo.rewards import ExtraColumns, Reward, TrainerState, check_rewards, score
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus, SamplingParams
from grpo.rollout.seeds import sample_seed
from grpo.tasks import Problem, Task, reward_inputs
from grpo.tasks.prompts import encode_prompt

log = logging.getLogger(__name__)


@dataclass
class Sample:
    problem: Problem
    prompt_ids: list[int]
    completion: Completion
    status: SampleStatus
    reward: float | None = None  # the weighted total of the reward functions
    error: str | None = None
    reward_parts: dict[str, float | None] = field(default_factory=dict)  # each reward function's own
    extra: dict[str, Any] = field(default_factory=dict)  # what reward functions gave TRL's log_extra, by column


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
    recovered: int = 0  # samples that failed, then came back on a retry
    rounds: int = 0
    groups_dropped_invalid: int = 0
    groups_dropped_zero_variance: int = 0
    groups_zero_variance: int = 0
    groups_complete: int = 0
    complete_rewards: list[float] = field(default_factory=list)  # every valid group, filtered or not
    complete_parts: list[tuple[str, float]] = field(default_factory=list)  # (reward name, its reward), likewise
    complete_correct: list[bool] = field(default_factory=list)  # reward >= task.correct_threshold, likewise
    reward_errors: list[str] = field(default_factory=list)
    reward_metrics: list[tuple[str, float]] = field(default_factory=list)  # what reward functions gave log_metric
    generated_tokens: int = 0
    generate_s: float = 0.0
    reward_s: float = 0.0
    policy_version: int | None = None  # the policy version whose weights generated every sample (grpo.rollout.queue)
    staleness: int = 0  # versions between those weights and the policy being updated on the batch

    def rewards(self) -> torch.Tensor:
        """[N, G] rewards of the kept groups."""
        return torch.tensor([[s.reward for s in g.samples] for g in self.groups], dtype=torch.float32)

    def log_metric(self, name: str, value: float) -> None:
        """TRL's `log_metric` keyword for reward functions: a scalar whose mean over the step joins its metrics."""
        self.reward_metrics.append((str(name), float(value)))


class RolloutCollector:
    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer,
        task: Task,
        task_cfg: TaskConfig,
        cfg: RolloutConfig,
        rewards: Sequence[Reward],
        data_seed: int,
        max_steps: int,
        sleep: Callable[[float], None] = time.sleep,
        ranks: Ranks = SINGLE,
        record: Callable[..., Any] | None = None,
        max_prompt_tokens: int | None = None,
    ) -> None:
        """`max_steps`: the run's total steps (reward functions' `trainer_state.max_steps`); `record(kind, step,
        message, **evidence)`: where failed rounds of samples are recorded (the run's events.jsonl).
        `max_prompt_tokens`: prompts are cut from the left to this (task.truncate_prompts)."""
        self.ranks, self.record, self.max_prompt_tokens = ranks, record, max_prompt_tokens
        self.engine, self.tokenizer, self.task, self.task_cfg = engine, tokenizer, task, task_cfg
        self.cfg, self.rewards, self.data_seed, self.sleep = cfg, list(rewards), data_seed, sleep
        self.max_steps = max_steps
        self.params = SamplingParams(cfg.max_new_tokens, cfg.temperature, cfg.top_p, tuple(cfg.stop))
        self.jitter = random.Random(data_seed)
        self.revision: int | None = None

    def using(self, engine: RolloutEngine | None = None, rewards: Sequence[Reward] | None = None) -> RolloutCollector:
        """The same collector generating with `engine` (a pinned copy of the weights: grpo.rollout.queue),
        scoring with `rewards`; None keeps this one's."""
        other = copy.copy(self)
        other.engine = engine if engine is not None else self.engine
        other.rewards = list(rewards) if rewards is not None else self.rewards
        return other

    def check_rewards(self, rows: int = 4) -> None:
        """Call each reward function once on the first training rows, their gold answers as completions, so a
        wrong signature, shape or type is a one-line error before the first rollout, not a crash in it."""
        count = min(rows, self.task.num_train) if self.task.num_train is not None else rows
        problems = [self.task.train_problem(i, self.data_seed) for i in range(count)]
        golds = [p.gold for p in problems]
        ids = [self.tokenizer(g, add_special_tokens=False)["input_ids"] for g in golds]
        inputs = {**reward_inputs(problems, golds, ids), "trainer_state": TrainerState(0, self.max_steps)}
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
        prompts = [encode_prompt(self.tokenizer, p, self.task_cfg, self.max_prompt_tokens) for p in problems]
        slots: list[Sample | None] = [None] * (len(problems) * G)
        pending = list(range(len(slots)))
        retried: set[int] = set()
        start = time.perf_counter()
        for attempt in range(self.cfg.max_retries + 1):
            if attempt > 0:
                batch.retries += len(pending)
                retried.update(pending)
                delay = self.cfg.retry_backoff_s * 2 ** (attempt - 1) * (1 + self.jitter.random())
                if pending:  # a rank with nothing to retry still joins the round, silently
                    statuses = [slots[i].status.value for i in pending]
                    log.warning("step %d: retrying %s in %.1fs (attempt %d)", step, retry_note(statuses), delay,
                                attempt)
                    self._failed(step, statuses, f"retrying {retry_note(statuses)} in {delay:.1f}s (attempt "
                                 f"{attempt})", attempt=attempt, retried=True)
                self.sleep(delay)
            # Sample j of the problem at data index d, attempt a: the same draw wherever it is generated.
            seeds = [sample_seed(self.data_seed, indices[i // G], i % G, attempt) for i in pending]
            completions = self.engine.generate([prompts[i // G] for i in pending], self.params, seeds)
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
        if pending:
            statuses = [slots[i].status.value for i in pending]
            log.warning("step %d: %s still failed after %d retries: their groups are dropped", step,
                        retry_note(statuses), self.cfg.max_retries)
            self._failed(step, statuses, f"{retry_note(statuses)} still failed after {self.cfg.max_retries} "
                         "retries: their groups are dropped", retried=False, retries=self.cfg.max_retries)
        batch.recovered += sum(1 for i in retried if not slots[i].status.retryable)
        batch.generate_s += time.perf_counter() - start
        return [Group(problems[i], slots[i * G : (i + 1) * G]) for i in range(len(problems))]

    def _failed(self, step: int, statuses: list[str], what: str, **evidence: Any) -> None:
        if self.record is not None:
            share = {"rank": self.ranks.rank, "ranks": self.ranks.world} if self.ranks.distributed else {}
            self.record("rollout_failed", step, f"step {step}: {what}", samples=len(statuses),
                        statuses=dict(Counter(statuses)), **evidence, **share)

    def _score(self, groups: list[Group], step: int, batch: RolloutBatch) -> None:
        start = time.perf_counter()
        scorable = [s for g in groups for s in g.samples if s.status.trainable]
        if scorable:
            inputs = reward_inputs([s.problem for s in scorable], [s.completion.text for s in scorable],
                                   [s.completion.token_ids for s in scorable])
            # TRL scores step N's samples before its optimizer step: N - 1 steps are complete.
            extra = ExtraColumns(len(scorable))
            scores = score(self.rewards, {**inputs, "trainer_state": TrainerState(step - 1, self.max_steps),
                                          "log_metric": batch.log_metric, "log_extra": extra})
            for i, (sample, reward, error) in enumerate(zip(scorable, scores.total, scores.errors)):
                sample.reward = reward
                sample.reward_parts = {name: values[i] for name, values in scores.parts.items()}
                sample.extra = extra.of(i)
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
        "tokens": len(s.completion.token_ids), **({"extra": s.extra} if s.extra else {}),
        **({"source": f"{s.completion.meta['server']}#{s.completion.meta['incarnation']}"}
           if "server" in s.completion.meta else {}),
    } for s in picked[:k]]


@dataclass
class RewardStats:
    """The rewards of every complete group, filtered or not."""

    mean: float
    std: float
    min: float
    max: float
    accuracy: float  # the share with reward >= task.correct_threshold
    parts: dict[str, tuple[float, float]]  # each reward function on its own: name -> (mean, std)


@dataclass
class RolloutStats:
    """A step's rollout over every rank's share: what the rollout breakers read, and the rollout's part
    of the metrics line."""

    attempts: dict[str, int]  # SampleStatus value -> count over every attempt
    failed_frac: float  # of all attempts, failed generations (the engine's fault), retried or not
    recovered: int  # samples that failed and came back on a retry
    unrecovered: int  # samples still failed after every retry: their groups were dropped
    unrecovered_frac: float  # of the samples (in their final state): what the failed_rollouts breaker judges
    unscorable_frac: float  # of generated answers, those the reward could not score (the data's or reward's)
    retries: int
    rounds: int  # this rank's refill rounds
    reward_errors: int
    groups_trained: int
    groups_dropped_invalid: int
    groups_dropped_zero_variance: int
    zero_variance_frac: float  # of complete groups
    empty_frac: float | None  # of samples in their final state; None when there is none
    truncated_frac: float | None
    rewards: RewardStats | None  # None when no group was complete
    sources: list[str]  # server incarnations whose samples are trained on (none that failed)
    length_mean: float | None  # of trained samples; None when none is trained
    length_max: int | None
    staleness: int  # every sample of a batch comes from one version
    generated_tokens: int
    generate_s: float  # the slowest rank's (ranks work in parallel)
    reward_s: float
    reward_metrics: dict[str, float] = field(default_factory=dict)  # log_metric's names -> their step means

    def metrics(self) -> dict[str, Any]:
        m: dict[str, Any] = {keys.status_count(status.value): self.attempts.get(status.value, 0)
                             for status in SampleStatus}
        m.update({
            keys.ATTEMPTS: sum(self.attempts.values()),
            keys.FAILED_FRAC: self.failed_frac,
            keys.RECOVERED: self.recovered,
            keys.UNRECOVERED: self.unrecovered,
            keys.UNRECOVERED_FRAC: self.unrecovered_frac,
            keys.UNSCORABLE_FRAC: self.unscorable_frac,
            keys.RETRIES: self.retries,
            keys.ROUNDS: self.rounds,
            keys.REWARD_ERRORS: self.reward_errors,
            keys.GROUPS_TRAINED: self.groups_trained,
            keys.GROUPS_DROPPED_INVALID: self.groups_dropped_invalid,
            keys.GROUPS_DROPPED_ZERO_VARIANCE: self.groups_dropped_zero_variance,
            keys.ZERO_VARIANCE_FRAC: self.zero_variance_frac,
        })
        if self.empty_frac is not None:
            m[keys.EMPTY_FRAC], m[keys.TRUNCATED_FRAC] = self.empty_frac, self.truncated_frac
        if self.rewards is not None:
            r = self.rewards
            m.update({keys.REWARD_MEAN: r.mean, keys.REWARD_STD: r.std, keys.REWARD_MIN: r.min,
                      keys.REWARD_MAX: r.max, keys.ACCURACY: r.accuracy})
            for name, (mean, std) in r.parts.items():
                m[keys.reward_part(name, "mean")], m[keys.reward_part(name, "std")] = mean, std
        if self.sources:
            m[keys.SOURCES] = self.sources
        if self.length_mean is not None:
            m[keys.LENGTH_MEAN], m[keys.LENGTH_MAX] = self.length_mean, self.length_max
        m[keys.STALENESS_MAX] = m[keys.STALENESS_MEAN] = self.staleness
        m[keys.GENERATED_TOKENS] = self.generated_tokens
        m[keys.GENERATE_TOKENS_PER_S] = self.generated_tokens / self.generate_s if self.generate_s else 0.0
        m[keys.GENERATE_S], m[keys.REWARD_S] = self.generate_s, self.reward_s
        m.update({keys.reward_metric(name): value for name, value in self.reward_metrics.items()})
        return m


def rollout_stats(batch: RolloutBatch, ranks: Ranks = SINGLE) -> RolloutStats:
    """Counts of every status over all attempts, group bookkeeping, and reward/response statistics,
    over every rank's share of the step."""
    t = _merge(ranks.gather(_summary(batch)))
    attempts, final = t["attempts"], t["final"]
    total = sum(attempts.values())
    # A failed generation and an answer the reward cannot score have different causes (the engine vs
    # the data or reward function), different remedies, and different breakers.
    failed = sum(attempts.get(s.value, 0) for s in SampleStatus if s.retryable)
    generated = total - failed
    unscorable = attempts.get(SampleStatus.UNSCORABLE.value, 0)
    finals = sum(final.values())
    unrecovered = sum(final.get(s.value, 0) for s in SampleStatus if s.retryable)
    rewards = None
    if t["rewards"]:
        values = torch.tensor(t["rewards"])
        parts = {}
        for name in dict.fromkeys(name for name, _ in t["parts"]):
            part = torch.tensor([value for n, value in t["parts"] if n == name])
            parts[name] = (part.mean().item(), part.std(unbiased=False).item())
        rewards = RewardStats(values.mean().item(), values.std(unbiased=False).item(), values.min().item(),
                              values.max().item(), sum(t["correct"]) / len(t["correct"]), parts)
    lengths = t["lengths"]
    return RolloutStats(
        attempts={status.value: attempts.get(status.value, 0) for status in SampleStatus},
        failed_frac=failed / total if total else 0.0,
        recovered=t["recovered"], unrecovered=unrecovered, unrecovered_frac=unrecovered / finals if finals else 0.0,
        unscorable_frac=unscorable / generated if generated else 0.0,
        retries=t["retries"], rounds=batch.rounds, reward_errors=t["reward_errors"],
        groups_trained=t["trained"], groups_dropped_invalid=t["dropped_invalid"],
        groups_dropped_zero_variance=t["dropped_zero_variance"],
        zero_variance_frac=t["zero_variance"] / t["complete"] if t["complete"] else 0.0,
        empty_frac=final.get(SampleStatus.EMPTY.value, 0) / finals if finals else None,
        truncated_frac=final.get(SampleStatus.TRUNCATED.value, 0) / finals if finals else None,
        rewards=rewards, sources=sorted(t["sources"]),
        length_mean=sum(lengths) / len(lengths) if lengths else None, length_max=max(lengths) if lengths else None,
        staleness=batch.staleness, generated_tokens=t["generated_tokens"], generate_s=t["generate_s"],
        reward_s=t["reward_s"], reward_metrics=_means(t["reward_metrics"]),
    )


def _summary(batch: RolloutBatch) -> dict[str, Any]:
    """What the step's metrics need from one rank's share."""
    trained = [s for g in batch.groups for s in g.samples]
    return {
        "attempts": batch.attempts, "final": batch.final, "retries": batch.retries, "recovered": batch.recovered,
        "reward_errors": len(batch.reward_errors), "trained": len(batch.groups),
        "dropped_invalid": batch.groups_dropped_invalid, "dropped_zero_variance": batch.groups_dropped_zero_variance,
        "zero_variance": batch.groups_zero_variance, "complete": batch.groups_complete,
        "rewards": batch.complete_rewards, "parts": batch.complete_parts, "correct": batch.complete_correct,
        "sources": {f"{s.completion.meta['server']}#{s.completion.meta['incarnation']}"
                    for s in trained if "server" in s.completion.meta},
        "lengths": [len(s.completion.token_ids) for s in trained],
        "generated_tokens": batch.generated_tokens, "generate_s": batch.generate_s, "reward_s": batch.reward_s,
        "reward_metrics": batch.reward_metrics,
    }


def _means(logged: list[tuple[str, float]]) -> dict[str, float]:
    """Each name's mean over the step's calls on every rank, as TRL averages log_metric's values."""
    return {name: sum(v for n, v in logged if n == name) / sum(1 for n, _ in logged if n == name)
            for name in dict.fromkeys(name for name, _ in logged)}


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
