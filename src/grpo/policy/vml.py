"""MKL's vector math (VML) made to choose its kernels before two threads can race to choose them.

torch hands contiguous float32/float64 unary ops (exp, log, sqrt, cos, sin, tanh, ...) to oneMKL's VML,
each intra-op thread its own chunk, asking for the high-accuracy kernel. oneMKL 2024.2 (the build in
torch 2.13's CPU wheels) picks a function's kernel lazily at its first call, and when that first call runs
on several threads at once, one thread can run a low-accuracy kernel for its whole chunk of that one call
(pytorch/pytorch#188792, seen on a Xeon Platinum 8481C; fixed from oneMKL 2025.0). A fresh process's first
sizable exp or sqrt then differs by up to thousands of ulp from every later one: the first rotary
embedding's cos/sin, the first update's probability ratios, AdamW's first sqrt of its second moments.
That made a resumed run part from the unbroken one on an Intel Xeon in the last bits (the chaos run's
204 metric values after a resume, weights 2.4e-7 apart), and only when the cores were idle enough for
the threads to meet. A one-element call of each function in each precision, from one thread, settles
the choice for the process (what the upstream fix does); it costs about a millisecond.
"""

from __future__ import annotations

import functools

import torch

# The torch op of each VML function torch 2.13's libtorch_cpu links (vms*/vmd*: Acos ... Trunc, Ln for
# log); tests/unit/policy/test_vml.py reads the library installed and fails on one missing here.
UNARY_OPS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2", "sin",
             "sqrt", "tan", "tanh", "trunc")


@functools.cache
def settle_dispatch() -> None:
    """Call each VML-backed op once on one element, float32 and float64, before any op runs on threads."""
    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)  # in every op's domain
        for name in UNARY_OPS:
            getattr(torch, name)(one)
