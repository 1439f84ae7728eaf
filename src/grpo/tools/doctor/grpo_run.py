"""A grpo run directory: the detailed account of it (status, updates, rollouts, trips, recovery,
checkpoints, files) and its `RunRecord` for the timeline and the cause.

It only reads, and reads everything tolerantly: a torn or garbled file is reported, never a crash.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from grpo import metric_keys as keys
from grpo.checks import CHECKS
from grpo.config import CheckpointConfig, FaultsConfig, RunConfig, load_config
from grpo.errors import ConfigError
from grpo.rollout.server.diagnosis import server_error
from grpo.rollout.server.history import server_history
from grpo.rundir.checkpoints import CheckpointStore
from grpo.rundir.files import read_json
from grpo.rundir.lock import current_holder, describe_holder
from grpo.rundir.resume import resume_command
from grpo.rundir.run import LOGS
from grpo.tools.doctor.record import (
    ACCURACY,
    ENTROPY,
    EVAL_ACCURACY,
    FAILED,
    GRAD_NORM,
    KL,
    LENGTH,
    LOSS,
    LOST,
    MEMORY_GIB,
    PHASE_PREFIX,
    REWARD,
    REWARD_STD,
    STATUS_PREFIX,
    STEP_S,
    TRUNCATED,
    ZERO_VARIANCE,
    Checkpoint,
    Evidence,
    Mark,
    RunRecord,
    UnreadableRun,
)
from grpo.tools.doctor.textlog import iter_lines, read_lines


def is_run_dir(path: Path) -> bool:
    """grpo's own files, or a checkpoints/ directory of grpo's step_NNNNNN ones (other frameworks
    have checkpoints/ directories too, and a metrics.jsonl of their own: tinker-cookbook, prime-rl)."""
    if not path.is_dir():
        return False
    if (path / "config.yaml").exists() or (path / "events.jsonl").exists():
        return True
    if (path / "metrics.jsonl").exists():
        return _grpo_metrics(path / "metrics.jsonl")
    return (path / "checkpoints").is_dir() and any((path / "checkpoints").glob("step_*"))


def _grpo_metrics(path: Path) -> bool:
    """Whether a metrics.jsonl is grpo's: its first line names grpo's metrics (or there is none yet)."""
    try:
        first = next((line for line in iter_lines(path) if line.strip()), None)
    except UnreadableRun:
        return True  # grpo's reader says what is wrong with it
    if first is None:
        return True
    try:
        line = json.loads(first)
    except (ValueError, RecursionError):
        return True
    return isinstance(line, dict) and any(key in line for key in _CANONICAL)


def details(run_dir: Path) -> list[str]:
    """The run's account, section by section (STATUS, UPDATES, ROLLOUTS, REWARD, ...)."""
    run_dir = Path(run_dir)
    out: list[str] = []
    cfg = _config(run_dir, out)
    metrics, bad_metrics = _read_log(run_dir / "metrics.jsonl")
    events, bad_events = _read_log(run_dir / "events.jsonl")
    steps = _latest_steps(metrics)
    store = CheckpointStore(run_dir / "checkpoints", cfg.checkpoint if cfg else CheckpointConfig())
    valid, invalid = store.scan()
    good = [i for i in valid if i.healthy]

    out += _status(run_dir, cfg, steps, events, good)
    if steps:
        out += _update_lines(steps)
    out += _replayed_rollout_lines(run_dir)
    out += _failed_sample_lines(events, steps)
    if steps:
        out += _reward_lines(steps)
        out += _time_lines(steps)
    out += _trip_lines(events)
    out += _recovery_lines(events)
    out += server_history(events)
    evals = [e for e in _read_log(run_dir / "eval.jsonl")[0]
             if _is_number(e.get("accuracy")) or e.get("status") == "failed"]
    if evals:  # a failed evaluation has no accuracy: it is shown as FAILED, never as 0%
        out.append("EVAL     " + ", ".join(
            f"step {e.get('step')} ({e.get('label')}): "
            + (f"{e['accuracy']:.1%}{_eval_rows(e)}" if _is_number(e.get("accuracy")) else "FAILED")
            for e in evals[-6:]))
    try:
        out += _checkpoint_lines(run_dir, store, valid, invalid, good)
    except (TypeError, ValueError) as exc:  # a meta.json edited by hand: its score or step of another type
        out.append(f"CHECKPTS a checkpoint's meta.json holds a value of an unexpected type ({exc})")
    out += _file_lines(run_dir, bad_metrics, bad_events)
    return out


def _eval_rows(evaluation: dict) -> str:
    """What an accuracy is over, when it is not every row (as grpo eval says it)."""
    n, scored = evaluation.get("n"), evaluation.get("scored")
    if not (_is_number(n) and _is_number(scored)) or scored == n:
        return ""
    return f" of {scored} scored rows ({n - scored} unscorable)"


def _is_number(value: Any) -> bool:
    """A value a float holds (not a bool, not a 400-digit integer)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, float) or abs(value) < 10**300


def _read_log(path: Path) -> tuple[list[dict[str, Any]], int]:
    """A JSONL log's records with their 1-based line numbers (`_line`), values of unexpected types
    dropped (a hand-edited or garbled line must not take the doctor down), and the count of lines
    that did not parse."""
    if not path.is_file():
        return [], 0
    records, bad = [], 0
    for number, text in enumerate(read_lines(path), 1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if not isinstance(record, dict):
            bad += 1
            continue
        clean = {k: v for k, v in record.items() if v is None or _is_number(v)
                 or k in _TEXT_KEYS and isinstance(v, str) or k == keys.TRIPS and isinstance(v, list)}
        if isinstance(record.get("evidence"), dict):
            clean["evidence"] = record["evidence"]
        if not isinstance(clean.get("evidence"), dict):
            clean["evidence"] = {}
        clean["_line"] = number
        records.append(clean)
    return records, bad


_TEXT_KEYS = {"kind", "message", "label", "status", "error", keys.SKIP_REASON}


def _latest_steps(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    latest = {line["step"]: line for line in metrics if isinstance(line.get("step"), int)}  # replays: last word
    return [latest[s] for s in sorted(latest)]


def _config(run_dir: Path, out: list[str]) -> RunConfig | None:
    path = run_dir / "config.yaml"
    if not path.is_file():
        out.append("CONFIG   config.yaml is missing (a run that never finished starting)")
        return None
    try:
        return load_config(path)
    except (ConfigError, OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
        out.append(f"CONFIG   config.yaml cannot be read: {exc}")
        return None


def _status(run_dir: Path, cfg: RunConfig | None, steps: list[dict], events: list[dict], good: list) -> list[str]:
    total = cfg.train.steps if cfg and cfg.train.steps else None
    last = steps[-1]["step"] if steps else 0
    resume = resume_command(run_dir, None)
    holder = current_holder(run_dir)
    stop, stop_error = read_json(run_dir / "STOPPED.json")
    summary, _ = read_json(run_dir / "summary.json")
    final_event = events[-1] if events else {}
    kind = final_event.get("kind")
    if holder is not None:
        return [f"STATUS   running now ({describe_holder(holder)}), at step {last}" + (f" of {total}" if total else "")]
    if isinstance(stop, dict):
        return [f"STATUS   stopped by the guard at step {stop.get('step')}: {stop.get('cause')}",
                f"         last good checkpoint: {stop.get('last_good_checkpoint')}",
                f"         resume with: {stop.get('resume_command')}"]
    lines = []
    if stop_error and stop_error != "missing":
        lines.append(f"STATUS   STOPPED.json is {stop_error}: the guard stopped this run but its report is lost")
    elif kind == "crash":
        message = final_event.get("message", "")
        disk = any(s in message.lower() for s in ("no space", "quota", "read-only", "diskerror"))
        what = "ran out of disk" if disk else "crashed"
        lines.append(f"STATUS   {what} at step {final_event.get('step')}: {message}")
    elif kind == "interrupted":
        lines.append(f"STATUS   interrupted at step {final_event.get('step')}: {final_event.get('message')}")
    elif isinstance(summary, dict) and summary.get("status") == "finished" or (total and last >= total):
        return [f"STATUS   finished: {last} steps"]
    else:
        lines.append(f"STATUS   ended without a word at step {last}" + (f" of {total}" if total else "")
                     + " (killed by SIGKILL, out of memory, or power loss?)")
    newest = good[-1].path if good else None
    lines.append(f"         resume with: {resume}" + (f"  (newest good checkpoint: {newest})" if newest else ""))
    return lines


def _update_lines(steps: list[dict[str, Any]]) -> list[str]:
    applied = sum(1 for s in steps if s.get(keys.APPLIED))
    reasons = Counter(s.get(keys.SKIP_REASON) for s in steps if not s.get(keys.APPLIED))
    out = [f"UPDATES  {applied} of {len(steps)} steps applied an update"
           + ("; skipped: " + ", ".join(f"{n} x {r}" for r, n in reasons.most_common()) if reasons else "")]
    counts = _status_counts(steps)
    bad_steps = [s["step"] for s in steps if (s.get(keys.FAILED_FRAC) or 0) > 0]
    out.append("ROLLOUTS " + _counts_text(steps, counts)
               + (f"; failures at steps {_ranges(bad_steps)}" if bad_steps else ""))
    scored = counts["ok"] + counts["truncated"] + counts["unscorable"]
    if scored and counts["unscorable"] / scored >= 0.5:
        out.append(f"         {counts['unscorable']} answers could not be scored: the gold answers or the reward "
                   "function are at fault, not the model (check task data and task.reward)")
    return out


def _status_counts(steps: list[dict[str, Any]]) -> dict[str, int]:
    """Attempts by status over these steps' lines."""
    return {k: sum(s.get(keys.status_count(k), 0) or 0 for s in steps) for k in _STATUSES}


def _counts_text(steps: list[dict[str, Any]], counts: dict[str, int]) -> str:
    """'ok 60, ..., timeout 16 (attempts); 16 sample(s) recovered on a retry, 0 still failed after every
    retry': the recovered and unrecovered samples where the lines count them (runs since they were)."""
    text = ", ".join(f"{k} {v}" for k, v in counts.items()) + " (attempts)"
    if any(keys.RECOVERED in s for s in steps):
        recovered = sum(s.get(keys.RECOVERED) or 0 for s in steps)
        unrecovered = sum(s.get(keys.UNRECOVERED) or 0 for s in steps)
        text += f"; {recovered} sample(s) recovered on a retry, {unrecovered} still failed after every retry"
    return text


def _replayed_rollout_lines(run_dir: Path) -> list[str]:
    """The rollouts of steps a rollback or a resume replays: their lines are kept apart from the steps
    trained on, and their failures happened all the same."""
    abandoned, _ = _read_log(run_dir / "metrics.abandoned.jsonl")
    lines = [line for line in abandoned if isinstance(line.get("step"), int)]
    if not lines:
        return []
    return [f"         and in {len(lines)} replayed step line(s) (steps {_ranges(sorted({l['step'] for l in lines}))},"
            f" metrics.abandoned.jsonl): {_counts_text(lines, _status_counts(lines))}"]


def _failed_sample_lines(events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> list[str]:
    """Steps whose samples failed, as the collector recorded them while it retried: the only word on a
    step that never logged its line."""
    failed = _rollout_failures(events)
    if not failed:
        return []
    last = steps[-1]["step"] if steps else 0
    out = []
    for step in sorted(failed)[-5:]:
        note = " (never logged)" if step > last else ""
        out.append(("FAILED   " if not out else "         ") + f"step {step}{note}: {failed[step][0]}")
    return out


def _rollout_failures(events: list[dict[str, Any]]) -> dict[int, tuple[str, dict[str, Any]]]:
    """step -> (what its rollout_failed events add up to, the last of them)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        if event.get("kind") == "rollout_failed" and isinstance(event.get("step"), int):
            by_step.setdefault(event["step"], []).append(event)
    out = {}
    for step, mine in by_step.items():
        retried, lost = Counter(), Counter()
        for event in mine:
            statuses = event["evidence"].get("statuses")
            if isinstance(statuses, dict):
                (retried if event["evidence"].get("retried") else lost).update(
                    {str(k): v for k, v in statuses.items() if _is_number(v)})
        total = retried + lost
        text = (f"{sum(total.values())} attempt(s) failed ({', '.join(f'{n} {k}' for k, n in total.most_common())}):"
                f" {sum(retried.values())} retried")
        text += (f", {sum(lost.values())} sample(s) still failed after every retry (their groups dropped)" if lost
                 else ", none left failed")
        out[step] = (text, mine[-1])
    return out


def _reward_lines(steps: list[dict[str, Any]]) -> list[str]:
    rewards = [(s["step"], s[keys.REWARD_MEAN]) for s in steps if s.get(keys.REWARD_MEAN) is not None]
    if not rewards:
        return ["REWARD   no step produced a scored batch"]
    head = statistics.fmean(r for _, r in rewards[:5])
    tail = statistics.fmean(r for _, r in rewards[-5:])
    out = [f"REWARD   first 5 steps {head:.3f} -> last 5 steps {tail:.3f} (best {max(r for _, r in rewards):.3f})"]
    zero_runs = [st for st, r in rewards if r == 0.0]
    if zero_runs:
        out.append(f"         mean reward exactly 0 at steps {_ranges(zero_runs)}")
    no_signal = [s["step"] for s in steps if s.get(keys.NO_SIGNAL)]
    if no_signal:
        out.append(f"         no learning signal (all groups zero-variance) at steps {_ranges(no_signal)}")
    return out


def _time_lines(steps: list[dict[str, Any]]) -> list[str]:
    phases: Counter = Counter()
    for s in steps:
        for name in _phases(s):
            seconds = s[keys.phase_time(name)]
            phases[name] += seconds if _is_number(seconds) else 0.0
    total = sum(s.get(keys.STEP_S) or 0.0 for s in steps)
    if not total:
        return []
    top = ", ".join(f"{name} {value / total:.0%}" for name, value in phases.most_common(4))
    return [f"TIME     {total / len(steps):.1f} s/step; {top}"]


def _trip_lines(events: list[dict[str, Any]]) -> list[str]:
    trips = [e for e in events if e.get("kind") == "trip"]
    if not trips:
        return ["TRIPS    none"]
    counts = Counter((e.get("evidence") or {}).get("breaker") for e in trips)
    out = ["TRIPS    " + ", ".join(f"{b} x{n}" for b, n in counts.most_common())]
    for event in trips[-5:]:
        evidence = event.get("evidence") or {}
        out.append(f"         step {event.get('step')}: {evidence.get('breaker')} ({evidence.get('action')}): "
                   f"{event.get('message')}")
    return out


def _recovery_lines(events: list[dict[str, Any]]) -> list[str]:
    kinds = Counter(e.get("kind") for e in events)
    parts = [f"{kinds[k]} {label}" for k, label in (
        ("rollback", "rollback(s)"), ("restart", "restart(s)"), ("interrupted", "interruption(s)"),
        ("crash", "crash(es)"), ("checkpoint_invalid", "invalid checkpoint(s) skipped"),
        ("repaired", "repair(s) of the run directory"), ("rank_lost", "rank(s) lost"),
        ("group_restart", "group restart(s) by the launcher"),
        ("server_actor_lost", "server actor(s) lost")) if kinds[k]]
    out = [f"RECOVERY {', '.join(parts)}"] if parts else []
    shown = ("rollback", "repaired", "checkpoint_invalid", "rank_lost", "server_actor_lost")
    for event in [e for e in events if e.get("kind") in shown][-5:]:
        text = rollback_text(event) if event.get("kind") == "rollback" else event.get("message")
        out.append(f"         {event.get('kind')} at step {event.get('step')}: {text}")
    return out


def rollback_text(event: dict[str, Any]) -> str:
    """'rolled back to step 0 after failed_rollouts: learning rate x0.5 from then on (0.5 x its schedule)'."""
    evidence = event.get("evidence") or {}
    scale, factor = evidence.get("lr_scale"), evidence.get("lr_factor")
    text = str(event.get("message", ""))
    if _is_number(factor) and _is_number(scale):
        return text + f": learning rate x{factor:g} from then on ({scale:g} x its schedule)"
    if _is_number(scale):
        return text + f": learning rate {scale:g} x its schedule from then on"
    return text


def _checkpoint_lines(run_dir: Path, store: CheckpointStore, valid: list, invalid: list, good: list) -> list[str]:
    if not store.root.is_dir():
        return ["CHECKPTS none"]
    newest, best = (valid[-1] if valid else None), store.best()
    out = [f"CHECKPTS {len(valid)} valid: newest {_name(newest)}, last good {_name(good[-1] if good else None)}, "
           f"best {_name(best)}"]
    for path, reason in invalid:
        out.append(f"         {path.name} is INVALID ({reason}): it will be moved to invalid/ and skipped")
    quarantined = sorted((store.root / "invalid").glob("step_*")) if (store.root / "invalid").is_dir() else []
    for path in quarantined[-5:]:
        note = path / "INVALID.txt"
        reason = " ".join(read_lines(note)).strip() if note.is_file() else "reason unknown"
        out.append(f"         invalid/{path.name}: {reason}")
    if good and newest is not None and newest.step != good[-1].step and not (run_dir / "STOPPED.json").is_file():
        out.append(f"         the newest checkpoint was saved unhealthy; to go back: "
                   f"{resume_command(run_dir, good[-1].path)}")
    return out


def _file_lines(run_dir: Path, bad_metrics: int, bad_events: int) -> list[str]:
    out = []
    for name, bad in (("metrics.jsonl", bad_metrics), ("events.jsonl", bad_events)):
        if bad:
            out.append(f"FILES    {bad} unreadable line(s) in {name} (skipped)")
    for name in LOGS:
        abandoned = run_dir / name.replace(".jsonl", ".abandoned.jsonl")
        if abandoned.is_file():
            records, _ = _read_log(abandoned)
            out.append(f"FILES    {len(records)} line(s) of steps replayed after a rollback or resume kept in "
                       f"{abandoned.name}")
    return out


def _ranges(steps: list[int]) -> str:
    spans: list[tuple[int, int]] = []
    for step in steps:
        if spans and step == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], step)
        else:
            spans.append((step, step))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _name(info) -> str:
    return info.path.name if info is not None else "none"


# metrics.jsonl key -> canonical name
_CANONICAL = {
    keys.REWARD_MEAN: REWARD, keys.REWARD_STD: REWARD_STD, keys.ACCURACY: ACCURACY, keys.LOSS: LOSS,
    keys.KL: KL, keys.ENTROPY: ENTROPY, keys.GRAD_NORM: GRAD_NORM, keys.LENGTH_MEAN: LENGTH,
    keys.TRUNCATED_FRAC: TRUNCATED, keys.ZERO_VARIANCE_FRAC: ZERO_VARIANCE, keys.FAILED_FRAC: FAILED,
    keys.STEP_S: STEP_S,
}
def read_record(run_dir: Path) -> RunRecord:
    """The run as the timeline and the cause see it. Server events and trips carry the step in progress
    when they happened, and a crash the step it crashed in."""
    run_dir = Path(run_dir)
    record = RunRecord("grpo", str(run_dir))
    cfg = _config(run_dir, record.notes)
    record.total_steps = cfg.train.steps if cfg else None
    record.running = current_holder(run_dir) is not None
    metrics_path, events_path = run_dir / "metrics.jsonl", run_dir / "events.jsonl"
    metrics, bad = _read_log(metrics_path)
    if bad:
        record.notes.append(f"{bad} unreadable line(s) in metrics.jsonl (skipped)")
    for line in _latest_steps(metrics):
        step = line["step"]
        for key, name in _CANONICAL.items():
            if _is_number(line.get(key)):
                record.put(step, name, float(line[key]))
        if KL not in record.metrics.get(step, {}) and _is_number(line.get(keys.APPROX_KL_OLD)):
            record.put(step, KL, float(line[keys.APPROX_KL_OLD]))
        lost = _lost_fraction(line)
        if lost is not None:
            record.put(step, LOST, lost)
        peaks = [v for k, v in line.items() if k.startswith(keys.MEMORY_PREFIX) and k.endswith("_peak_gib")
                 and _is_number(v)]
        if peaks:
            record.put(step, MEMORY_GIB, float(max(peaks)))
        phases = _phases(line)
        for key, value in line.items():  # in the line's order
            if key in {keys.phase_time(p): p for p in phases} and _is_number(value):
                record.put(step, PHASE_PREFIX + key[len(keys.TIME_PREFIX):-2], float(value))
            elif key in {keys.status_count(s) for s in _STATUSES} and _is_number(value):
                record.put(step, STATUS_PREFIX + key[len(keys.ROLLOUT_PREFIX):], float(value))
        record.evidence_by_step[step] = Evidence(str(metrics_path), line["_line"], _metric_text(line))
        if line.get(keys.NONFINITE):
            record.marks.append(Mark(step, "nonfinite", "non-finite loss or gradient: "
                                     f"{line.get(keys.SKIP_REASON)}", record.evidence_by_step[step]))
        unscorable = line.get(keys.UNSCORABLE_FRAC)
        if _is_number(unscorable) and unscorable >= 0.5:
            record.marks.append(Mark(step, "unscorable_rewards", f"{unscorable:.0%} of answers could not be scored",
                                     record.evidence_by_step[step]))
    for line in _read_log(run_dir / "eval.jsonl")[0]:
        if isinstance(line.get("step"), int) and _is_number(line.get("accuracy")):
            record.put(line["step"], EVAL_ACCURACY, float(line["accuracy"]))
    events, bad = _read_log(events_path)
    if bad:
        record.notes.append(f"{bad} unreadable line(s) in events.jsonl (skipped)")
    for event in events:
        mark = _event_mark(event, Evidence(str(events_path), event["_line"], _event_text(event)))
        if mark is not None:
            record.marks.append(mark)
    for step, (text, last) in _rollout_failures(events).items():
        record.marks.append(Mark(step, "samples_failed", text, Evidence(str(events_path), last["_line"],
                                                                         _event_text(last))))
    stop, _ = read_json(run_dir / "STOPPED.json")
    if isinstance(stop, dict) and isinstance(stop.get("step"), int):
        cause = str(stop.get("cause"))
        breaker = cause.split(":")[0]
        server_side = breaker in ("inference_server", "weight_sync")
        kind = "server_gave_up" if server_side else (breaker if breaker in CHECKS else "stop")
        evidence = Evidence(str(run_dir / "STOPPED.json"), 0, f"cause: {cause}")
        # A breaker's stop carries the step it judged, whose metrics were logged. A server lost at
        # the start (step 0: before step 1) or in the middle of a step stopped the first step that
        # logged nothing.
        after_last = (max(record.metrics) if record.metrics else 0) + 1
        step = max(stop["step"], after_last) if kind == "server_gave_up" else stop["step"]
        record.marks.append(Mark(step, kind, f"the guard stopped the run: {cause}", evidence))
        record.stop_checkpoint = stop.get("last_good_checkpoint")
    summary, _ = read_json(run_dir / "summary.json")
    record.finished = isinstance(summary, dict) and summary.get("status") == "finished"
    store = CheckpointStore(run_dir / "checkpoints", cfg.checkpoint if cfg else CheckpointConfig())
    valid, _ = store.scan()
    record.checkpoints = [Checkpoint(i.step, str(i.path), i.healthy) for i in valid]
    return record


def _phases(line: dict[str, Any]) -> set[str]:
    """The step's top-level phases: the loop's phases have their own peak memory; the collector's
    generate/reward times lie inside the rollout phase, and added to it would count twice."""
    timed = {k[len(keys.TIME_PREFIX):-2] for k in line
             if k.startswith(keys.TIME_PREFIX) and k.endswith("_s") and k != keys.STEP_S}
    return {p for p in timed if keys.phase_peak_memory(p) in line} or timed


def _lost_fraction(line: dict[str, Any]) -> float | None:
    """Groups lost to failures after retries; a step whose every group was lost trains nothing."""
    trained, dropped = line.get(keys.GROUPS_TRAINED), line.get(keys.GROUPS_DROPPED_INVALID)
    if not (_is_number(trained) and _is_number(dropped)):
        return None
    if line.get(keys.FAILED_FRAC) == 0:
        return 0.0  # every answer was generated: groups dropped for their rewards (unscorable) were not lost here
    if trained + dropped == 0:
        return 1.0 if (line.get(keys.FAILED_FRAC) or 0) > 0 else 0.0
    return dropped / (trained + dropped)


_STATUSES = ("ok", "truncated", "failed", "timeout", "empty", "unscorable")
_EVENT_MARKS = {"server_failed": "server_failure", "server_gave_up": "server_gave_up",
                "server_restart": "server_restart", "restart": "restart", "crash": "crash", "rollback": "rollback",
                "interrupted": "interrupted", "rank_lost": "rank_lost", "group_restart": "restart"}


def _event_mark(event: dict[str, Any], evidence: Evidence) -> Mark | None:
    step, kind, message = event.get("step"), event.get("kind"), str(event.get("message", ""))
    if not isinstance(step, int):
        return None
    if kind == "trip":
        breaker = event["evidence"].get("breaker")
        # the check's own name on the timeline, as in the guard's event and the report
        return Mark(step, str(breaker) if breaker in CHECKS else "trip", f"{breaker} tripped: {message}", evidence)
    if kind in ("server_failed", "server_gave_up", "server_restart"):
        return Mark(step, _EVENT_MARKS[kind], message, evidence)  # events carry the step in progress
    if kind == "rollback":
        return Mark(step, "rollback", rollback_text(event), evidence)
    if kind in _EVENT_MARKS:
        return Mark(step, _EVENT_MARKS[kind], message, evidence)
    return None


def _metric_text(line: dict[str, Any]) -> str:
    """The step's telling figures: a failed fraction of 0 says nothing, and is left out."""
    shown = [k for k in (keys.REWARD_MEAN, keys.ZERO_VARIANCE_FRAC, keys.FAILED_FRAC, keys.UNRECOVERED_FRAC,
                         keys.UNSCORABLE_FRAC, keys.REWARD_ERRORS, keys.LOSS, keys.GRAD_NORM, keys.SKIP_REASON)
             if not (k in (keys.FAILED_FRAC, keys.UNRECOVERED_FRAC, keys.UNSCORABLE_FRAC, keys.REWARD_ERRORS)
                     and line.get(k) == 0)]
    return "step {}: ".format(line.get("step")) + ", ".join(f"{k}={line[k]:.4g}" if _is_number(line.get(k)) else
                                                            f"{k}={line.get(k)}" for k in shown if k in line)


def _event_text(event: dict[str, Any]) -> str:
    """The event in a line; for a server's failure, with the line of its log's tail that says why, read
    as the supervisor reads it, unless the message quotes it already."""
    text = f"{event.get('kind')} at step {event.get('step')}: {event.get('message', '')}"
    said, _ = server_error([str(line) for line in event["evidence"].get("log_tail") or []])
    if said and said not in text:
        text += f" | its log: {said}"
    return text[:400]


def faults_set(run_dir: Path) -> list[str]:
    """The `testing.faults.*` keys the run's config sets (a rehearsal): a resume command clears them."""
    cfg = _config(Path(run_dir), [])
    if cfg is None:
        return []
    defaults = default_faults()
    return [name for name in vars(defaults) if getattr(cfg.testing.faults, name) != getattr(defaults, name)]


def default_faults() -> FaultsConfig:
    return FaultsConfig()
