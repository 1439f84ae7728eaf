"""The update's per-token layers on the positions that matter, not on padding.

A micro-batch's completions are right-padded to its longest. At the quickstart's lengths (about 20 of
at most 40 new tokens, a group's samples from 10 to 40) a third or more of the positions the update
computes are padding. A decoder layer's MLP is three quarters of its matmul FLOPs and works token by
token, so during the update it runs on the needed positions alone: their hidden states are gathered
before it and its output is scattered back, zeros where nothing reads the result; so do attention's
linear projections (q, k, v, o). Attention itself keeps the padded layout it needs. Hooks rather than
wrapper modules: parameter names, which checkpoints, weight syncs and LoRA's targets use, do not change.

Outside `RealTokens.only(...)` (generation, evaluation) the hooks pass everything through.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

ATTRIBUTE = "_grpo_real_tokens"


class RealTokens(threading.local):
    """Which positions of the forward in progress are needed; the hooks read it. Per thread: a
    rollout generating ahead on another thread never sees the update's positions."""

    shape: torch.Size | None = None  # [b, T] of the hidden states the index refers to
    index: torch.Tensor | None = None  # [N] flat positions into b * T
    gathered: bool = False  # the MLP running now had its input gathered

    def __deepcopy__(self, memo: dict) -> "RealTokens":  # a copied model (the reference, the rollout's) gets its own
        return RealTokens()

    @contextlib.contextmanager
    def only(self, needed: torch.Tensor) -> Iterator[None]:
        """Within: MLPs whose input is [*needed.shape, H] run on the positions where `needed` [b, T] is true."""
        self.shape, self.index = needed.shape, needed.reshape(-1).nonzero().squeeze(-1)
        try:
            yield
        finally:
            self.shape, self.index, self.gathered = None, None, False

    def gather(self, module: torch.nn.Module, args: tuple) -> tuple | None:
        hidden = args[0]  # [b, T, H]
        self.gathered = self.index is not None and hidden.shape[:-1] == self.shape
        if not self.gathered:
            return None
        return (hidden.reshape(-1, hidden.shape[-1]).index_select(0, self.index), *args[1:])  # [N, H]

    def scatter(self, module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if not self.gathered:
            return None
        self.gathered = False
        full = output.new_zeros(self.shape.numel(), output.shape[-1])  # [b*T, H]
        return full.index_copy(0, self.index, output).view(*self.shape, output.shape[-1])  # [b, T, H]


def install(model: torch.nn.Module) -> RealTokens | None:
    """Hook every decoder layer's (a module with both `self_attn` and `mlp`) MLP and its attention's linear
    projections (q, k, v, o: token by token too); None where the model has no such layer."""
    layers = [m for m in model.modules() if isinstance(getattr(m, "self_attn", None), torch.nn.Module)
              and isinstance(getattr(m, "mlp", None), torch.nn.Module)]
    if not layers:
        return None
    real = RealTokens()
    for layer in layers:
        projections = [m for m in layer.self_attn.children() if isinstance(m, torch.nn.Linear)]
        for module in (layer.mlp, *projections):
            module.register_forward_pre_hook(real.gather)
            module.register_forward_hook(real.scatter)
    setattr(model, ATTRIBUTE, real)
    return real


def real_tokens(model: torch.nn.Module) -> RealTokens | None:
    """The model's hooks (None where it has none: a model built elsewhere). PEFT wraps the model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base, ATTRIBUTE, None)
