"""`grpo doctor RUN_DIR`: explain a run after the fact from the files it left behind.

It only reads, and reads everything tolerantly: a torn or garbled file is reported, never a crash.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from grpo.config import CheckpointConfig, RunConfig, load_config
from grpo.errors import ConfigError
from grpo.rundir.resume import resume_command
from grpo.rollout.server.history import server_history
from grpo.rundir.checkpoints import CheckpointStore
from grpo.rundir.files import JsonlLog, read_json
from grpo.rundir.lock import current_holder, describe_holder
from grpo.rundir.run import LOGS

RUN_FILES = ("config.yaml", "metrics.jsonl", "events.jsonl", "checkpoints")


def diagnose(run_dir: Path) -> list[str]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not any((run_dir / name).exists() for name in RUN_FILES):
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml, metrics.jsonl, events.jsonl "
                                "or checkpoints/)")
    out: list[str] = [f"run {run_dir}"]
    cfg = _config(run_dir, out)
    metrics, bad_metrics = JsonlLog(run_dir / "metrics.jsonl").read()
    events, bad_events = JsonlLog(run_dir / "events.jsonl").read()
    latest = {line["step"]: line for line in metrics if isinstance(line.get("step"), int)}  # replays: last word
    steps = [latest[s] for s in sorted(latest)]
    store = CheckpointStore(run_dir / "checkpoints", cfg.checkpoint if cfg else CheckpointConfig())
    valid, invalid = store.scan()
    good = [i for i in valid if i.healthy]

    out += _status(run_dir, cfg, steps, events, good)
    if steps:
        out += _update_lines(steps)
        out += _reward_lines(steps)
        out += _time_lines(steps)
    out += _trip_lines(events)
    out += _recovery_lines(events)
    out += server_history(events)
    evals, _ = JsonlLog(run_dir / "eval.jsonl").read()
    if evals:
        out.append("EVAL     " + ", ".join(f"step {e.get('step')} ({e.get('label')}): {e.get('accuracy', 0):.1%}"
                                           for e in evals[-6:]))
    out += _checkpoint_lines(run_dir, store, valid, invalid, good)
    out += _file_lines(run_dir, bad_metrics, bad_events)
    return out


def _config(run_dir: Path, out: list[str]) -> RunConfig | None:
    path = run_dir / "config.yaml"
    if not path.is_file():
        out.append("CONFIG   config.yaml is missing (a run that never finished starting)")
        return None
    try:
        return load_config(path)
    except (ConfigError, OSError, UnicodeDecodeError) as exc:
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
    applied = sum(1 for s in steps if s.get("update/applied"))
    reasons = Counter(s.get("update/skip_reason") for s in steps if not s.get("update/applied"))
    out = [f"UPDATES  {applied} of {len(steps)} steps applied an update"
           + ("; skipped: " + ", ".join(f"{n} x {r}" for r, n in reasons.most_common()) if reasons else "")]
    statuses = ("ok", "truncated", "failed", "timeout", "empty", "unscorable")
    counts = {k: sum(s.get(f"rollout/{k}", 0) or 0 for s in steps) for k in statuses}
    bad_steps = [s["step"] for s in steps if (s.get("rollout/failed_frac") or 0) > 0]
    out.append("ROLLOUTS " + ", ".join(f"{k} {v}" for k, v in counts.items())
               + (f"; failures at steps {_ranges(bad_steps)}" if bad_steps else ""))
    scored = counts["ok"] + counts["truncated"] + counts["unscorable"]
    if scored and counts["unscorable"] / scored >= 0.5:
        out.append(f"         {counts['unscorable']} answers could not be scored: the gold answers or the reward "
                   "function are at fault, not the model (check task data and task.reward)")
    return out


def _reward_lines(steps: list[dict[str, Any]]) -> list[str]:
    rewards = [(s["step"], s["reward/mean"]) for s in steps if s.get("reward/mean") is not None]
    if not rewards:
        return ["REWARD   no step produced a scored batch"]
    head = statistics.fmean(r for _, r in rewards[:5])
    tail = statistics.fmean(r for _, r in rewards[-5:])
    out = [f"REWARD   first 5 steps {head:.3f} -> last 5 steps {tail:.3f} (best {max(r for _, r in rewards):.3f})"]
    zero_runs = [st for st, r in rewards if r == 0.0]
    if zero_runs:
        out.append(f"         mean reward exactly 0 at steps {_ranges(zero_runs)}")
    no_signal = [s["step"] for s in steps if s.get("update/no_signal")]
    if no_signal:
        out.append(f"         no learning signal (all groups zero-variance) at steps {_ranges(no_signal)}")
    return out


def _time_lines(steps: list[dict[str, Any]]) -> list[str]:
    phases: Counter = Counter()
    for s in steps:
        for key, value in s.items():
            if key.startswith("time/") and key.endswith("_s") and key != "time/step_s" and isinstance(value, (int, float)):
                phases[key[5:-2]] += value
    total = sum(s.get("time/step_s") or 0.0 for s in steps)
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
        ("group_restart", "group restart(s) by the launcher")) if kinds[k]]
    out = [f"RECOVERY {', '.join(parts)}"] if parts else []
    for event in [e for e in events if e.get("kind") in ("repaired", "checkpoint_invalid", "rank_lost")][-5:]:
        out.append(f"         {event.get('kind')}: {event.get('message')}")
    return out


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
        reason = (path / "INVALID.txt").read_text().strip() if (path / "INVALID.txt").is_file() else "reason unknown"
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
            records, _ = JsonlLog(abandoned).read()
            out.append(f"FILES    {len(records)} line(s) of replayed steps kept in {abandoned.name}")
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
