"""The update phase: prompts run once per group (shared KV cache) against every row run in full.

    python bench/update_step.py [--model smollm2-135m-instruct] [--groups 8] [--group-size 8]

A quickstart-shaped batch (chat prompt about 51 tokens, completions 10-40 tokens); forward and
backward of the completion log-probs, both paths measured in the same process. Prints seconds per
batch for each and the ratio.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from grpo.config import ArithConfig, ModelConfig, TaskConfig
from grpo.policy.models import load_model_and_tokenizer, resolve_device
from grpo.tasks.prompts import encode_prompt
from grpo.tasks.arith import ArithTask
from grpo.policy.update import TrainBatch, collate, completion_logprobs, micro_batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--min-len", type=int, default=10)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    device = resolve_device(args.device)
    model, tok = load_model_and_tokenizer(ModelConfig(name=args.model, dtype=args.dtype, device=args.device), device)
    model.train()
    rng = random.Random(0)
    prompts = [encode_prompt(tok, p, TaskConfig()) for p in ArithTask(ArithConfig()).eval_problems(args.groups)]
    rows = [(p, [rng.randrange(100, 1000) for _ in range(rng.randint(args.min_len, args.max_len))])
            for p in prompts for _ in range(args.group_size)]
    batch = TrainBatch([p for p, _ in rows], [c for _, c in rows], [[-1.0] * len(c) for _, c in rows],
                       torch.zeros(len(rows)))
    tokens = sum(len(p) + len(c) for p, c in rows)

    def run(shared: bool) -> float:
        start = time.perf_counter()
        for chunk in micro_batches(batch, args.micro_batch):
            mb = collate(batch, chunk, tok.pad_token_id, device)
            logprobs, _ = completion_logprobs(model, mb, 0.7, share_prompt=shared)
            (logprobs * mb.completion_mask).sum().backward()
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    seconds = {}
    for shared in (True, False):
        run(shared)  # warm-up
        seconds[shared] = min(run(shared) for _ in range(args.repeats))
    print(f"batch: {len(rows)} rows, {tokens} tokens ({args.groups} prompts x {args.group_size} samples)")
    print(f"every row in full:       {seconds[False]:.2f} s")
    print(f"prompt once per group:   {seconds[True]:.2f} s")
    print(f"speed-up: {seconds[False] / seconds[True]:.2f}x on {device.type}")


if __name__ == "__main__":
    main()
