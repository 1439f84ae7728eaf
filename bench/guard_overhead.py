"""What the guard costs: its share of step time, from a run's own per-phase timings.

    python bench/guard_overhead.py runs/quickstart      # a finished run
    python bench/guard_overhead.py                      # runs 6 quickstart steps first

`time/guard_s` covers every breaker check plus the scan of all parameters for NaN/Inf after each
update; `time/step_s` is the whole step. Target: under 2%.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from grpo.train.metrics import read_metrics


def main() -> None:
    if len(sys.argv) > 1:
        run_dir = Path(sys.argv[1])
    else:
        from grpo.cli import main as grpo

        run_dir = Path(tempfile.mkdtemp()) / "run"
        grpo(["train", "--config", "quickstart", "--run-dir", str(run_dir), "train.steps=6",
              "eval.before_training=false", "eval.after_training=false", "checkpoint.every_steps=0",
              "checkpoint.every_minutes=0", "logging.tensorboard=false"])
    lines = [line for line in read_metrics(run_dir) if "time/guard_s" in line]
    if not lines:
        sys.exit(f"{run_dir}/metrics.jsonl has no time/guard_s: run a newer grpo")
    guard = [line["time/guard_s"] for line in lines]
    step = [line["time/step_s"] for line in lines]
    print(f"steps measured:          {len(lines)}")
    print(f"guard per step:          {statistics.fmean(guard) * 1000:.1f} ms (max {max(guard) * 1000:.1f} ms)")
    print(f"step time:               {statistics.fmean(step):.2f} s")
    print(f"guard share of step:     {sum(guard) / sum(step):.3%}  (target < 2%)")
    trips = sum(len(line.get("guard/trips", [])) for line in lines)
    print(f"breaker trips in run:    {trips}")


if __name__ == "__main__":
    main()
