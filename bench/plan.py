"""`grpo plan`'s predicted peak memory against the peak RSS `grpo train` measures, for several configs.

    PYTHONPATH=src python bench/plan.py [--steps 2] [--configs full,lora,bf16,checkpointing] [--work-dir DIR]

Each config is the quickstart's work (SmolLM2-135M-Instruct, 8 prompts x 8 samples x 40 new tokens,
micro-batches of 32) run for --steps steps (2: the second step's phases hold AdamW's state, made by the
first step's optimizer step), evaluation and checkpoints off, in its own process. Measured peak: the largest
of the run's per-phase peaks (memory/<phase>_peak_gib: VmHWM, reset at each phase), the process's maximum
RSS, and its RSS polled every 20 ms from here (the load, before the first phase). Prints the predicted and
measured peaks and the prediction's error in %. `--predict-only FILE` predicts again for the peaks a
`--json FILE` run measured, to check a recalibration of grpo.tools.plan.Costs without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GIB = 2**30
CONFIGS = {
    "full": [],  # bf16 weights, fp32 master weights and AdamW state
    "lora": ["model.lora.rank=16"],
    "bf16": ["actor.fp32_master_weights=false"],
    "checkpointing": ["model.gradient_checkpointing=true"],
}
COMMON = ["model.dtype=bfloat16", "rollout.temperature=1.0", "actor.lr=1e-5", "eval.before_training=false",
          "eval.after_training=false", "eval.every_steps=0", "checkpoint.every_steps=0", "checkpoint.every_minutes=0",
          "checkpoint.save_final=false", "logging.tensorboard=false", "memory.check=false"]


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(name: str, overrides: list[str], steps: int, out: Path) -> dict:
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [sys.executable, "-m", "grpo", "train", "--config", "quickstart", "--run-dir", str(run_dir),
               *COMMON, f"train.steps={steps}", *overrides]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    polled = [0]
    with open(out / f"{name}.log", "w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                polled[0] = max(polled[0], _rss(child.pid))
                done.wait(0.02)

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        _, status, usage = os.wait4(child.pid, 0)
        done.set()
        watcher.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name}: grpo train failed; see {out / f'{name}.log'}")
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]

    def phase_peak(phase: str) -> float:
        return max(line.get(f"memory/{phase}_peak_gib", 0.0) for line in lines) * GIB

    phases = [v * GIB for line in lines for k, v in line.items() if k.startswith("memory/") and k.endswith("_peak_gib")]
    return {"peak": max([usage.ru_maxrss * 1024, polled[0], *phases]), "generation": phase_peak("rollout"),
            "update": phase_peak("update")}


def predict(overrides: list[str], steps: int) -> dict:
    from grpo.config import load_config
    from grpo.tools.plan import architecture, plan_memory, prompt_tokens

    cfg = load_config("quickstart", [*COMMON, f"train.steps={steps}", *overrides])
    plan = plan_memory(cfg, "cpu", architecture(cfg), prompt_tokens(cfg))
    by_phase = {p.name: p.bytes for p in plan.phases}
    return {"peak": plan.peak_bytes, "generation": by_phase["generation"], "update": by_phase["update"]}


def table(rows: list[dict]) -> str:
    """Generation is measured but not compared: after the first update the allocator keeps the update's freed
    memory resident, so generation's RSS is the update's leftover, not what generation takes."""
    lines = ["| config | overrides | predicted peak GiB | measured peak GiB | error | measured generation GiB |",
             "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        p, m = row["predicted"], row["measured"]
        lines.append(f"| {row['config']} | {' '.join(row['overrides']) or '(quickstart)'} | {p['peak'] / GIB:.2f} "
                     f"| {m['peak'] / GIB:.2f} | {100 * (p['peak'] - m['peak']) / m['peak']:+.1f}% "
                     f"| {m['generation'] / GIB:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--work-dir", default=str(REPO / "bench_runs" / "plan"))
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("overrides", nargs="*", help="dotted overrides for every config (e.g. "
                                                     "rollout.problems_per_step=4), measured and predicted alike")
    parser.add_argument("--predict-only", metavar="JSON", help="no runs: predict again for the measured peaks in "
                                                                 "this --json file (after a recalibration)")
    args = parser.parse_args()
    names = [n for n in args.configs.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {unknown[0]}; known: {', '.join(CONFIGS)}")
    if args.predict_only:
        rows = json.loads(Path(args.predict_only).read_text())
        for row in rows:
            row["predicted"] = predict(row["overrides"], args.steps)
        print(table(rows))
        return
    out = Path(args.work_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        started = time.time()
        overrides = [*args.overrides, *CONFIGS[name]]
        measured = measure(name, overrides, args.steps, out)
        predicted = predict(overrides, args.steps)
        rows.append({"config": name, "overrides": overrides, "predicted": predicted, "measured": measured,
                     "seconds": time.time() - started})
        print(f"[{name}] measured in {time.time() - started:.0f}s", flush=True)
        if args.json:  # after each config: a long series interrupted keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
