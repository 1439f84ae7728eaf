"""How much the quickstart learns, over seeds: each run's held-out accuracy before -> after, and per setting
the mean and standard deviation of the gain, beside the standard error of one 128-problem accuracy; then
grpo against TRL's GRPOTrainer on the same work, both scored by the same `grpo eval`.

    PYTHONPATH=src python bench/learning.py [--sync-seeds 0,1,2,3,4] [--async-seeds 0,1,2] [--staleness 1,2]
                                            [--trl-seeds 0,1] [--trl-python .venv-trl/bin/python]
                                            [--work-dir bench_runs/learning] [--out bench/RESULTS.md]
                                            [--set KEY=VALUE ...]

Every run is `grpo quickstart` with `train.seed=S` (which orders the data and seeds the sampling; the
held-out problems do not change with it), synchronous (`rollout.max_staleness=0`) for --sync-seeds and at
each --staleness for --async-seeds, on the embedded engine. A run already finished in --work-dir (its
summary.json says so, for the same overrides) is read, not run again, so the set can be run in parts.
`--set` passes overrides to every grpo run (`--set train.steps=2 --set model.name=tiny` for a smoke check);
the TRL side takes those of rollout.*, actor.lr, algo.micro_batch_size and train.steps, and always trains
the quickstart's model.

TRL (--trl-seeds; empty to skip): GRPOTrainer through bench/trl_runner.py in TRL's environment, on the
quickstart's prompts in grpo's order, model, reward (the last \\boxed{} or number against the gold), 8 x 8
samples, the preset's new tokens (32 since 2026-11-27, 40 before), temperature 0.7, lr 2e-5 constant, no KL, DAPO's token-level loss (grpo's
`token_mean`), group-scaled rewards, micro-batch 32, 25 steps, in the precision grpo's `model.dtype=auto` picks on the machine: fp32 weights
under bf16 autocast where bf16 is native (grpo: bf16 weights, fp32 master weights), plain fp32 elsewhere. Its saved model, and grpo's final model of the same seed, are scored
by `grpo eval --config quickstart` (greedy, the quickstart's 128 held-out problems).

A gain is "beyond noise" here when the difference of two settings' mean gains exceeds twice its standard
error, sqrt(sd_a^2/n_a + sd_b^2/n_b), with at least 2 runs on each side.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from shared import REPO, Work, machine, prompts  # bench/shared.py (bench/ is the script's folder)


@dataclass
class Run:
    label: str
    seed: int
    before: float | None
    after: float
    n: int

    @property
    def gain(self) -> float | None:
        return None if self.before is None else self.after - self.before


def seeds(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def grpo_run(seed: int, staleness: int, work_dir: Path, overrides: list[str]) -> Run:
    run_dir = work_dir / f"grpo-s{staleness}-seed{seed}"
    wanted = [f"train.seed={seed}", f"rollout.max_staleness={staleness}", *overrides]
    marker = run_dir / "bench_overrides.json"
    summary_path = run_dir / "summary.json"
    if not (summary_path.is_file() and marker.is_file() and json.loads(marker.read_text()) == wanted):
        shutil.rmtree(run_dir, ignore_errors=True)
        print(f"grpo quickstart, staleness {staleness}, seed {seed} ...", flush=True)
        subprocess.run([sys.executable, "-m", "grpo", "quickstart", "--run-dir", str(run_dir), *wanted],
                       check=True, env=_env(), cwd=REPO)
        marker.write_text(json.dumps(wanted))
    summary = json.loads(summary_path.read_text())
    return Run(f"grpo, staleness {staleness}", seed, summary["before"]["accuracy"], summary["after"]["accuracy"],
               summary["after"]["n"])


def grpo_eval(model_dir: Path, overrides: list[str]) -> tuple[float, int]:
    """Greedy accuracy of a saved model by `grpo eval --config quickstart` (the quickstart's held-out set)."""
    done = subprocess.run([sys.executable, "-m", "grpo", "eval", "--config", "quickstart", "--model", str(model_dir),
                           *[o for o in overrides if o.startswith(("task.", "eval.", "rollout.max_new_tokens"))]],
                          check=True, capture_output=True, text=True, env=_env(), cwd=REPO)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["accuracy"], result["n"]


def trl_run(seed: int, trl_python: str, work_dir: Path, overrides: list[str]) -> Path:
    """TRL trained on the quickstart's work (with the overrides of rollout.*, actor.lr, algo.micro_batch_size and
    train.steps); -> its saved model directory."""
    from grpo.config import load_config
    from grpo.policy.models import resolve_model_source
    from grpo.precision import concrete_dtype

    save_dir = work_dir / f"trl-seed{seed}" / "model"
    if (save_dir / "config.json").is_file():
        return save_dir
    applies = ("rollout.", "actor.lr", "algo.micro_batch_size", "train.steps")
    cfg = load_config("quickstart", [f"train.seed={seed}", *(o for o in overrides if o.startswith(applies))])
    work = Work(problems_per_step=cfg.rollout.problems_per_step, samples_per_problem=cfg.rollout.samples_per_problem,
                max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature, lr=cfg.actor.lr,
                micro_batch_size=cfg.algo.micro_batch_size, seed=seed)
    steps = cfg.train.steps
    # TRL in the precision grpo's model.dtype=auto picks here: fp32 weights under bf16 autocast where bf16 is
    # native (grpo: bf16 weights, fp32 master weights), plain fp32 where it is not (grpo: float32).
    precision = "fp32_autocast" if concrete_dtype(cfg.model.dtype, "cpu") == "bfloat16" else "fp32"
    spec = {**work.__dict__, "steps": steps, "precision": precision,
            "model_dir": resolve_model_source(cfg.model.name), "prompts": prompts(work, steps * work.problems_per_step),
            "save_dir": str(save_dir)}
    save_dir.parent.mkdir(parents=True, exist_ok=True)
    spec_path = save_dir.parent / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # TRL's environment never imports grpo
    env["HF_HUB_OFFLINE"] = "1"
    print(f"TRL GRPOTrainer, seed {seed} ...", flush=True)
    with open(save_dir.parent / "trl.log", "w") as log:
        subprocess.run([trl_python, str(REPO / "bench" / "trl_runner.py"), str(spec_path)], check=True,
                       stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    return save_dir


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}


def standard_error(accuracy: float, n: int) -> float:
    """Of one accuracy measured on n problems (binomial)."""
    return math.sqrt(max(accuracy * (1 - accuracy), 0.0) / n)


def spread(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else float("nan"))


def summarise(groups: dict[str, list[Run]]) -> list[str]:
    lines = ["| setting | seed | before | after | gain (points) |", "|---|---:|---:|---:|---:|"]
    for runs in groups.values():
        for r in runs:
            before = "" if r.before is None else f"{r.before:.1%}"
            gain = "" if r.gain is None else f"{100 * r.gain:+.1f}"
            lines.append(f"| {r.label} | {r.seed} | {before} | {r.after:.1%} | {gain} |")
    lines += ["", "| setting | runs | after, mean +- sd | gain, mean +- sd (points) | s.e. of one "
              "accuracy (n problems) |", "|---|---:|---:|---:|---:|"]
    for label, runs in groups.items():
        after_mean, after_sd = spread([r.after for r in runs])
        gains = [100 * r.gain for r in runs if r.gain is not None]
        gain_text = "" if not gains else "{:+.1f} +- {:.1f}".format(*spread(gains))
        lines.append(f"| {label} | {len(runs)} | {after_mean:.1%} +- {100 * after_sd:.1f} | {gain_text} | "
                     f"{100 * standard_error(after_mean, runs[0].n):.1f} points (n = {runs[0].n}) |")
    return lines


def compare(name_a: str, a: list[float], name_b: str, b: list[float]) -> str:
    if len(a) < 2 or len(b) < 2:
        return f"{name_b} against {name_a}: too few runs to compare (at least 2 each)"
    (mean_a, sd_a), (mean_b, sd_b) = spread(a), spread(b)
    diff, se = mean_b - mean_a, math.sqrt(sd_a**2 / len(a) + sd_b**2 / len(b))
    verdict = "beyond noise" if abs(diff) > 2 * se else "within noise"
    return f"{name_b} against {name_a}: {diff:+.1f} points (standard error {se:.1f}): {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sync-seeds", default="0,1,2,3,4")
    parser.add_argument("--async-seeds", default="0,1,2")
    parser.add_argument("--staleness", default="1,2")
    parser.add_argument("--trl-seeds", default="0,1", help="empty: no TRL runs")
    parser.add_argument("--trl-python", default=str(REPO / ".venv-trl" / "bin" / "python"))
    parser.add_argument("--work-dir", default=str(REPO / "bench_runs" / "learning"))
    parser.add_argument("--out", help="append a dated section with the machine and the tables to this file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every grpo run")
    args = parser.parse_args()
    trl_seeds = seeds(args.trl_seeds)
    if trl_seeds and not Path(args.trl_python).is_file():
        raise SystemExit(f"{args.trl_python} does not exist: build TRL's environment with scripts/setup_trl_env.sh, "
                         "or pass --trl-seeds ''")
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)

    groups: dict[str, list[Run]] = {}
    for staleness, run_seeds in [(0, seeds(args.sync_seeds)), *((s, seeds(args.async_seeds)) for s in seeds(args.staleness))]:
        runs = [grpo_run(seed, staleness, work_dir, args.set) for seed in run_seeds]
        if runs:
            groups[runs[0].label] = runs
    verdicts = []
    sync = groups.get("grpo, staleness 0", [])
    for label, runs in groups.items():
        if label != "grpo, staleness 0":
            verdicts.append(compare("synchronous", [100 * r.gain for r in sync], label,
                                    [100 * r.gain for r in runs]))

    if trl_seeds:
        same_eval: dict[str, list[Run]] = {"grpo, by grpo eval": [], "TRL, by grpo eval": []}
        for seed in trl_seeds:
            grpo_model = work_dir / f"grpo-s0-seed{seed}"
            if not grpo_model.is_dir():
                grpo_run(seed, 0, work_dir, args.set)
            final = json.loads((grpo_model / "summary.json").read_text())["final_model"]
            accuracy, n = grpo_eval(Path(final), args.set)
            same_eval["grpo, by grpo eval"].append(Run("grpo, by grpo eval", seed, None, accuracy, n))
            accuracy, n = grpo_eval(trl_run(seed, args.trl_python, work_dir, args.set), args.set)
            same_eval["TRL, by grpo eval"].append(Run("TRL, by grpo eval", seed, None, accuracy, n))
        groups.update(same_eval)
        verdicts.append(compare("grpo", [100 * r.after for r in same_eval["grpo, by grpo eval"]], "TRL",
                                [100 * r.after for r in same_eval["TRL, by grpo eval"]]) + " (accuracy after)")

    header = (f"The quickstart over seeds, {started:%Y-%m-%d %H:%M} UTC, {machine()}"
              + (f"; overrides {' '.join(args.set)}" if args.set else ""))
    lines = summarise(groups) + [""] + [f"- {v}" for v in verdicts]
    print("\n" + header + "\n\n" + "\n".join(lines))
    if args.out:
        command = ("python bench/learning.py " + " ".join(f"--{k.replace('_', '-')} {v!r}" for k, v in
                   [("sync_seeds", args.sync_seeds), ("async_seeds", args.async_seeds),
                    ("staleness", args.staleness), ("trl_seeds", args.trl_seeds)]))
        with open(args.out, "a") as f:
            f.write("\n".join([f"## Learning over seeds: {started:%Y-%m-%d %H:%M} UTC", "", header, "", *lines, "",
                               f"`{command}`", ""]) + "\n")
        print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
