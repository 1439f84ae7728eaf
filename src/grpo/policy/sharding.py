"""FSDP2 for the policy: each decoder layer and the root sharded across ranks, fp32 sharded weights
(the optimizer's master copy) computed in the model's dtype, gradients reduced in fp32.

Gradients are summed across ranks, not averaged: the loss is already normalised over the global
batch, so N ranks compute the update one process would. Generation and other no-grad forwards run
with the parameters all-gathered once for the whole phase, not once per token.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard


def shard(model: torch.nn.Module, compute_dtype: torch.dtype) -> None:
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    layer_types = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in layer_types]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layer type (_no_split_modules) to shard by")
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for module in fsdp_modules(model):
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)  # a plain sum: gloo (CPU) has no pre-scaled sum


def fsdp_modules(model: torch.nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def unsharded(model: torch.nn.Module) -> Iterator[None]:
    """Every parameter gathered for the duration (a collective: every rank enters together); forwards
    inside communicate nothing, so ranks may run different numbers of them."""
    modules = fsdp_modules(model)
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
        module.unshard()
    try:
        yield
    finally:
        for module in modules:
            module.reshard()
            module.set_reshard_after_forward(True, recurse=False)


def set_gradient_sync(model: torch.nn.Module, enabled: bool) -> None:
    """Off for all but the last micro-batch: gradients accumulate locally, then reduce once."""
    for module in fsdp_modules(model):
        module.set_requires_gradient_sync(enabled, recurse=False)
