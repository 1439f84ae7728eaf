"""The update phase in its three forms, on one batch in one process: every row run in full; each prompt
run once per group, then the rows from its KV cache (two passes); and the micro-batch packed as one
sequence (one pass: grpo.policy.attention.PackedPrompts, the default where the attention takes it).

    python bench/update_step.py [--model smollm2-135m-instruct] [--dtype float32] [--micro-batch 8,32]

A quickstart-shaped batch (chat prompt about 51 tokens, completions 10-40 tokens); forward and
backward of the completion log-probs. The forms run in turn, `--repeats` rounds in a rotating order (this
machine's speed drifts by more than the differences measured): prints each form's median seconds per
batch, and each form against packed (median of the rounds' own ratios).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from grpo.config import ArithConfig, ModelConfig, TaskConfig
from grpo.policy.models import load_model_and_tokenizer, resolve_device
from grpo.policy.update import TrainBatch, collate, completion_logprobs, micro_batches
from grpo.tasks.arith import ArithTask
from grpo.tasks.prompts import encode_prompt

from shared import machine  # bench/shared.py (bench/ is the script's folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--micro-batch", default="8,32", help="comma-separated micro-batch sizes")
    parser.add_argument("--min-len", type=int, default=10)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    device = resolve_device(args.device)
    model, tok = load_model_and_tokenizer(ModelConfig(name=args.model, dtype=args.dtype, device=args.device), device)
    model.train()
    rng = random.Random(0)
    prompts = [encode_prompt(tok, p, TaskConfig()) for p in ArithTask(ArithConfig()).eval_problems(args.groups)]
    vocab = model.config.vocab_size  # tokens 100-999, or what a smaller vocabulary (the tiny model's) has
    rows = [(p, [rng.randrange(min(100, vocab // 2), min(1000, vocab)) for _ in range(rng.randint(args.min_len,
                                                                                                  args.max_len))])
            for p in prompts for _ in range(args.group_size)]
    batch = TrainBatch([p for p, _ in rows], [c for _, c in rows], [[-1.0] * len(c) for _, c in rows],
                       torch.zeros(len(rows)), gradient_rows=list(range(len(rows))))  # every row computed
    tokens = sum(len(p) + len(c) for p, c in rows)

    forms = {"every row in full": dict(share_prompt=False), "prompt once, KV cache": dict(pack=False),
             "packed (one pass)": dict()}

    def run(micro_batch: int, form: dict) -> float:
        start = time.perf_counter()
        for chunk in micro_batches(batch, micro_batch):
            mb = collate(batch, chunk, tok.pad_token_id, device)
            logprobs, _ = completion_logprobs(model, mb, 0.7, **form)
            (logprobs * mb.completion_mask).sum().backward()
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    print(f"{machine()}, {args.model} {args.dtype}")
    print(f"batch: {len(rows)} rows, {tokens} tokens ({args.groups} prompts x {args.group_size} samples), "
          f"{args.repeats} rounds, forms in a rotating order")
    names = list(forms)
    for micro_batch in (int(m) for m in args.micro_batch.split(",")):
        for name in names:
            run(micro_batch, forms[name])  # warm-up
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.repeats):
            for name in names[round_ % len(names):] + names[: round_ % len(names)]:
                seconds[name].append(run(micro_batch, forms[name]))
        packed = seconds["packed (one pass)"]
        print(f"\nmicro-batch {micro_batch}:")
        for name in names:
            ratios = [other / mine for other, mine in zip(seconds[name], packed)]
            print(f"  {name:<24}{statistics.median(seconds[name]):7.2f} s   / packed {statistics.median(ratios):.2f}x "
                  f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x)")

if __name__ == "__main__":
    main()
