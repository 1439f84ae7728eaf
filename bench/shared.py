"""What the benchmarks share: the repository, the quickstart's work as both trainers run it, the prompts in
grpo's order, and the machine's name."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Work:
    problems_per_step: int = 8
    samples_per_problem: int = 8
    max_new_tokens: int = 40
    temperature: float = 1.0
    lr: float = 1e-5
    micro_batch_size: int = 32
    seed: int = 0


def prompts(work: Work, count: int) -> list[dict]:
    """The first `count` training problems in grpo's order, as the chat messages grpo renders them."""
    from grpo.config import load_config
    from grpo.tasks import build_task
    from grpo.tasks.prompts import build_messages

    cfg = load_config("quickstart", [f"train.seed={work.seed}"])
    task = build_task(cfg.task, splits=("train",))
    rows = []
    for index in range(count):
        problem = task.train_problem(index, cfg.train.seed)
        rows.append({"messages": build_messages(problem, cfg.task), "gold": problem.gold})
    return rows


# The libraries' own switches that hold them to a narrower instruction set than the CPU's (to play an older
# CPU's code paths): a figure measured under one says so, as the flags alone would not.
ISA_SWITCHES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def machine() -> str:
    """The CPU as lscpu names it, with its family and model (a hypervisor may hide the marketing name) and
    its widest vector and matrix extensions, which decide the fp32 and bf16 rates."""
    fields = {"Model name": platform.processor() or "unknown CPU"}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    flags = set(fields.get("Flags", "").split())
    widest = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags][:2]
    family = f" (family {fields['CPU family']} model {fields['Model']}; {', '.join(widest) or 'no AVX2'})" \
        if "CPU family" in fields and "Model" in fields else ""
    held = [f"{name}={os.environ[name]}" for name in ISA_SWITCHES if os.environ.get(name)]
    held_text = f"; held by {', '.join(held)}" if held else ""
    return f"{fields['Model name']}{family}{held_text}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)"


def time_op(op, repeats: int) -> float:
    """Median seconds of op() over `repeats` runs, after two warm-ups (first touch of buffers, a kernel's setup)."""
    for _ in range(2):
        op()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        op()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def decode_form(dtype: str, device: str = "cpu") -> str:
    """How grpo's embedded engine runs the quickstart model's decode steps in `dtype` (a model.dtype) on
    `device`, in words (grpo.rollout.engines.decode_step): the engine's own words after a two-token generation;
    then the update's norms (`norm_form`)."""
    import torch

    from grpo.config import load_config
    from grpo.policy.models import load_model_and_tokenizer
    from grpo.rollout.engines import SamplingParams
    from grpo.rollout.engines.embedded import EmbeddedEngine

    cfg = load_config("quickstart", [f"model.dtype={dtype}"])
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch.device(device))
    engine = EmbeddedEngine(model, tokenizer, batch_size=cfg.rollout.problems_per_step * cfg.rollout.samples_per_problem)
    engine.generate([tokenizer("1+1=", add_special_tokens=False)["input_ids"]], SamplingParams(2, 1.0))
    return f"{engine.decode_form}; the update's {norm_form(model)}"


def norm_form(model) -> str:
    """How grpo's update runs `model`'s RMSNorms, in words (grpo.policy.fused_norm)."""
    from grpo.policy.fused_norm import fused_rms_norms

    with fused_rms_norms(model) as fused:
        return f"RMSNorms in fused CPU kernels ({fused})" if fused else "RMSNorms eager (transformers')"
