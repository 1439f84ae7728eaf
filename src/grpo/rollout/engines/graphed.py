"""A generation's decode steps replayed as one CUDA graph.

On a GPU a decode step of a small model is bound by the host launching kernels, not by the GPU: on an
NVIDIA H200 the quickstart's model took about 1,500 launches a step (30 layers of norms, projections,
rotary embedding, attention, MLP), its kernels 0.27 s of a 2.8 s generation (bench/RESULTS.md,
2026-11-27). Captured once per generation batch, a step is one graph launch: there, generations of 64 rows x
40 tokens ran 3.5-4.4x faster than with eager steps, 2.5x transformers' `generate` (bench/generation.py).

A graph replays fixed shapes at fixed addresses, so for the whole batch:
- every row keeps computing after it finishes (its tokens are ignored); rows are never dropped;
- keys and values go into the preallocated KV cache's buffers (`grpo.rollout.engines.kv_cache`) at a
  position held on the device, and attention runs over the whole buffers under an additive mask of every
  position (`DecodeStep.static`): past the filled ones its weights are exactly 0;
- the tokens fed, the positions, the cache position and the mask live in buffers the graph reads; the step
  advances the positions itself.
The sampler stays outside (each row draws from its own generator). Capture takes one eager step to warm up
plus the capture itself; a batch's 32-40 decode steps repay it many times over.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from grpo.policy.attention import additive
from grpo.rollout.engines.decode_step import DecodeStep


def graphs_apply(device: torch.device) -> bool:
    """Whether the engine's decode steps on `device` take this form: on a GPU, where they replay a graph."""
    return device.type == "cuda"


@functools.cache
def warm_up_stream(device: torch.device) -> torch.cuda.Stream:
    """One side stream per device for every capture's warm-up: cuBLAS keeps a workspace for each stream it
    has run on, for the life of the process (32 MiB on an H200), so a stream per capture leaked that much a
    generation (measured, 2026-11-28)."""
    return torch.cuda.Stream(device)


class GraphedDecode:
    """`step` and `head` over the batch of a generation whose prompts are prefilled into `cache`, captured:
    call it with the tokens of the live rows, get their logits."""

    def __init__(self, step: DecodeStep, head: Callable[[torch.Tensor], torch.Tensor], cache,
                 attention_mask: torch.Tensor, next_position: torch.Tensor) -> None:
        """attention_mask [R, P] (1 on real prompt positions), next_position [R]: the position each row's first
        generated token takes; the cache holds the prompts' P positions, in buffers of its capacity C."""
        self.step, self.head = step, head
        self.buffers = [(layer.key_buffer, layer.value_buffer) for layer in cache.layers]
        rows, filled = attention_mask.shape
        capacity = self.buffers[0][0].shape[2]
        dtype, device = self.buffers[0][0].dtype, attention_mask.device
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)  # [R] fed at the next replay
        self.positions = next_position.clone()  # [R]
        self.write = torch.tensor([filled], device=device)  # [1] the cache position written next
        self.bias = torch.full((rows, capacity), torch.finfo(dtype).min, dtype=dtype, device=device)  # [R, C]
        self.bias[:, :filled] = additive(attention_mask.bool(), dtype)
        self.graph: torch.cuda.CUDAGraph | None = None
        if device.type == "cuda":  # elsewhere (the tests' CPU) each call runs the same static step eagerly
            self.graph, self.logits = self._capture(device)

    def _capture(self, device: torch.device) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """-> the graph of one step and its logits [R, V], rewritten by every replay. The warm-up (on a side
        stream, as CUDA graphs ask) runs the step for real: it writes the first position, which the first
        replay writes again, and advances the positions, which are put back."""
        side = warm_up_stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._step()
        torch.cuda.current_stream(device).wait_stream(side)
        self.positions.sub_(1)
        self.write.sub_(1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # a trainer thread may use the GPU meanwhile
            logits = self._step()
        return graph, logits

    def _step(self) -> torch.Tensor:
        self.bias.index_fill_(1, self.write, 0)  # each row attends to the position it writes now
        hidden = self.step.static(self.tokens, self.positions, self.write, self.bias, self.buffers)  # [R, H]
        logits = self.head(hidden)  # [R, V]
        self.positions.add_(1)
        self.write.add_(1)
        return logits

    def __call__(self, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """rows [L] (the live rows of the batch), tokens [L] their next tokens -> their logits [L, V]."""
        self.tokens.index_copy_(0, rows, tokens)
        if self.graph is None:
            return self._step()[rows]
        self.graph.replay()
        return self.logits[rows]
