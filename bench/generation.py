"""Rollout throughput: the embedded engine against Hugging Face `generate`, same model, same prompts.

    python bench/generation.py [--model smollm2-135m-instruct] [--batch 64] [--new-tokens 40]

Both sample at temperature 1 with a KV cache. The engine also returns per-token log-probs and
drops finished rows from the batch (on a GPU it keeps them, replaying its decode step as one CUDA graph); it is
timed with eager steps as well (on a GPU no graph, on a CPU no fused kernels: grpo.policy.kernels), in
the same process; `generate` is the peer. Prints tokens/s for each and the ratios.
"""

from __future__ import annotations

import argparse
import time

import torch

from grpo.config import ArithConfig, ModelConfig, TaskConfig
from grpo.policy.models import load_model_and_tokenizer, resolve_device
from grpo.rollout.engines import SamplingParams
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.tasks.arith import ArithTask
from grpo.tasks.prompts import encode_prompt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="then torch's profiler over one generation of the "
                                                               "engine: its operations by self CPU and device time")
    args = parser.parse_args()

    device = resolve_device(args.device)
    model, tok = load_model_and_tokenizer(ModelConfig(name=args.model, dtype=args.dtype, device=args.device), device)
    problems = ArithTask(ArithConfig()).eval_problems(args.batch)
    prompts = [encode_prompt(tok, p, TaskConfig()) for p in problems]
    engine = EmbeddedEngine(model, tok, batch_size=args.batch)
    params = SamplingParams(args.new_tokens, temperature=1.0)

    def ours(fast: bool = True) -> int:
        engine.cuda_graphs = engine.fused_kernels = fast
        outs = engine.generate(prompts, params)  # each row's seed is its index
        return sum(len(o.token_ids) for o in outs)

    padded = tok.pad({"input_ids": prompts}, return_tensors="pt", padding_side="left").to(device)

    @torch.inference_mode()
    def peer() -> int:
        out = model.generate(**padded, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             max_new_tokens=args.new_tokens, pad_token_id=tok.pad_token_id)
        new = out[:, padded["input_ids"].shape[1]:]
        eos = tok.eos_token_id
        # count tokens up to and including the first EOS, as the engine does
        return sum(int((row == eos).nonzero()[0]) + 1 if (row == eos).any() else len(row) for row in new)

    results = {}
    forms = [("embedded engine", ours), ("HF generate", peer)]
    # The engine's steps eager too: what replaying them as a CUDA graph, or the fused CPU kernels, gain.
    forms.insert(1, ("engine, eager", lambda: ours(fast=False)))
    for name, fn in forms:
        fn()  # warm-up
        tokens, seconds = 0, 0.0
        for _ in range(args.repeats):
            start = time.perf_counter()
            tokens += fn()
            seconds += time.perf_counter() - start
        results[name] = tokens / seconds
        print(f"{name:<16} {tokens / args.repeats:7.0f} tokens/batch  {results[name]:8.1f} tokens/s")
    if args.profile:
        print("\n".join(profile(ours, device)))
    ours()  # the decode form named below is the fast path's
    print(f"{'CUDA graph' if device.type == 'cuda' else 'fused kernels'} / eager steps: "
          f"{results['embedded engine'] / results['engine, eager']:.2f}x")
    print(f"ratio (engine / generate): {results['embedded engine'] / results['HF generate']:.2f}x "
          f"on {device.type}, batch {args.batch}, {args.new_tokens} new tokens, {args.dtype}; the engine's decode "
          f"steps: {engine.decode_form}")


def profile(generation, device: torch.device, top: int = 20) -> list[str]:
    """Where one generation's time goes: the wall time, then the operations that took the most host time
    (launching and Python around them) beside their device time (where a GPU runs them)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        start = time.perf_counter()
        generation()
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    device_total = sum(e.self_device_time_total for e in events) / 1e6
    host_total = sum(e.self_cpu_time_total for e in events) / 1e6
    lines = [f"one generation profiled: {wall:.2f} s wall; operations' self host time {host_total:.2f} s, "
             f"self device time {device_total:.2f} s", "",
             "| operation | calls | host s | device s |", "|---|---:|---:|---:|"]
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]:
        lines.append(f"| {e.key} | {e.count} | {e.self_cpu_time_total / 1e6:.3f} | {e.self_device_time_total / 1e6:.3f} |")
    return lines


if __name__ == "__main__":
    main()
