"""The users' story, replayed with a real SGLang server: the quickstart trains against a supervised SGLang
(CPU) server, which is SIGKILLed mid-rollout at a chosen step (as the users' server died at step 188),
and the run goes on. It prints when the death was noticed, how long the restart took, the samples that
failed and were retried, how many samples of the dead server were trained on after it died (the claim:
none), and the held-out accuracy before -> after, beside an unbroken run's when --reference is given.

    PYTHONPATH=src python bench/server_killed.py [--kill-step 12] [--python .venv-sglang/bin/python]
                                                 [--reference] [--work-dir bench_runs/server_killed]
                                                 [--set KEY=VALUE ...]

Exit status 1 when a sample of the dead server was trained on after its death or a step is missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from shared import REPO, machine  # bench/shared.py (bench/ is the script's folder)


def quickstart(run_dir: Path, python: str, overrides: list[str]) -> float:
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "grpo", "quickstart", "--run-dir", str(run_dir), "rollout.engine=sglang",
                    f"rollout.server.python={python}", "rollout.server.kv_cache_gib=1", *overrides], check=True,
                   cwd=REPO)
    return time.monotonic() - started


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def story(run_dir: Path, kill_step: int) -> tuple[list[str], bool]:
    """-> the lines to print, and whether the claims held."""
    log = events(run_dir)
    of = lambda kind: [e for e in log if e["kind"] == kind]  # noqa: E731
    (injected,) = of("fault_injected")
    (failed,) = of("server_failed")
    ready = [e for e in of("server_ready") if e["evidence"]["incarnation"] == failed["evidence"]["incarnation"] + 1]
    seeds = of("server_seeds")
    lines = {m["step"]: m for m in (json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines())}
    dead = f"sglang-0#{failed['evidence']['incarnation']}"
    trained_from_dead = [s for s, m in lines.items() if s >= kill_step and dead in m.get("rollout/sources", [])]
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = sorted(lines)
    ok = not trained_from_dead and steps == list(range(1, len(steps) + 1)) and bool(ready)
    killed = lines.get(kill_step, {})
    out = [
        f"server SIGKILLed at step {injected['step']} (mid-rollout, as its first request of the step went out)",
        f"noticed after {failed['time'] - injected['time']:.2f} s: {failed['message']}",
        f"restarted and ready after {ready[0]['time'] - failed['time']:.1f} s (start {ready[0]['evidence']['seconds']} s)"
        if ready else "NEVER restarted",
        f"step {kill_step}: {killed.get('rollout/failed', 0)} samples failed, {killed.get('rollout/retries', 0)} "
        f"retried, trained on {killed.get('rollout/sources')}",
        f"samples of {dead} trained on after its death: {len(trained_from_dead)}"
        + (f" (steps {trained_from_dead})" if trained_from_dead else ""),
        f"steps logged: {len(steps)} ({steps[0]}-{steps[-1]}), none missing or twice"
        if ok else f"steps logged: {steps}",
        f"seed check: {seeds[0]['message'] if seeds else 'not made'}",
        f"held-out accuracy: {summary['before']['accuracy']:.1%} -> {summary['after']['accuracy']:.1%} "
        f"(n={summary['after']['n']})",
    ]
    return out, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kill-step", type=int, default=12)
    parser.add_argument("--python", default=str(REPO / ".venv-sglang/bin/python"))
    parser.add_argument("--reference", action="store_true", help="also an unbroken run, for its accuracy")
    parser.add_argument("--work-dir", default=str(REPO / "bench_runs/server_killed"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    work = Path(args.work_dir)
    print(f"machine: {machine()}")
    killed_dir = work / "killed"
    seconds = quickstart(killed_dir, args.python, [f"testing.faults.kill_server_at_steps=[{args.kill_step}]",
                                                   *args.set])
    out, ok = story(killed_dir, args.kill_step)
    print(f"\nquickstart on SGLang, server killed at step {args.kill_step}: {seconds:.0f} s in all")
    for line in out:
        print(f"  {line}")
    if args.reference:
        reference = work / "unbroken"
        seconds = quickstart(reference, args.python, args.set)
        summary = json.loads((reference / "summary.json").read_text())
        print(f"\nthe same, unbroken: {seconds:.0f} s; held-out accuracy {summary['before']['accuracy']:.1%} -> "
              f"{summary['after']['accuracy']:.1%} (SGLang ignores seeds here: not the same samples, so not the "
              "same run)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
