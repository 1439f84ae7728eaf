"""Every anomaly in a run, with the first step it showed: found in the metrics by the same rules for
every source, plus the events the readers marked (server deaths, restarts, trips).

Thresholds are loose on purpose: the timeline must stay empty on a healthy run's ordinary noise.
"""

from __future__ import annotations

import math
import statistics

from grpo.tools.doctor.record import (ENTROPY, GRAD_NORM, LOST, LOSS, MEMORY_GIB, REWARD, REWARD_STD, STEP_S, TRUNCATED,
                                ZERO_STD, Anomaly, Evidence, RunRecord)

STREAK = 3  # steps in a row that make a streak (fewer when the run ends inside it)
COLLAPSE_RATIO = 0.5  # reward below this fraction of its recent best
# Marks that are anomalies in their own right, under their own names on the timeline.
MARK_KINDS = {
    "server_failure": "server_failure", "server_gave_up": "server_failure", "server_unreachable": "server_unreachable",
    "rollout_error": "rollout_error", "nonfinite": "nonfinite", "reward_error": "reward_error", "restart": "restart",
    "crash": "crash", "rollback": "rollback", "zero_reward": "reward_zero", "loss_zero": "loss_zero",
    "reward_collapse": "reward_collapse", "kl_explosion": "kl_explosion", "grad_spike": "grad_spike",
    "rank_lost": "rank_lost", "server_restart": "server_restart", "samples_failed": "samples_failed",
}


def anomalies(record: RunRecord) -> list[Anomaly]:
    found: list[Anomaly] = []
    found += _marks(record)
    found += _reward_zero(record)
    found += _reward_collapse(record)
    found += _streak(record, ZERO_STD, lambda v: v >= 0.999, "zero_variance", "every group's rewards identical")
    found += _streak(record, REWARD_STD, lambda v: v == 0.0, "zero_variance", "reward std exactly 0")
    found += _streak_on(record, _loss_without_gradient(record), lambda v: v == 0.0, "loss_zero", "loss exactly 0")
    found += _first(record, LOST, lambda v: v >= 0.5, "failures", "half or more of the groups lost to failed "
                    "generations, after retries")
    found += _nonfinite(record)
    found += _entropy_collapse(record)
    found += _length_limit(record)
    found += _grad_spikes(record)
    found += _step_time_jump(record)
    found += _memory_growth(record)
    return _first_of_each(found)


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


def _streak(record: RunRecord, name: str, bad, kind: str, what: str) -> list[Anomaly]:
    return _streak_on(record, record.finite_series(name), bad, kind, what)


def _loss_without_gradient(record: RunRecord) -> list[tuple[int, float]]:
    """The loss, counted as 0 only at steps whose gradient was 0 or not logged: a GRPO loss is exactly
    0 on healthy steps too (TRL's, when every completion has the same length: each group's advantages
    sum to 0), while the gradient is not."""
    return [(s, v if record.metrics[s].get(GRAD_NORM, 0.0) == 0.0 else math.nan)
            for s, v in record.finite_series(LOSS)]


def _first(record: RunRecord, name: str, bad, kind: str, what: str) -> list[Anomaly]:
    for step, value in record.series(name):
        if math.isfinite(value) and bad(value):
            return [Anomaly(step, kind, f"{what} ({name} {value:.3g})", _evidence(record, step))]
    return []


def _reward_zero(record: RunRecord) -> list[Anomaly]:
    series = record.series(REWARD)
    if not any(v > 0 for _, v in series):
        return []
    # zero after the reward had been positive: the dashboards' "reward fell to 0 at step N"
    first_positive = next(s for s, v in series if v > 0)
    later = [(s, v) for s, v in series if s > first_positive]
    return _streak_on(record, later, lambda v: v == 0.0, "reward_zero", "mean reward exactly 0")


def _streak_on(record: RunRecord, series: list[tuple[int, float]], bad, kind: str, what: str) -> list[Anomaly]:
    """The first streak: STREAK steps in a row, or 2 that reach the end of the run (of a run that has
    ended: a running one's last step is only the latest)."""
    if not series:
        return []
    end = None if record.running else series[-1][0]
    for start, last, length in _runs(series, bad):
        if length >= STREAK or (last == end and length >= 2):
            return [Anomaly(start, kind, f"{what} for {length} logged step(s) from step {start}"
                            + (" to the end" if last == end else f" to {last}"), _evidence(record, start))]
    return []


def _reward_collapse(record: RunRecord) -> list[Anomaly]:
    """The reward falls below half its recent best (a rolling mean of 5) and stays there."""
    series = record.finite_series(REWARD)
    if len(series) < 10:
        return []
    values = [v for _, v in series]
    best = None
    for i in range(5, len(values)):
        window = statistics.fmean(values[i - 5:i])
        best = window if best is None else max(best, window)
        rest = values[i:]
        ahead = values[i:i + 5]
        if record.running and len(ahead) < 5:  # a dip in the latest steps of a live run is not a collapse yet
            break
        if best > 0.05 and values[i] < COLLAPSE_RATIO * best and statistics.fmean(ahead) < COLLAPSE_RATIO * best \
                and statistics.fmean(rest) < COLLAPSE_RATIO * best:
            step = series[i][0]
            return [Anomaly(step, "reward_collapse", f"mean reward fell to {values[i]:.3g} from a recent best "
                            f"of {best:.3g} (mean {statistics.fmean(rest):.3g} after)", _evidence(record, step))]
    return []


def _nonfinite(record: RunRecord) -> list[Anomaly]:
    for step in record.steps():
        bad = [k for k, v in record.metrics[step].items() if not math.isfinite(v)]
        if bad:
            return [Anomaly(step, "nonfinite", "non-finite " + ", ".join(sorted(bad)), _evidence(record, step))]
    return []


def _early(values: list[float]) -> float | None:
    head = [v for v in values[:10] if math.isfinite(v)]
    return statistics.median(head) if len(head) >= 3 else None


def _entropy_collapse(record: RunRecord) -> list[Anomaly]:
    series = record.finite_series(ENTROPY)
    base = _early([v for _, v in series])
    if not base or base <= 0:
        return []
    runs = _runs(series[10:], lambda v: v < 0.3 * base)
    for start, last, length in runs:
        if length >= STREAK:
            value = record.metrics[start][ENTROPY]
            return [Anomaly(start, "entropy_collapse", f"entropy {value:.3g}, under a third of its early "
                            f"{base:.3g}", _evidence(record, start))]
    return []


def _length_limit(record: RunRecord) -> list[Anomaly]:
    series = record.finite_series(TRUNCATED)
    base = _early([v for _, v in series])
    if base is None or base >= 0.2:
        return []
    for start, last, length in _runs(series, lambda v: v >= 0.5):
        if length >= STREAK:
            return [Anomaly(start, "length_limit", f"{record.metrics[start][TRUNCATED]:.0%} of responses ran to "
                            f"the length limit (early on {base:.0%})", _evidence(record, start))]
    return []


def _grad_spikes(record: RunRecord) -> list[Anomaly]:
    series = record.finite_series(GRAD_NORM)
    for i in range(10, len(series)):
        median = statistics.median(v for _, v in series[max(0, i - 20):i])
        step, value = series[i]
        if median > 0 and value > 10 * median:
            return [Anomaly(step, "grad_spike", f"grad norm {value:.3g}, {value / median:.0f}x its recent median",
                            _evidence(record, step))]
    return []


def _step_time_jump(record: RunRecord) -> list[Anomaly]:
    series = record.finite_series(STEP_S)
    for i in range(10, len(series)):
        median = statistics.median(v for _, v in series[max(0, i - 20):i])
        step, value = series[i]
        if median > 0 and value > 5 * median and value > 1.0:
            return [Anomaly(step, "step_time_jump", f"step took {value:.1f}s, {value / median:.0f}x its recent "
                            f"median {median:.1f}s", _evidence(record, step))]
    return []


def _memory_growth(record: RunRecord) -> list[Anomaly]:
    """Memory that only grows: most steps up, and the last quarter 15% over the first."""
    series = record.finite_series(MEMORY_GIB)
    if len(series) < 12:
        return []
    values = [v for _, v in series]
    quarter = len(values) // 4
    head, tail = statistics.fmean(values[:quarter]), statistics.fmean(values[-quarter:])
    rises = sum(1 for a, b in zip(values, values[1:]) if b >= a) / (len(values) - 1)
    if head > 0 and tail > 1.15 * head and rises >= 0.8:
        start = next(s for s, v in series if v > head * 1.02)
        return [Anomaly(start, "memory_growth", f"memory grew steadily from {head:.2f} to {tail:.2f} GiB",
                        _evidence(record, start))]
    return []
