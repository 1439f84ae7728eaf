"""A KV cache allocated once for the whole generation, written in place.

transformers' DynamicCache appends each decode step's keys and values with `torch.cat`, copying every
layer's whole cache at every step: on 2 CPU cores that was 8% of the quickstart's generation (1.0 s of
12.2, AMD EPYC, fp32). Here each layer holds a buffer of the generation's full length (prompt plus
max_new_tokens) and hands attention views of its filled part. Dropping finished rows
(`batch_select_indices`) copies only the rows that move, and only their filled part. The buffers are
zero past the filled part, so a product over a whole buffer (the engine's decode step, on a CPU in bf16)
adds nothing from there.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values [B, K, capacity, D], the first `length` positions filled."""

    capacity = 0  # set by `preallocated_cache` on a subclass

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        batch, heads, _, dim = key_states.shape
        self.key_buffer = key_states.new_zeros(batch, heads, self.capacity, dim)
        self.value_buffer = value_states.new_zeros(batch, value_states.shape[1], self.capacity, value_states.shape[-1])
        self.length = 0
        self.keys, self.values = self.key_buffer[:, :, :0], self.value_buffer[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.reserve(key_states.shape[-2])
        self.key_buffer[:, :, start : self.length] = key_states
        self.value_buffer[:, :, start : self.length] = value_states
        return self.keys, self.values

    def reserve(self, count: int = 1) -> int:
        """-> where the next `count` positions start, now part of the filled part (`update` writes them; the
        engine's fused decode step writes its keys and values there itself, `grpo.policy.kernels`)."""
        start, end = self.length, self.length + count
        if end > self.capacity:
            raise ValueError(f"KV cache of {self.capacity} positions cannot take position {end}")
        self.length = end
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]  # [B, K, L, D] views
        return start

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Row i becomes row indices[i]. A selection no longer than the batch is made in place: only the
        rows that change are copied (the engine keeps live rows where they are and moves the last live rows
        into finished rows' places), and the buffers become views of their first rows."""
        if not self.is_initialized:
            return
        rows = len(indices)
        if rows > self.key_buffer.shape[0]:
            keys, values = self.key_buffer[indices, :, : self.length], self.value_buffer[indices, :, : self.length]
            self.key_buffer = keys.new_zeros(rows, keys.shape[1], self.capacity, keys.shape[-1])
            self.value_buffer = values.new_zeros(rows, values.shape[1], self.capacity, values.shape[-1])
            self.key_buffer[:, :, : self.length], self.value_buffer[:, :, : self.length] = keys, values
        else:
            moved = (indices != torch.arange(rows, device=indices.device)).nonzero().squeeze(-1)  # [M]
            if len(moved):
                source = indices[moved]
                self.key_buffer[moved, :, : self.length] = self.key_buffer[source, :, : self.length]
                self.value_buffer[moved, :, : self.length] = self.value_buffer[source, :, : self.length]
            self.key_buffer, self.value_buffer = self.key_buffer[:rows], self.value_buffer[:rows]
        self.keys, self.values = self.key_buffer[:, :, : self.length], self.value_buffer[:, :, : self.length]

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a preallocated KV cache is not repeated; select indices instead")

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a preallocated KV cache is not cropped")


def preallocated_cache(capacity: int) -> Cache:
    """A cache whose layers each hold `capacity` positions (the longest prompt plus max_new_tokens)."""
    layer = type("PreallocatedLayer", (PreallocatedLayer,), {"capacity": capacity})
    return Cache(layer_class_to_replicate=layer)
