"""Every anomaly in a run, with the first step it showed: found in the metrics by the checks of
`grpo.checks` (the guard's names, thresholds and patience) for every source, plus the events
the readers marked (server deaths, restarts, trips, crashes).

Patience counts steps, not logged entries: a streak of n entries logged every L steps covers n x L
steps (TRL logs every 10 by default). A run that has ended inside a streak of two entries or more
shows it too (its last steps are bad; no more will come). Every rule is one pass over the steps.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from grpo.checks import CHECKS, KL_GROWTH, MIN_HISTORY, collapsed_from, kl_exploded
from grpo.tools.doctor.record import (
    ACCURACY,
    ADVANTAGE_STD,
    CRITIC_GRAD_NORM,
    CRITIC_LOSS,
    ENTROPY,
    GRAD_NORM,
    KL,
    LOSS,
    LOST,
    MEMORY_GIB,
    REWARD,
    REWARD_STD,
    STEP_S,
    TRUNCATED,
    ZERO_VARIANCE,
    Anomaly,
    Evidence,
    RunRecord,
)

# Marks that are anomalies in their own right, under their own names on the timeline: every check's
# (a grpo run's trips) and the events.
EVENTS = ("server_failure", "server_unreachable", "rollout_error", "restart", "crash", "rollback", "rank_lost",
          "server_restart", "samples_failed")
MARK_KINDS = {**{name: name for name in CHECKS}, **{name: name for name in EVENTS}, "server_gave_up": "server_failure"}
BASELINE_STEPS = 20  # the guard's guard.baseline_steps
# What the update is made of, or what it is judged by: a NaN in one of these is a blow-up.
UPDATE_METRICS = (LOSS, GRAD_NORM, CRITIC_LOSS, CRITIC_GRAD_NORM, REWARD, ACCURACY)


def anomalies(record: RunRecord) -> list[Anomaly]:
    interval = logging_interval(record)
    found: list[Anomaly] = []
    found += _marks(record)
    found += _zero_reward(record, interval)
    found += _reward_collapse(record, interval)
    found += _zero_variance(record, interval)
    found += _zero_loss(record, interval)
    found += _first(record, LOST, lambda v: v >= CHECKS["failed_rollouts"].threshold, "failed_rollouts",
                    "half or more of the groups lost to failed generations, after retries")
    found += _nonfinite(record)
    found += _entropy_collapse(record, interval)
    found += _truncation(record, interval)
    found += _grad_spikes(record)
    found += _kl_explosion(record, interval)
    found += _step_time_jump(record)
    found += _memory_growth(record)
    return _first_of_each(found)


def logging_interval(record: RunRecord) -> int:
    """Steps between logged entries: the commonest gap (1 when every step is logged)."""
    steps = record.steps()
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    if not gaps:
        return 1
    return max(1, statistics.mode(gaps[-200:]))


RECURRING = {"restart", "server_failure", "rollback", "server_restart", "crash"}  # every distinct step
BURSTY = {"server_unreachable", "rollout_error", "samples_failed"}  # the first step of each burst
BURST_GAP = 5  # steps without one that end a burst


def _first_of_each(found: list[Anomaly]) -> list[Anomaly]:
    """One anomaly per kind (its first step); events that recur meaningfully (restarts, server
    failures, rollbacks) at each distinct step; error lines that come in bursts (connection errors,
    timeouts), at the first step of each burst."""
    kept: dict[tuple[str, int | None], Anomaly] = {}
    last_seen: dict[str, int] = {}
    for anomaly in sorted(found, key=lambda a: (a.step, a.evidence is None)):
        kind = anomaly.kind
        if kind in BURSTY:
            if kind not in last_seen or anomaly.step > last_seen[kind] + BURST_GAP:
                kept[(kind, anomaly.step)] = anomaly
            last_seen[kind] = anomaly.step
            continue
        kept.setdefault((kind, anomaly.step if kind in RECURRING else None), anomaly)
    return sorted(kept.values(), key=lambda a: (a.step, a.kind))


def _marks(record: RunRecord) -> list[Anomaly]:
    return [Anomaly(m.step, MARK_KINDS[m.kind], m.detail, m.evidence, from_event=True)
            for m in record.marks if m.kind in MARK_KINDS]


def _evidence(record: RunRecord, step: int) -> Evidence | None:
    return record.evidence_by_step.get(step)


def _runs(series: list[tuple[int, float]], bad) -> list[tuple[int, int, int]]:
    """(first step, last step, length) of each run of consecutive logged steps where bad(value)."""
    runs, start, length, last = [], None, 0, None
    for step, value in series:
        if bad(value):
            if start is None:
                start, length = step, 0
            length += 1
            last = step
        elif start is not None:
            runs.append((start, last, length))
            start = None
    if start is not None:
        runs.append((start, last, length))
    return runs


def _long_enough(record: RunRecord, start: int, last: int, length: int, patience: int, interval: int,
                 end: int | None, least_at_end: int | None = None) -> bool:
    """A streak trips at `patience` steps (entries x the logging interval) and at least min(patience, 3)
    entries (one entry logged every 10 steps is one noisy sample, not 10 bad steps). After the fact, a
    streak that reaches the end of the run needs no more steps than came: min(patience, 3) entries, or
    two when the run ended without finishing (it died inside the streak), or `least_at_end` where the
    caller knows more."""
    least = least_at_end or (2 if not record.finished else min(patience, 3))
    if last == end and length >= least:
        return True
    return last - start + interval >= patience and length >= min(patience, 3)


def _streak_on(record: RunRecord, series: list[tuple[int, float]], bad, kind: str, what: str,
               interval: int = 1, least_at_end: int | None = None) -> list[Anomaly]:
    """The first streak of `kind`'s patience (see _long_enough)."""
    if not series:
        return []
    end = None if record.running else series[-1][0]
    patience = CHECKS[kind].patience
    for start, last, length in _runs(series, bad):
        if _long_enough(record, start, last, length, patience, interval, end, least_at_end):
            return [Anomaly(start, kind, f"{what} for {length} logged step(s) from step {start}"
                            + (" to the end" if last == end else f" to {last}"), _evidence(record, start))]
    return []


def _loss_without_gradient(record: RunRecord) -> list[tuple[int, float]]:
    """The loss, counted as 0 only at steps whose gradient was 0 or not logged and whose advantages did not
    differ: a GRPO loss is exactly 0 on healthy steps too (TRL's, when every completion has the same length:
    each group's advantages sum to 0; MiniMind's, printed to 4 places), while the gradient and the
    advantages' spread are not."""
    return [(s, v if record.metrics[s].get(GRAD_NORM, 0.0) == 0.0
             and record.metrics[s].get(ADVANTAGE_STD, 0.0) == 0.0 else math.nan)
            for s, v in record.finite_series(LOSS)]


def _first(record: RunRecord, name: str, bad, kind: str, what: str) -> list[Anomaly]:
    for step, value in record.series(name):
        if math.isfinite(value) and bad(value):
            return [Anomaly(step, kind, f"{what} ({name} {value:.3g})", _evidence(record, step))]
    return []


def _zero_reward(record: RunRecord, interval: int) -> list[Anomaly]:
    """Mean reward exactly 0 (the guard's zero_reward), from the first step or after real rewards. A log
    whose every entry scores exactly 0 scored nothing in what it logged, however few its entries (with
    fewer than all, a sparse reward's bad luck is not ruled out)."""
    threshold = CHECKS["zero_reward"].threshold

    def zero(value: float) -> bool:
        return 0 <= value <= threshold

    series = record.finite_series(REWARD)
    whole = 1 if series and all(zero(v) for _, v in series) else None
    return _streak_on(record, series, zero, "zero_reward", "mean reward exactly 0", interval, whole)


def _zero_loss(record: RunRecord, interval: int) -> list[Anomaly]:
    """The loss exactly 0 with no gradient (the guard's zero_loss). A log whose every entry is so, with the KL
    to the reference exactly 0 at a step past the first (the updates before it moved nothing), learned
    nothing in what it logged, however few its entries."""
    series = _loss_without_gradient(record)
    unmoved = series and all(v == 0.0 for _, v in series) and any(
        s > 1 and record.metrics[s].get(KL) == 0.0 for s, _ in series)
    return _streak_on(record, series, lambda v: v == 0.0, "zero_loss", "loss exactly 0", interval,
                      1 if unmoved else None)


def _zero_variance(record: RunRecord, interval: int) -> list[Anomaly]:
    """Groups whose rewards are all identical, averaged over a window of `patience` steps (at least 3
    entries) that starts at such a step: a sparse reward a group hits now and then is still no signal,
    while one group per step scoring the same by chance now and then is not. Per step: the fraction of
    such groups, or 1 when the reward's spread is exactly 0."""
    check = CHECKS["zero_variance"]
    series = record.finite_series(ZERO_VARIANCE) or [(s, 1.0 if v == 0.0 else 0.0)
                                                for s, v in record.finite_series(REWARD_STD)]
    size = max(3, -(-check.patience // interval))
    window: deque[tuple[int, float]] = deque()
    total = 0.0
    end = None if record.running else (series[-1][0] if series else None)
    least_at_end = 2 if not record.finished else min(3, size)
    # A log whose every entry has all groups identical and a gradient of exactly 0 learned nothing in what
    # it logged, however few its entries: one is enough (with fewer than all, chance is not ruled out).
    if series and all(v >= check.threshold and record.metrics[s].get(GRAD_NORM) == 0.0 for s, v in series):
        least_at_end = 1
    trailing: int | None = None  # the first step of the current run of such steps
    for step, value in series:
        window.append((step, value))
        total += value
        if len(window) > size:
            total -= window.popleft()[1]
        trailing = (trailing or step) if value >= check.threshold else None
        if step == end and trailing is not None and trailing < step:  # the run ended inside a streak
            while window[0][0] < trailing:
                total -= window.popleft()[1]
        full = len(window) == size or (step == end and len(window) >= least_at_end)
        if full and window[0][1] >= check.threshold and total / len(window) >= check.threshold:
            start = window[0][0]
            return [Anomaly(start, "zero_variance", f"every group's rewards identical at {total / len(window):.0%} "
                            f"of the groups over {len(window)} logged step(s) from step {start}",
                            _evidence(record, start))]
    return []


def _reward_collapse(record: RunRecord, interval: int) -> list[Anomaly]:
    """The guard's reward_collapse: below threshold x the moving baseline of the healthy steps before
    (their mean and spread, kept as running sums: one pass), for its patience."""
    check = CHECKS["reward_collapse"]
    history: deque[float] = deque()
    total = squares = 0.0
    series = record.finite_series(REWARD)
    end = None if record.running else (series[-1][0] if series else None)
    start = None
    count = 0
    for step, value in series:
        bad = None
        if len(history) >= MIN_HISTORY:
            mean = total / len(history)
            spread = math.sqrt(max(0.0, squares / len(history) - mean * mean))
            bad = collapsed_from(value, mean, spread, check.threshold)
        if bad is None and history and value == 0.0:
            continue  # zero_reward's: neither breaks a collapse nor joins the baseline
        if bad:
            if start is None:
                start, baseline, count = step, total / len(history), 0
            count += 1
            if _long_enough(record, start, step, count, check.patience, interval, end):
                return [Anomaly(start, "reward_collapse", f"mean reward fell to {record.metrics[start][REWARD]:.3g} "
                                f"from a baseline of {baseline:.3g} and stayed below {check.threshold:g}x it for "
                                f"{count} logged step(s)", _evidence(record, start))]
            continue  # a bad step never enters the baseline
        start = None
        history.append(value)
        total, squares = total + value, squares + value * value
        if len(history) > BASELINE_STEPS:
            gone = history.popleft()
            total, squares = total - gone, squares - gone * gone
    return []


def _nonfinite(record: RunRecord) -> list[Anomaly]:
    """A non-finite value in a step's metrics; a diagnostic alone (kl, entropy) is one only when the step
    logged neither a finite loss nor a finite gradient norm: with either finite, the NaN never reached the
    update (TRL logs kl as NaN at every step when beta is 0 and nothing computes it)."""
    for step in record.steps():
        metrics = record.metrics[step]
        bad = [k for k, v in metrics.items() if not math.isfinite(v)]
        if bad and not any(k in UPDATE_METRICS for k in bad) and any(
                math.isfinite(metrics.get(k, math.nan)) for k in (LOSS, GRAD_NORM)):
            continue
        if bad:
            return [Anomaly(step, "nonfinite", "non-finite " + ", ".join(sorted(bad)), _evidence(record, step))]
    return []


def _early(values: list[float]) -> float | None:
    head = [v for v in values[:10] if math.isfinite(v)]
    return statistics.median(head) if len(head) >= 3 else None


def _entropy_collapse(record: RunRecord, interval: int) -> list[Anomaly]:
    check = CHECKS["entropy_collapse"]
    series = record.finite_series(ENTROPY)
    base = _early([v for _, v in series])
    if not base or base <= 0:
        return []
    for start, last, length in _runs(series[10:], lambda v: v < check.threshold * base):
        if last - start + interval >= check.patience * interval:
            value = record.metrics[start][ENTROPY]
            return [Anomaly(start, "entropy_collapse", f"entropy {value:.3g}, under {check.threshold:g} of its early "
                            f"{base:.3g}", _evidence(record, start))]
    return []


def _truncation(record: RunRecord, interval: int) -> list[Anomaly]:
    """truncated_responses: most completions cut at the length limit, having not been early on (a task
    whose answers always run long is not truncating more). The cause decides whether the reward fell
    with it."""
    check = CHECKS["truncated_responses"]
    series = record.finite_series(TRUNCATED)
    head = [v for _, v in series[:max(1, min(10, len(series) // 4))]]
    base = statistics.median(head) if len(series) >= 2 else None
    if base is None or base >= 0.5:
        return []
    end = None if record.running else series[-1][0]
    for start, last, length in _runs(series, lambda v: v >= check.threshold):
        if length >= 2 or last == end:
            return [Anomaly(start, "truncated_responses", f"{record.metrics[start][TRUNCATED]:.0%} of responses ran "
                            f"to the length limit (early on {base:.0%})", _evidence(record, start))]
    return []


def _grad_spikes(record: RunRecord) -> list[Anomaly]:
    check = CHECKS["grad_norm_spike"]
    series = record.finite_series(GRAD_NORM)
    window: deque[float] = deque(maxlen=BASELINE_STEPS)
    for i, (step, value) in enumerate(series):
        if i >= 10 and window:
            median = statistics.median(window)
            if median > 0 and value > check.threshold * median:
                return [Anomaly(step, "grad_norm_spike", f"grad norm {value:.3g}, {value / median:.0f}x its recent "
                                "median", _evidence(record, step))]
        window.append(value)
    return []


def _kl_explosion(record: RunRecord, interval: int) -> list[Anomaly]:
    """KL past the guard's threshold, or grown KL_GROWTH-fold from its early level (the doctor reads
    other frameworks' estimators, whose scale it does not know)."""
    check = CHECKS["kl_explosion"]
    series = record.series(KL)
    if not any(math.isfinite(v) for _, v in series):
        return []  # never computed (TRL logs NaN when beta is 0): no KL to have exploded
    early_values = [v for _, v in series[:3] if math.isfinite(v) and v > 0]
    early = min(early_values) if early_values else None  # where the policy started from the reference
    end = None if record.running else (series[-1][0] if series else None)
    # The guard's threshold is for grpo's own estimator; another framework's KL is judged by its growth.
    threshold = check.threshold if record.source == "grpo" else math.inf
    bad = lambda v: kl_exploded(v, threshold, early)  # noqa: E731
    for start, last, length in _runs(series, bad):
        if _long_enough(record, start, last, length, check.patience, interval, end):
            start = _onset(series, start, bad)
            value = record.metrics[start][KL]
            grown = f", {value / early:.0f}x its early {early:.3g}" if early and math.isfinite(value) else ""
            return [Anomaly(start, "kl_explosion", f"KL {value:.3g}{grown} (threshold {threshold:g}, or "
                            f"{KL_GROWTH:g}x its early level)", _evidence(record, start))]
    return []


def _onset(series: list[tuple[int, float]], start: int, bad, gap: int = 3) -> int:
    """The first step of a drift confirmed at `start`: earlier bad entries at most `gap` entries apart
    belong to it (a KL that crossed, dipped once, and crossed again for good began at its first crossing)."""
    index = next(i for i, (s, _) in enumerate(series) if s == start)
    onset, misses = start, 0
    for step, value in reversed(series[:index]):
        if bad(value):
            onset, misses = step, 0
        else:
            misses += 1
            if misses >= gap:
                break
    return onset


def _step_time_jump(record: RunRecord) -> list[Anomaly]:
    check = CHECKS["step_time_jump"]
    series = record.finite_series(STEP_S)
    window: deque[float] = deque(maxlen=BASELINE_STEPS)
    for i, (step, value) in enumerate(series):
        if i >= 10 and window:
            median = statistics.median(window)
            if median > 0 and value > check.threshold * median and value > 1.0:
                return [Anomaly(step, "step_time_jump", f"step took {value:.1f}s, {value / median:.0f}x its recent "
                                f"median {median:.1f}s", _evidence(record, step))]
        window.append(value)
    return []


def _memory_growth(record: RunRecord) -> list[Anomaly]:
    """Memory that only grows: most steps up, and the last quarter 15% over the first."""
    check = CHECKS["memory_growth"]
    series = record.finite_series(MEMORY_GIB)
    if len(series) < check.patience:
        return []
    values = [v for _, v in series]
    quarter = len(values) // 4
    head, tail = statistics.fmean(values[:quarter]), statistics.fmean(values[-quarter:])
    rises = sum(1 for a, b in zip(values, values[1:]) if b >= a) / (len(values) - 1)
    if head > 0 and tail > check.threshold * head and rises >= 0.8:
        start = next(s for s, v in series if v > head * 1.02)
        return [Anomaly(start, "memory_growth", f"memory grew steadily from {head:.2f} to {tail:.2f} GiB",
                        _evidence(record, start))]
    return []
