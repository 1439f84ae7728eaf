"""Every check grpo makes on a GRPO run, in one place: what it reads, when a step is bad, how many bad
steps in a row make it trip, what that means and what to do.

Read by the guard (`breakers`, which acts on a trip), by the doctor and the report (which explain a
run, grpo's or another framework's, after the fact) and by `grpo watch` and the TRL callback (which
stop a live run). A check has one name everywhere: in a guard's `trip` event, the doctor's timeline
and JSON, the report's colours and the callback's grpo-guard.json. Adding a check means an entry
here, its rule (the guard's in `breakers`, or the doctor's in `tools/doctor/timeline`) and a test.

The guard sees grpo's own metrics (failed samples after retries, unscorable answers); the doctor sees
what any framework logs (reward, its spread, loss, gradient norm, KL, clipped completions). Checks that
only one of them can make say so in `judged_by`. Thresholds and patience are the guard's defaults
(`guard.<name>.threshold`, `.patience` in a run's config); the doctor, the watch and the callback use
the same numbers, counting logged steps.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    reads: str  # the metric or log evidence
    threshold: float
    patience: int  # bad logged steps in a row before it trips
    action: str  # the guard's default: warn | pause | rollback | stop
    meaning: str
    advice: str
    judged_by: frozenset[str] = frozenset({"guard", "doctor"})


def _check(name, reads, threshold, patience, action, meaning, advice, judged_by=("guard", "doctor")) -> Check:
    return Check(name, reads, threshold, patience, action, meaning, advice, frozenset(judged_by))


CHECKS: dict[str, Check] = {c.name: c for c in (
    _check("failed_rollouts", "fraction of samples still failed after every retry (grpo); groups lost (others)",
           0.5, 2, "rollback", "generation failed for half the samples or more: the inference server, not the model",
           "check the server's log and memory; resume from before the failures"),
    _check("unscorable_rewards", "fraction of answers the reward could not score; a reward function that raised",
           0.5, 2, "stop", "the gold answers or the reward function are at fault, not the model",
           "fix the data (task.path, task.gold_pattern) or task.reward; rolling back cannot fix them"),
    _check("zero_reward", "mean reward", 0.0, 10, "rollback", "mean reward exactly 0 step after step",
           "0 from the first step: the reward never scored anything (wiring, format); after real rewards: a dead "
           "reward source or inference server"),
    _check("reward_collapse", "mean reward against its moving baseline (mean and spread of the last 20 steps)",
           0.2, 5, "warn", "the reward fell below threshold x its baseline, beyond its own noise, and stayed there",
           "lower the learning rate, raise the KL penalty or clip, and resume from before it"),
    _check("empty_responses", "fraction of responses that came back empty", 1.0, 2, "rollback",
           "every response empty: a dead server looks like this", "check the inference server",
           judged_by=("guard",)),
    _check("truncated_responses", "fraction of responses cut at the length limit", 0.95, 10, "warn",
           "responses run to the length limit (rambling, or a budget too small); the reward falls with them",
           "raise the completion length limit or penalise length; resume from before it"),
    _check("nonfinite", "loss, gradient norm, parameters", 0.0, 1, "rollback", "a NaN or infinite value",
           "lower the learning rate or use bf16/fp32 where it overflowed; resume from before it"),
    _check("zero_loss", "loss and gradient norm", 0.0, 20, "warn",
           "loss exactly 0 with no gradient: every group's answers got the same reward",
           "more samples per group, partial credit, or problems of the right difficulty"),
    _check("zero_variance", "fraction of groups whose rewards are identical (or the reward's spread at 0), "
           "averaged over `patience` steps", 0.9, 10, "warn",
           "nearly every group's rewards identical, step after step, so nearly every advantage is 0: no learning "
           "signal (a sparse reward that a group rarely hits is this too)",
           "more samples per group, a reward with partial credit, or problems of the right difficulty",
           judged_by=("doctor",)),
    _check("grad_norm_spike", "gradient norm against its moving median", 50.0, 1, "warn",
           "the gradient norm jumped far above its recent median", "lower the learning rate or clip harder"),
    _check("kl_explosion", "KL to the reference (or the sampling policy); its growth from the run's start",
           10.0, 2, "rollback", "the policy drifted far from where it started",
           "raise the KL penalty or lower the learning rate; resume from before it"),
    _check("offpolicy_kl", "KL between the sampler and the policy about to train", 0.5, 2, "rollback",
           "the samples are too stale for how far the policy moves per step",
           "lower rollout.max_staleness, or the learning rate", judged_by=("guard",)),
    _check("entropy_collapse", "entropy against its early median", 0.3, 3, "warn",
           "the policy's entropy fell under a third of its early level", "a sign that explains a collapse",
           judged_by=("doctor",)),
    _check("step_time_jump", "seconds per step against the recent median", 5.0, 1, "warn",
           "a step took far longer than the ones before", "look at the slow phase (time/...)",
           judged_by=("doctor",)),
    _check("memory_growth", "peak memory per step", 1.15, 12, "warn", "memory that only grows",
           "look for a leak before it runs out", judged_by=("doctor",)),
)}

GUARD_PHASES = {
    "rollout": ("failed_rollouts", "unscorable_rewards", "zero_reward", "reward_collapse", "empty_responses",
                "truncated_responses"),
    "offpolicy": ("offpolicy_kl",),
    "update": ("nonfinite", "zero_loss", "grad_norm_spike", "kl_explosion"),
}
BREAKERS = tuple(name for names in GUARD_PHASES.values() for name in names)
# Times a KL of the doctor's can grow by from its early level before it is an explosion (the doctor
# reads estimators whose scale it does not know; the guard knows its own and uses the threshold).
KL_GROWTH = 100.0
KL_FLOOR = 0.5  # ... and the least it must reach (nats per token: far from the reference by any estimator)
MIN_HISTORY = 5  # steps in a baseline before a relative check judges against it


def collapsed(reward: float, history: list[float], threshold: float) -> bool | None:
    """reward_collapse's rule on one step: below threshold x the baseline's mean and below its noise
    (mean - 2 standard deviations); None while the baseline is too short or too low to fall from, and
    for a reward of exactly 0, which is zero_reward's to judge (a dead source, or a reward never wired)."""
    if len(history) < MIN_HISTORY:
        return None
    baseline = math.fsum(history) / len(history)
    spread = math.sqrt(math.fsum((v - baseline) ** 2 for v in history) / len(history))
    return collapsed_from(reward, baseline, spread, threshold)


def collapsed_from(reward: float, baseline: float, spread: float, threshold: float) -> bool | None:
    """`collapsed` given the baseline's mean and standard deviation (a caller that keeps running sums)."""
    if baseline <= 0.05 or reward == 0.0:
        return None
    return reward < threshold * baseline and reward < baseline - 2 * spread


def spiked(norm: float, history: list[float], threshold: float) -> bool | None:
    """grad_norm_spike's rule: above threshold x the recent median."""
    if not math.isfinite(norm) or len(history) < MIN_HISTORY:
        return None
    median = statistics.median(history)
    return median > 0 and norm > threshold * median


def kl_exploded(kl: float, threshold: float, early: float | None = None) -> bool:
    """kl_explosion's rule: past the threshold, non-finite, or (given its early level) KL_GROWTH times
    that and at least KL_FLOOR."""
    if math.isnan(kl) or kl > threshold:
        return True
    return early is not None and early > 0 and kl > KL_GROWTH * early and kl >= KL_FLOOR
