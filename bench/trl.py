"""grpo and TRL's GRPOTrainer side by side on the same work, in one invocation: seconds per step, tokens/s by
phase, peak RSS and mean completion length, in both precision pairings.

    PYTHONPATH=src python bench/trl.py [--steps 3] [--warmup 1] [--trl-python .venv-trl/bin/python]
                                       [--pairings fp32,bf16] [--micro-batch 8,32] [--device cpu]
                                       [--out bench/RESULTS.md]

The work: SmolLM2-135M-Instruct, two-digit additions (grpo's arith task: the same prompts, in the same order,
for both), 8 prompts x 8 samples x 40 new tokens, temperature 1.0, lr 1e-5, no KL, no gradient
checkpointing, micro-batches of 8 and of 32 rows (--micro-batch; each size on both sides; TRL's default
`per_device_train_batch_size` is 8). After the tables, each side at its faster micro-batch: a user runs TRL
as fast as it goes, so that is the fair ratio. Pairings:
  fp32: grpo bf16 weights with fp32 master weights and AdamW state  vs  TRL fp32 weights under bf16 autocast
  bf16: grpo bf16 weights without master weights                    vs  TRL pure bf16 weights (no autocast)
  float32: grpo float32 (model.dtype=auto where bf16 products are not faster) vs  TRL float32, no autocast
On a CPU without bf16 instructions (AVX2 only) bf16 products are ~100x slower than fp32 ones on both sides:
there only the float32 pairing finishes in reasonable time, and it is what either side would run.
Each configuration runs in its own process (its peak RSS is its own), for --warmup untimed steps and then
--steps timed ones. TRL runs in its own environment (scripts/setup_trl_env.sh builds .venv-trl) through
bench/trl_runner.py, offline, on the Hugging Face directory grpo's loader makes of the packaged GGUF.

Phases: generation is sampling the completions (grpo: time/generate_s; TRL: its `_generate`); the update is
forward, backward and optimizer step (grpo: time/update_s; TRL: the step less its generation batch's
preparation). Tokens/s of both phases count completion tokens (what is sampled and what is trained on).
grpo's update computes only the rows of non-zero advantage (a group whose rewards all agree adds exactly
nothing to the loss or its gradient: grpo.policy.update.rows_with_gradient), TRL's every row: the tables
give the share of the rows each computed.
Peak RSS: grpo resets VmHWM at each phase (for its per-phase memory metrics), so its peak is the largest of
those and of the process's own maximum RSS; TRL's is its VmHWM at the end.
--device cuda runs both sides on the GPU (grpo model.device=cuda; TRL without use_cpu, generating with
transformers' generate as grpo's embedded engine does, no vLLM) and adds each side's peak GPU memory
(torch.cuda.max_memory_allocated: grpo's largest phase peak, TRL's at the end).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from shared import REPO, Work, decode_form, machine, prompts  # bench/shared.py (bench/ is the script's folder)

MODEL = "smollm2-135m-instruct"
PAIRINGS = {"fp32": ("fp32 master weights", "fp32 weights + bf16 autocast"),
            "bf16": ("pure bf16 (no master weights)", "pure bf16 weights"),
            "float32": ("float32", "float32 weights, no autocast")}
# grpo's overrides and TRL's precision per pairing.
GRPO_PRECISION = {"fp32": ["model.dtype=bfloat16", "actor.fp32_master_weights=true"],
                  "bf16": ["model.dtype=bfloat16", "actor.fp32_master_weights=false"],
                  "float32": ["model.dtype=float32"]}
TRL_PRECISION = {"fp32": "fp32_autocast", "bf16": "bf16", "float32": "fp32"}


@dataclass
class Result:
    label: str
    step_s: float  # median over the timed steps
    generate_s: float
    update_s: float
    completion_tokens: float  # per step, mean over the timed steps
    peak_rss_bytes: int
    wall_s: float  # the whole process: load, warm-up and timed steps
    rows_computed: float = 1.0  # the share of the rows the update computed, mean over the timed steps
    peak_gpu_bytes: int = 0  # --device cuda: torch.cuda.max_memory_allocated

    @property
    def generate_tokens_per_s(self) -> float:
        return self.completion_tokens / self.generate_s

    @property
    def update_tokens_per_s(self) -> float:
        return self.completion_tokens / self.update_s

    def mean_length(self, work: Work) -> float:
        return self.completion_tokens / (work.problems_per_step * work.samples_per_problem)


def run_child(command: list[str], log: Path, env: dict[str, str]) -> tuple[int, float]:
    """-> (the child's maximum RSS in bytes, wall seconds); its output goes to `log`."""
    started = time.time()
    with open(log, "w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
        raise SystemExit(f"{' '.join(command[:4])} ... failed (exit {child.returncode}); the end of {log}:\n{tail}")
    return usage.ru_maxrss * 1024, time.time() - started


def run_grpo(work: Work, pairing: str, steps: int, warmup: int, out: Path, device: str) -> Result:
    run_dir = out / f"grpo-{pairing}-mb{work.micro_batch_size}"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [
        f"model.name={MODEL}", f"model.device={device}", *GRPO_PRECISION[pairing], "model.gradient_checkpointing=false",
        f"rollout.problems_per_step={work.problems_per_step}", f"rollout.samples_per_problem={work.samples_per_problem}",
        f"rollout.max_new_tokens={work.max_new_tokens}", f"rollout.temperature={work.temperature}",
        f"actor.lr={work.lr}", "actor.schedule=constant", "actor.warmup_steps=0", "actor.max_grad_norm=1.0",
        "algo.kl_coef=0",
        f"algo.micro_batch_size={work.micro_batch_size}", f"train.steps={warmup + steps}", f"train.seed={work.seed}",
        "eval.before_training=false", "eval.after_training=false", "eval.every_steps=0",
        "checkpoint.every_steps=0", "checkpoint.every_minutes=0", "checkpoint.save_final=false",
        "logging.tensorboard=false",
    ]
    command = [sys.executable, "-m", "grpo", "train", "--config", "quickstart", "--run-dir", str(run_dir), *overrides]
    # src first; packages already on the path (a GPU machine's carried wheels) stay
    python_path = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "HF_HUB_OFFLINE": "1"}
    max_rss, wall = run_child(command, out / f"{run_dir.name}.log", env)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    if len(lines) != warmup + steps:
        raise SystemExit(f"{run_dir}/metrics.jsonl has {len(lines)} steps, expected {warmup + steps}")
    # A step whose groups all agree has no update (GRPO's no-signal skip): only steps that did the whole
    # work (generation and update, as TRL's every step does) are timed.
    timed = [x for x in lines[warmup:] if "time/update_s" in x]
    if not timed:
        raise SystemExit(f"{run_dir}: no timed step updated the policy; run more --steps")
    # grpo's phase peaks are of the device the model is on: the process's RSS on a CPU, allocated memory on a GPU
    phase_peaks = [int(v * 2**30) for line in lines for k, v in line.items()
                   if k.startswith("memory/") and k.endswith("_peak_gib")]
    on_gpu = device != "cpu"
    return Result(
        label=f"grpo, {PAIRINGS[pairing][0]}",
        step_s=statistics.median(x["time/step_s"] for x in timed),
        generate_s=statistics.median(x["time/generate_s"] for x in timed),
        update_s=statistics.median(x["time/update_s"] for x in timed),
        completion_tokens=statistics.mean(x["perf/generated_tokens"] for x in timed),
        peak_rss_bytes=max([max_rss, *([] if on_gpu else phase_peaks)]),
        wall_s=wall,
        rows_computed=statistics.mean(x["actor/rows_computed"] / (work.problems_per_step * work.samples_per_problem)
                                      for x in timed),
        peak_gpu_bytes=max(phase_peaks, default=0) if on_gpu else 0,
    )


def run_trl(work: Work, pairing: str, steps: int, warmup: int, out: Path, trl_python: str,
            model_dir: str, rows: list[dict], device: str) -> Result:
    name = f"trl-{TRL_PRECISION[pairing]}-mb{work.micro_batch_size}"
    spec = {**work.__dict__, "steps": warmup + steps, "precision": TRL_PRECISION[pairing],
            "model_dir": model_dir, "prompts": rows, "device": device}
    spec_path = out / f"{name}.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # TRL's environment never imports grpo
    env["HF_HUB_OFFLINE"] = "1"
    log = out / f"{name}.log"
    max_rss, wall = run_child([trl_python, str(REPO / "bench" / "trl_runner.py"), str(spec_path)], log, env)
    report = json.loads(log.read_text().strip().splitlines()[-1])
    timed = report["steps"][warmup:]
    if len(timed) != steps:
        raise SystemExit(f"{log}: {len(report['steps'])} steps reported, expected {warmup + steps}")
    return Result(
        label=f"TRL, {PAIRINGS[pairing][1]} ({report['attn_implementation']} attention)",
        step_s=statistics.median(x["step_s"] for x in timed),
        generate_s=statistics.median(x["generate_s"] for x in timed),
        update_s=statistics.median(x["update_s"] for x in timed),
        completion_tokens=statistics.mean(x["completion_tokens"] for x in timed),
        peak_rss_bytes=max(report["peak_rss_bytes"], max_rss),
        wall_s=wall,
        peak_gpu_bytes=report.get("peak_gpu_bytes", 0),
    )


def table(pairs: list[tuple[str, Result, Result]], work: Work, gpu: bool) -> list[str]:
    """On a GPU the seconds have two decimals (steps take one or two) and each side's peak GPU memory is added."""
    digits, gpu_head, gpu_rule = (2, " peak GPU MiB |", "---:|") if gpu else (1, "", "")
    lines = ["| config | s/step | generation s | generation tok/s | update s | update tok/s | rows computed "
             f"| peak RSS MiB |{gpu_head} mean completion len |", f"|---|---:|---:|---:|---:|---:|---:|---:|{gpu_rule}---:|"]
    for _, grpo, trl in pairs:
        for r in (grpo, trl):
            gpu_cell = f" {r.peak_gpu_bytes / 2**20:,.0f} |" if gpu else ""
            lines.append(f"| {r.label} | {r.step_s:.{digits}f} | {r.generate_s:.{digits}f} "
                         f"| {r.generate_tokens_per_s:.0f} | {r.update_s:.{digits}f} | {r.update_tokens_per_s:.0f} "
                         f"| {r.rows_computed:.0%} | {r.peak_rss_bytes / 2**20:,.0f} |{gpu_cell} "
                         f"{r.mean_length(work):.1f} |")
    gpu_head = " grpo GPU memory / TRL's |" if gpu else ""
    lines += ["", f"| pairing | TRL time / grpo time | grpo RSS / TRL RSS |{gpu_head}", f"|---|---:|---:|{gpu_rule}"]
    for name, grpo, trl in pairs:
        gpu_cell = f" {grpo.peak_gpu_bytes / max(trl.peak_gpu_bytes, 1):.2f}x |" if gpu else ""
        lines.append(f"| {name}: {PAIRINGS[name][0]} vs {PAIRINGS[name][1]} | {trl.step_s / grpo.step_s:.2f}x "
                     f"| {grpo.peak_rss_bytes / trl.peak_rss_bytes:.2f}x |{gpu_cell}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before them")
    parser.add_argument("--pairings", default=default_pairings(),
                        help="comma-separated: fp32, bf16, float32 (default: all three on a CPU with bf16 "
                             "instructions, float32 alone on one without)")
    parser.add_argument("--micro-batch", default="8,32", help="comma-separated rows per forward/backward, each run "
                                                               "on both sides (grpo algo.micro_batch_size; TRL "
                                                               "per_device_train_batch_size); each divides 64")
    parser.add_argument("--trl-python", default=str(REPO / ".venv-trl" / "bin" / "python"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where both sides run")
    parser.add_argument("--work-dir", default=str(REPO / "bench_runs" / "trl"), help="run directories and logs")
    parser.add_argument("--out", help="append a dated section with the machine and the tables to this file "
                                      "(e.g. bench/RESULTS.md)")
    args = parser.parse_args()
    pairings = [p for p in args.pairings.split(",") if p]
    if not pairings or any(p not in PAIRINGS for p in pairings):
        raise SystemExit(f"--pairings {args.pairings!r}: give one or more of {', '.join(PAIRINGS)}")
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit("--steps must be at least 1 and --warmup 0 or more")
    if args.device == "cuda" and not gpu_name():
        raise SystemExit("--device cuda: torch sees no CUDA device here")
    if not Path(args.trl_python).is_file():
        raise SystemExit(f"{args.trl_python} does not exist: build TRL's environment with scripts/setup_trl_env.sh")
    from grpo.policy.models import resolve_model_source

    sizes = [int(x) for x in args.micro_batch.split(",") if x.strip()]
    steps_rows = Work().problems_per_step * Work().samples_per_problem
    if not sizes or any(size < 1 or steps_rows % size for size in sizes):
        raise SystemExit(f"--micro-batch {args.micro_batch}: each size must divide the step's {steps_rows} completions")
    out = Path(args.work_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = resolve_model_source(MODEL)  # the packaged GGUF, dequantised once to a HF directory
    started = datetime.datetime.now(datetime.timezone.utc)
    by_size: dict[int, list[tuple[str, Result, Result]]] = {}
    for size in sizes:
        work = Work(micro_batch_size=size)
        rows = prompts(work, (args.warmup + args.steps) * work.problems_per_step)
        for name in pairings:
            print(f"[{name}, micro-batch {size}] grpo ...", flush=True)
            grpo = run_grpo(work, name, steps=args.steps, warmup=args.warmup, out=out, device=args.device)
            print(f"[{name}, micro-batch {size}] TRL ...", flush=True)
            trl = run_trl(work, name, args.steps, args.warmup, out, args.trl_python, model_dir, rows, args.device)
            by_size.setdefault(size, []).append((name, grpo, trl))
    lines = []
    for size, pairs in by_size.items():
        work = Work(micro_batch_size=size)
        lines += [f"Micro-batch {size}:", "", *table(pairs, work, gpu=args.device == "cuda"), ""]
    lines += best_lines(by_size)
    # The form of grpo's decode steps in each precision its pairings ran (model.dtype=bfloat16 or float32).
    dtypes = sorted({o.split("=")[1] for p in pairings for o in GRPO_PRECISION[p] if o.startswith("model.dtype=")})
    lines += ["", *(f"grpo's decode steps in {dtype}: {decode_form(dtype, args.device)}" for dtype in dtypes)]
    where = f"{gpu_name()} (host: {machine()})" if args.device == "cuda" else machine()
    header = (f"grpo vs TRL {_trl_version(args.trl_python)} GRPOTrainer, {started:%Y-%m-%d %H:%M} UTC, {where}; "
              f"{Work().problems_per_step} prompts x {Work().samples_per_problem} samples x {Work().max_new_tokens} "
              f"new tokens, micro-batch {args.micro_batch}, {args.warmup} warm-up + {args.steps} timed steps "
              "(medians)")
    print("\n" + header + "\n\n" + "\n".join(lines))
    if args.out:
        section = [f"## grpo vs TRL: {started:%Y-%m-%d %H:%M} UTC", "", header, "", *lines,
                   "", f"`python bench/trl.py --steps {args.steps} --warmup {args.warmup} --pairings "
                   f"{args.pairings} --micro-batch {args.micro_batch} --device {args.device}`", ""]
        path = Path(args.out)
        prefix = "" if path.is_file() else "# Benchmark results\n\n"
        with open(path, "a") as f:
            f.write(prefix + "\n".join(section) + "\n")
        print(f"appended to {path}")


def default_pairings() -> str:
    from grpo.precision import BF16_INSTRUCTIONS, cpu_flags

    return "fp32,bf16,float32" if (BF16_INSTRUCTIONS | {"amx_bf16"}) & cpu_flags() else "float32"


def best_lines(by_size: dict[int, list[tuple[str, Result, Result]]]) -> list[str]:
    """Each side at its own faster micro-batch, per pairing."""
    lines = ["Each side at its faster micro-batch:", "",
             "| pairing | grpo s/step (micro-batch) | TRL s/step (micro-batch) | TRL time / grpo time |",
             "|---|---:|---:|---:|"]
    for name in PAIRINGS:
        runs = [(size, grpo, trl) for size, pairs in by_size.items() for n, grpo, trl in pairs if n == name]
        if not runs:
            continue
        grpo_size, grpo, _ = min(runs, key=lambda r: r[1].step_s)
        trl_size, _, trl = min(runs, key=lambda r: r[2].step_s)
        lines.append(f"| {name} | {grpo.step_s:.1f} ({grpo_size}) | {trl.step_s:.1f} ({trl_size}) "
                     f"| {trl.step_s / grpo.step_s:.2f}x |")
    return lines


def gpu_name() -> str:
    """The CUDA device's name, or "" where torch sees none."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


def _trl_version(python: str) -> str:
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('trl'))"],
                           capture_output=True, text=True)
    return probe.stdout.strip() or "(unknown version)"


if __name__ == "__main__":
    main()
