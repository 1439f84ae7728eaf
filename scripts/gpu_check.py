"""What a machine with a CUDA GPU can tell that a CPU cannot, in one command (about 7 minutes on an H100).

    python scripts/gpu_check.py --model-dir DIR [--out gpu_check] [--suite-seconds 270] [--device cuda]

DIR holds a model's config.json and tokenizer (weights are not needed: the quickstart's SmolLM2-135M is made
from its config with random weights, so a machine that cannot take the 98 MB GGUF still runs its shape; here:
`$GRPO_CACHE/models/smollm2-135m-instruct`, less model.safetensors). In turn:
1. the tiny preset trained on the GPU (`grpo train --config tiny`), every step's update applied;
2. `grpo plan` for the quickstart's shape, then 6 steps of it in bf16 and in float32 on the embedded engine,
   with a reward of the completion's length (random weights answer nothing right: a length reward gives the
   groups different rewards, so every update runs): generation and update seconds (median of steps 2-6) and
   each phase's peak GPU memory against the plan's prediction;
3. `bench/scaling.py --mfu` (the update's MFU per Qwen size, which the scaling projection assumes);
4. the default test suite with CUDA visible: `tiny`'s `auto` device is then the GPU, and the tests with a
   CUDA case run it (the embedded engine's own decode step against transformers' forward among them).
Logs and metrics go to --out; a summary is printed last. `--device cpu` runs steps 1-2 on the CPU (a smoke
check of this script: figures from it say nothing of a GPU) and skips 3-4.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")
REWARD = '''def text_length(completions, **unused):
    """A reward every random completion gets a different value of: each group then trains."""
    return [(len(c if isinstance(c, str) else c[-1]["content"]) % 17) / 16 for c in completions]
'''
STEPS = 6


def environment() -> dict[str, str]:
    """This environment, with the checkout's src first on PYTHONPATH (packages already on it stay)."""
    paths = [str(REPO / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run(name: str, argv: list[str], out: Path, timeout: float, cwd: Path | None = None) -> tuple[int, float]:
    """`argv` with its output in out/NAME.log -> (exit status, seconds); 124 where it ran past `timeout`."""
    start = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        try:
            status = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=environment(), cwd=cwd or REPO,
                                    timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            status = 124
    seconds = time.perf_counter() - start
    print(f"{name}: exit {status} in {seconds:.0f} s", flush=True)
    return status, seconds


def grpo(*args: str) -> list[str]:
    return [sys.executable, "-m", "grpo", *args]


def random_model(model_dir: Path, into: Path) -> None:
    """`model_dir`'s config and tokenizer, with random weights (seed 0) saved beside them."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    into.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, into / name)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), dtype=torch.float32).save_pretrained(into)


def planned_peaks(plan_log: Path) -> dict[str, float]:
    """{phase: GiB} from `grpo plan`'s lines such as '  update         4.86 GiB'."""
    found = re.findall(r"^  (\w+)\s+([\d.]+) GiB$", plan_log.read_text(), flags=re.M)
    return {phase: float(gib) for phase, gib in found}


def step_figures(metrics: Path) -> dict[str, float]:
    """Medians over steps 2 on (step 1 pays for warm-up) and the largest peak of each phase."""
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [line for line in lines if "time/step_s" in line]
    later = [line for line in steps if line["step"] >= 2]
    figures = {"steps": len(steps), "updates": sum(line.get("update/applied", 0) for line in steps)}
    for key in ("time/generate_s", "time/update_s"):
        values = [line[key] for line in later if key in line]
        figures[key] = statistics.median(values) if values else float("nan")
    for key in {k for line in steps for k in line if k.startswith("memory/")}:
        figures[key] = max(line.get(key, 0.0) for line in steps)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True, help="config.json and tokenizer of the model")
    parser.add_argument("--out", type=Path, default=Path("gpu_check"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--suite-seconds", type=float, default=270, help="the test suite's time limit")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not (args.model_dir / "config.json").is_file():
        sys.exit(f"--model-dir {args.model_dir} has no config.json: give a model directory (its weights may be absent)")

    import torch
    import transformers

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here: --device cpu runs the script's smoke check")
    summary = [f"{gpu}; torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}"]

    status, _ = run("tiny", grpo("train", "--config", "tiny", f"model.device={args.device}",
                                 f"run_dir={out / 'tiny'}"), out, 300)
    tiny = step_figures(out / "tiny" / "metrics.jsonl") if status == 0 else {}
    summary.append(f"tiny preset: exit {status}, {tiny.get('updates', 0)} of {tiny.get('steps', 0)} steps updated")

    model = out / "model"
    random_model(args.model_dir, model)
    (out / "check_reward.py").write_text(REWARD)
    shape = ["--config", "quickstart", f"model.name={model}", f"model.device={args.device}",
             "task.reward=check_reward:text_length", "eval.before_training=false", "eval.after_training=false",
             "guard.enabled=false", f"train.steps={STEPS}", "checkpoint.every_steps=0", "checkpoint.every_minutes=0",
             "checkpoint.save_final=false", "logging.tensorboard=false"]
    for dtype in ("bfloat16", "float32"):
        run(f"plan_{dtype}", grpo("plan", *shape, f"model.dtype={dtype}"), out, 300, cwd=out)
        status, _ = run(f"quickstart_shape_{dtype}", grpo("train", *shape, f"model.dtype={dtype}",
                                                           f"run_dir={out / dtype}"), out, 600, cwd=out)
        if status != 0:
            summary.append(f"quickstart shape, {dtype}: exit {status} (see {out}/quickstart_shape_{dtype}.log)")
            continue
        figures, plan = step_figures(out / dtype / "metrics.jsonl"), planned_peaks(out / f"plan_{dtype}.log")
        summary.append(f"quickstart shape, {dtype}: {figures['updates']} of {figures['steps']} steps updated; "
                       f"generation {figures['time/generate_s']:.2f} s, update {figures['time/update_s']:.2f} s "
                       f"(medians of steps 2-{STEPS}); peak GiB, measured (planned): "
                       f"generation {figures.get('memory/rollout_peak_gib', 0):.2f} ({plan.get('generation', 0):.2f}), "
                       f"update {figures.get('memory/update_peak_gib', 0):.2f} ({plan.get('update', 0):.2f})")

    if args.device == "cuda":
        status, _ = run("mfu", [sys.executable, str(REPO / "bench" / "scaling.py"), "--mfu"], out, 300)
        summary += [f"bench/scaling.py --mfu: exit {status}",
                    *(line for line in (out / "mfu.log").read_text().splitlines() if "MFU" in line)]
        status, seconds = run("suite", [sys.executable, "-m", "pytest", "-q", "-n", "10", "-p", "no:cacheprovider",
                                        "--maxfail=40", "tests"], out, args.suite_seconds)
        tail = [line for line in (out / "suite.log").read_text().splitlines()
                if line.startswith("FAILED") or re.search(r"\d+ (passed|failed)", line)]
        summary += [f"default suite with CUDA visible: exit {status} in {seconds:.0f} s", *tail[-41:]]

    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(["", *summary]))


if __name__ == "__main__":
    main()
