"""bf16 linear layers with their weights laid out once for oneDNN, for as long as a generation runs.

`F.linear` on a CPU hands oneDNN the weight as it is stored, and oneDNN lays it out in its own blocked
format at every call: for a decode step, which reads each weight once per token, that is a good part of
the product's time. Laid out once per generation (`torch.ops.mkldnn._reorder_linear_weight`, what
torch.compile's CPU freezing does), SmolLM2-135M's decoder products over 30 layers' own weights ran
1.43x faster at 64 rows and 1.8-1.9x at 1-17 rows, and its output head 1.3x at 64 rows, with the same
outputs to the bit (AMD EPYC 9004, AVX512-BF16); on an Intel Xeon with AMX the products ran 1.3-1.9x
faster, about 1 output in 10,000 one bf16 step apart from 40 rows on, where oneDNN sums in another
order (bench/RESULTS.md). Such rounding is already between generation's and the update's forwards
(other shapes, a KV cache), whose log-probs the embedded engine's run treats as one policy's. Laying
out all 211 weights takes about 0.17 s, against a generation's 5-7 s, and holds a second copy of them
until the generation ends.

Only bf16 weights on a CPU whose oneDNN has bf16 kernels, as plain tensors (not FSDP's shards); fp32
keeps `F.linear` (MKL), not measured against it on an AVX2-only CPU.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch

Product = Callable[[torch.Tensor], torch.Tensor]


@functools.cache
def _onednn_bf16() -> bool:
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def packs(weight: torch.Tensor) -> bool:
    """Whether `weight` [out, in] multiplies faster laid out for oneDNN here."""
    return (weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and type(weight.data) is torch.Tensor
            and weight.layout == torch.strided and _onednn_bf16())


def packed_product(weight: torch.Tensor, bias: torch.Tensor | None, rows: int) -> Product:
    """x [..., in] -> x @ weight.T + bias [..., out], with `weight` laid out once for about `rows` rows
    (any row count is correct; the layout is chosen for that one)."""
    laid_out = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)
    bias = None if bias is None else bias.detach()

    def product(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, laid_out, bias, "none", [], "")

    return product


@contextlib.contextmanager
def packed_linears(model: torch.nn.Module, rows: int,
                   head_weight: torch.Tensor | None = None) -> Iterator[Product | None]:
    """Within: each `torch.nn.Linear` of `model` whose weight `packs` multiplies through its packed copy
    (forward hooks still run); yields the packed product for `head_weight` [V, H] (packed once, not again
    as a module's), or None where it does not pack. The weights must not change within (they are copied
    at entry): for generation only."""
    swapped: list[torch.nn.Module] = []
    try:
        for module in model.modules():
            if type(module) is torch.nn.Linear and packs(module.weight) and module.weight is not head_weight:
                module.forward = packed_product(module.weight, module.bias, rows)
                swapped.append(module)
        yield packed_product(head_weight, None, rows) if head_weight is not None and packs(head_weight) else None
    finally:
        for module in swapped:
            del module.forward  # the class's forward again
