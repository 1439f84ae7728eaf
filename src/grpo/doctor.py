"""`grpo doctor RUN_DIR`: explain a run after the fact from the files it left behind."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from grpo.rundir.checkpoints import CheckpointManager
from grpo.config import load_config
from grpo.guard.events import EventLog
from grpo.metrics import read_metrics
from grpo.guard.recovery import resume_command


def diagnose(run_dir: Path) -> list[str]:
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file() and not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml or metrics.jsonl)")
    cfg = load_config(run_dir / "config.yaml") if (run_dir / "config.yaml").is_file() else None
    lines = read_metrics(run_dir)
    latest = {line["step"]: line for line in lines}  # a step replayed after a rollback: the last word
    steps = [latest[s] for s in sorted(latest)]
    events = EventLog(run_dir / "events.jsonl").read()
    kinds = Counter(e["kind"] for e in events)
    out: list[str] = [f"run {run_dir}"]

    stopped = run_dir / "STOPPED.json"
    total = cfg.train.steps if cfg and cfg.train.steps else None
    last = steps[-1]["step"] if steps else 0
    if stopped.is_file():
        report = json.loads(stopped.read_text())
        out.append(f"STATUS   stopped by the guard at step {report['step']}: {report['cause']}")
        out.append(f"         last good checkpoint: {report['last_good_checkpoint']}")
        out.append(f"         resume with: {report['resume_command']}")
    elif kinds["crash"] and events and events[-1]["kind"] == "crash":
        crash = events[-1]
        out.append(f"STATUS   crashed at step {crash['step']}: {crash['message']}")
        out.append(f"         `grpo train --config {run_dir / 'config.yaml'}` resumes from the newest checkpoint")
    elif total and last >= total:
        out.append(f"STATUS   finished: {last} steps")
    else:
        out.append(f"STATUS   in progress or interrupted at step {last}" + (f" of {total}" if total else ""))

    if steps:
        applied = sum(1 for s in steps if s.get("update/applied"))
        reasons = Counter(s.get("update/skip_reason") for s in steps if not s.get("update/applied"))
        out.append(f"UPDATES  {applied} of {len(steps)} steps applied an update"
                   + ("; skipped: " + ", ".join(f"{n} x {r}" for r, n in reasons.most_common()) if reasons else ""))
        statuses = ("ok", "truncated", "failed", "timeout", "empty", "unscorable")
        counts = {k: sum(s.get(f"rollout/{k}", 0) for s in steps) for k in statuses}
        bad_steps = [s["step"] for s in steps if s.get("rollout/failed_frac", 0) > 0]
        out.append("ROLLOUTS " + ", ".join(f"{k} {v}" for k, v in counts.items())
                   + (f"; failures at steps {_ranges(bad_steps)}" if bad_steps else ""))
        out.extend(_reward_lines(steps))
        out.extend(_time_lines(steps))
    trips = Counter(e["evidence"].get("breaker") for e in events if e["kind"] == "trip")
    if trips:
        out.append("TRIPS    " + ", ".join(f"{b} x{n}" for b, n in trips.most_common()))
        for event in [e for e in events if e["kind"] == "trip"][-5:]:
            out.append(f"         step {event['step']}: {event['evidence'].get('breaker')} "
                       f"({event['evidence'].get('action')}): {event['message']}")
    else:
        out.append("TRIPS    none")
    if kinds["rollback"] or kinds["restart"]:
        out.append(f"RECOVERY {kinds['rollback']} rollback(s), {kinds['restart']} restart(s)")
    evals = [json.loads(x) for x in (run_dir / "eval.jsonl").read_text().splitlines()] if (
        run_dir / "eval.jsonl").is_file() else []
    if evals:
        out.append("EVAL     " + ", ".join(f"step {e['step']}: {e['accuracy']:.1%}" for e in evals[-6:]))
    if cfg is not None and (run_dir / "checkpoints").is_dir():
        ckpts = CheckpointManager(run_dir / "checkpoints", cfg.checkpoint)
        newest, good, best = ckpts.latest(), ckpts.last_good(), ckpts.best()
        out.append(f"CHECKPTS newest {_name(newest)}, last good {_name(good)}, best {_name(best)}")
        if good is not None and not stopped.is_file() and newest is not None and newest.step != good.step:
            out.append(f"         the newest checkpoint was saved unhealthy; to go back: "
                       f"{resume_command(run_dir, good.path)}")
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
    phases = Counter()
    for s in steps:
        for key, value in s.items():
            if key.startswith("time/") and key.endswith("_s") and key != "time/step_s":
                phases[key[5:-2]] += value
    total = sum(s.get("time/step_s", 0.0) for s in steps)
    if not total:
        return []
    top = ", ".join(f"{name} {value / total:.0%}" for name, value in phases.most_common(4))
    return [f"TIME     {total / len(steps):.1f} s/step; {top}"]


def _ranges(steps: list[int]) -> str:
    spans, start, prev = [], None, None
    for step in steps:
        if start is None:
            start = prev = step
        elif step == prev + 1:
            prev = step
        else:
            spans.append((start, prev))
            start = prev = step
    if start is not None:
        spans.append((start, prev))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _name(info) -> str:
    return info.path.name if info is not None else "none"
