"""The output product in its two forms on this machine: which one `grpo.policy.head.blocked_product` should pick.

    PYTHONPATH=src python bench/head.py [--hidden 576] [--vocab 49152] [--dtype float32] [--out bench/RESULTS.md]

The logits hidden [N, H] @ weight.T [H, V] (generation at N = its live rows, the update's head a chunk of up
to 256 tokens at a time), timed as one product and as blocks of
`grpo.policy.head.VOCAB_BLOCK` vocabulary rows, in three alternating rounds in one process (the faster
round of each, a round being the median of its repeats). The
default shapes are the quickstart model's (SmolLM2-135M-Instruct). A ratio above 1 says the blocked form is
faster here; grpo uses it where its rule says so (printed). Measure alone: anything else running divides
the cores.
"""

from __future__ import annotations

import argparse
import datetime

import torch

import grpo.policy.head as head

from shared import machine, time_op  # bench/shared.py (bench/ is the script's folder)

ROWS = (8, 16, 32, 64, 128, 256)  # decode rows (64 = the quickstart's 8 x 8), then the update head's chunk


def in_form(blocked: bool, op):
    """`op` with grpo's rule forced to one form."""
    def run():
        head._cpu_is_avx2_only = lambda: blocked
        return op()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--dtype", default="float32", choices=("float32",),
                        help="the blocked form is considered for fp32 only (bf16 products run oneDNN's kernels)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", help="append a dated section with the machine and the table to this file")
    args = parser.parse_args()
    rule = head._cpu_is_avx2_only()
    started = datetime.datetime.now(datetime.timezone.utc)
    torch.manual_seed(0)
    weight = torch.randn(args.vocab, args.hidden)  # [V, H]
    rows = ["| N | one product GFLOP/s | vocabulary blocks GFLOP/s | blocked / one |", "|---:|---:|---:|---:|"]
    for n in ROWS:
        hidden = torch.randn(n, args.hidden)  # [N, H]
        op = lambda: head.output_logits(hidden, weight)  # noqa: E731
        flops = 2 * n * args.hidden * args.vocab
        plain, blocked = [], []
        for _ in range(3):  # alternate, so a slower spell of the machine falls on both
            plain.append(time_op(in_form(False, op), args.repeats))
            blocked.append(time_op(in_form(True, op), args.repeats))
        one, blocks = flops / min(plain) / 1e9, flops / min(blocked) / 1e9
        rows.append(f"| {n} | {one:,.0f} | {blocks:,.0f} | {blocks / one:.2f}x |")
        print(rows[-1], flush=True)
    head._cpu_is_avx2_only = lambda: rule
    header = (f"The output product, {started:%Y-%m-%d %H:%M} UTC, {machine()}; torch {torch.__version__} "
              f"(CPU capability {torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads; "
              f"H = {args.hidden}, V = {args.vocab}, {args.dtype}, blocks of {head.VOCAB_BLOCK} rows; "
              f"grpo's rule here: {'blocked' if rule else 'one product'}")
    print("\n" + header + "\n\n" + "\n".join(rows))
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join([f"## The output product: {started:%Y-%m-%d %H:%M} UTC", "", header, "", *rows, "",
                               "`python bench/head.py`", ""]) + "\n")
        print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
