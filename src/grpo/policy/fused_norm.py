"""The update's RMSNorms in a fused CPU kernel, forward and backward (`grpo.policy.kernels`).

transformers' Llama RMSNorm is seven operations over an fp32 copy of its input, and autograd's backward through
them about twenty more, each a pass over the micro-batch's [tokens, hidden] states: on an Intel Xeon with AMX the
update's products run near the machine's limit, and these passes were a tenth of an update (61 norms on
SmolLM2-135M). Here the forward is one pass (it keeps each row's 1/rms for the backward, not an fp32 copy) and the
backward one, with eager's roundings to bf16 (tested against autograd through transformers' forward); the update
measured 1.05-1.08x faster (bench/RESULTS.md).

Only bf16 norms on a CPU whose kernels are built, on plain tensors (not FSDP's shards), and only within
`fused_rms_norms`: the update's forward, where a checkpointed model does not recompute it outside.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

from grpo.policy.kernels import FusedKernels, fused_kernels

# transformers' RMSNorms whose forward is Llama's: weight * bf16(x * rsqrt(mean(x^2) + eps)).
RMS_NORMS = frozenset({"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm"})


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float, kernels: FusedKernels) -> torch.Tensor:
        x = x.contiguous()
        out, inv_rms = kernels.rms_norm_forward(x, weight, eps)  # [..., H], [rows]
        ctx.kernels = kernels
        ctx.save_for_backward(x, weight, inv_rms)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, inv_rms = ctx.saved_tensors
        grad_x, grad_weight = ctx.kernels.rms_norm_backward(grad.contiguous(), x, weight, inv_rms)
        return grad_x, grad_weight if ctx.needs_input_grad[1] else None, None, None


def _fused_forward(kernels: FusedKernels, norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.bfloat16 or x.device.type != "cpu":  # another input than the update's: the module's own
        return type(norm).forward(norm, x)
    return _RMSNorm.apply(x, norm.weight, norm.variance_epsilon, kernels)


def fuses(module: torch.nn.Module) -> bool:
    """Whether `module` is an RMSNorm the kernel repeats, with bf16 weights on a CPU as a plain tensor."""
    weight = getattr(module, "weight", None)
    return (type(module).__name__ in RMS_NORMS and type(module).__module__.startswith("transformers.models.")
            and weight is not None and weight.device.type == "cpu" and weight.dtype == torch.bfloat16
            and type(weight.data) is torch.Tensor)


@contextlib.contextmanager
def fused_rms_norms(model: torch.nn.Module) -> Iterator[int]:
    """Within: `model`'s RMSNorms that `fuses` takes run the fused kernel (forward hooks still run); yields how
    many. None where the kernels are not built here."""
    norms = [module for module in model.modules() if fuses(module)]
    kernels = fused_kernels() if norms else None
    swapped = norms if kernels is not None else []
    try:
        for norm in swapped:
            norm.forward = functools.partial(_fused_forward, kernels, norm)
        yield len(swapped)
    finally:
        for norm in swapped:
            del norm.forward  # the class's forward again
