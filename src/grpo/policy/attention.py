"""Eager attention for grouped-query models without repeating keys and values.

Transformers' eager attention copies every key-value head's keys and values once per query head that
shares it (`repeat_kv`): at each decode step that is a copy of the whole KV cache in every layer (3x
for SmolLM2, whose 9 query heads share 3 key-value heads), about a tenth of CPU generation. Here a
key-value head's query heads are stacked along the query length instead, so each head's scores are the
same dot products against keys used where they lie. The arithmetic is eager's, op for op (scores scaled,
the additive mask, softmax in fp32, back to the model's dtype).

The update runs a micro-batch packed as one sequence (`PackedPrompts`): the distinct prompts' common
beginning once (a chat template's system turn: 27 of the quickstart's 51 prompt tokens), each distinct prompt's
own tokens once, then every row's completion. Every per-token layer then runs one product per weight over all
those tokens, where a prompt pass and a completion pass would run two (the prompt's with few rows, and a
full-size add of each weight's two gradients; under FSDP, each weight gathered twice); attention alone sees the
structure: the beginning attends to itself, a prompt to the beginning and itself, a completion to the beginning,
its prompt and itself. Two attentions take it: the
grouped eager one (CPU's default) and `packed_sdpa_attention` (GPUs' default), which is transformers' SDPA
attention unchanged for everything else.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask, sdpa_mask

from grpo.policy.constants import GROUPED_EAGER as NAME
from grpo.policy.constants import PACKED_SDPA, PACKING_ATTENTIONS, PLAIN_EAGER_MODELS

log = logging.getLogger(__name__)


@dataclass
class PackedPrompts:
    """A micro-batch as one sequence [1, C + g*S + b*T]: the distinct prompts' common beginning (C tokens, often
    none: `shared_prefix`), the g prompts' own tokens left-padded to S, then b rows' fed completion tokens
    right-padded to T. Passed to the model as the keyword `packed`, which reaches the attention function; the
    model's own mask is skipped by a 4D placeholder (`placeholder_mask`)."""

    prompt_index: torch.Tensor  # [b] the prompt each row continues
    prefix_allowed: torch.Tensor  # [1, 1, C, C] bool: the beginning is causal
    prompt_allowed: torch.Tensor  # [g, 1, S, C+S] bool: the beginning, the prompt's own earlier real tokens
    completion_allowed: torch.Tensor  # [b, 1, T, C+S+T] bool: the beginning, its prompt's real tokens, its own earlier real ones
    _biases: dict[torch.dtype, tuple[torch.Tensor, ...]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, prompt_mask: torch.Tensor, prompt_index: torch.Tensor, fed_mask: torch.Tensor,
           prefix: int = 0) -> "PackedPrompts":
        """prompt_mask [g, S] (each prompt's own tokens, after the `prefix` shared ones), prompt_index [b],
        fed_mask [b, T]: 1 where a token is real."""
        prompt_len, fed_len = prompt_mask.shape[1], fed_mask.shape[1]
        real_prompt, real_fed = prompt_mask.bool(), fed_mask.bool()
        device = real_fed.device
        causal = lambda n: torch.ones(n, n, dtype=torch.bool, device=device).tril()  # noqa: E731
        beginning = lambda rows, length: torch.ones(rows, length, prefix, dtype=torch.bool, device=device)  # noqa: E731
        prompt_allowed = torch.cat([beginning(len(real_prompt), prompt_len),
                                    causal(prompt_len) & real_prompt[:, None, :]], dim=-1)  # [g, S, C+S]
        completion_allowed = torch.cat([
            beginning(len(real_fed), fed_len),  # [b, T, C]
            real_prompt[prompt_index][:, None, :].expand(-1, fed_len, -1),  # [b, T, S]
            causal(fed_len) & real_fed[:, None, :],  # [b, T, T]
        ], dim=-1)
        return cls(prompt_index, causal(prefix)[None, None], prompt_allowed[:, None], completion_allowed[:, None])

    @property
    def prefix(self) -> int:  # C
        return self.prefix_allowed.shape[-1]

    @property
    def prompt_tokens(self) -> int:  # C + g * S, where the completions start in the packed sequence
        return self.prefix + self.prompt_allowed.shape[0] * self.prompt_allowed.shape[2]

    def biases(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The additive masks (the beginning's, prompts', completions') in `dtype`: made once, read by every layer."""
        if dtype not in self._biases:
            self._biases[dtype] = tuple(additive(allowed, dtype) for allowed in (
                self.prefix_allowed, self.prompt_allowed, self.completion_allowed))
        return self._biases[dtype]

    def placeholder_mask(self) -> torch.Tensor:
        """A mask for the model to pass on, unread: transformers hands a 4D mask to attention as it is given,
        so it builds no [U, U] mask of its own."""
        return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=self.prompt_index.device)


def shared_prefix(prompts: Sequence[Sequence[int]], min_saved: int) -> int:
    """-> how many leading tokens every prompt has in common (a chat template's system turn, a task's
    instructions), each prompt keeping at least one of its own; 0 where running them once saves fewer than
    `min_saved` tokens. Attention is causal: those tokens' hidden states, keys and values are the same in
    every prompt."""
    if len(prompts) < 2:
        return 0
    common = min(len(os.path.commonprefix(list(prompts))), min(len(p) for p in prompts) - 1)
    return common if common * (len(prompts) - 1) >= min_saved else 0


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool [..] -> 0 where allowed, the dtype's lowest elsewhere (as transformers' eager masks)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)


def packed_prompt_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [1, H, U, D], U = C + g*S + b*T
    key: torch.Tensor,  # [1, K, U, D]
    value: torch.Tensor,  # [1, K, U, D]
    packed: PackedPrompts,
    scaling: float | None,  # None: 1/sqrt(D), as SDPA takes it (the grouped eager attention is always given one)
    dropout: float,
    attend: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] | None = None,
) -> torch.Tensor:
    """-> output [1, U, H, D]: the shared beginning attends to itself, each prompt to the beginning and itself,
    each completion to the beginning, its prompt and itself, each part by `attend` (query, keys, values and
    additive mask in, [B, L, H, D] out; the grouped eager attention when None)."""
    attend = attend or grouped_eager_attention
    prefix, prompts, length = packed.prefix, packed.prompt_allowed.shape[0], packed.prompt_allowed.shape[2]
    rows, fed = packed.completion_allowed.shape[0], packed.completion_allowed.shape[2]

    def split(x: torch.Tensor) -> tuple[torch.Tensor, ...]:  # [1, N, U, D] -> [1, N, C, D], [g, N, S, D], [b, N, T, D]
        x = x[0]
        return (x[None, :, :prefix],
                x[:, prefix : packed.prompt_tokens].unflatten(1, (prompts, length)).transpose(0, 1),
                x[:, packed.prompt_tokens :].unflatten(1, (rows, fed)).transpose(0, 1))

    (q_prefix, q_prompt, q_completion), (k_prefix, k_prompt, k_completion), (v_prefix, v_prompt, v_completion) = map(
        split, (query, key, value))
    prefix_bias, prompt_bias, completion_bias = packed.biases(query.dtype)
    parts = []
    if prefix:
        parts.append(attend(module, q_prefix, k_prefix, v_prefix, prefix_bias, scaling, dropout)[0][0])  # [C, H, D]
    before = lambda x, n: x.expand(n, -1, -1, -1)  # noqa: E731  [1, K, C, D] -> [n, K, C, D], the beginning for n rows
    keys, values = k_prompt, v_prompt  # [g, K, S, D]
    if prefix:
        keys = torch.cat([before(k_prefix, prompts), keys], dim=2)  # [g, K, C+S, D]
        values = torch.cat([before(v_prefix, prompts), values], dim=2)
    parts.append(attend(module, q_prompt, keys, values, prompt_bias, scaling, dropout)[0].flatten(0, 1))  # [g*S, H, D]
    keys = torch.cat([before(k_prefix, rows), k_prompt[packed.prompt_index], k_completion], dim=2)  # [b, K, C+S+T, D]
    values = torch.cat([before(v_prefix, rows), v_prompt[packed.prompt_index], v_completion], dim=2)
    parts.append(attend(module, q_completion, keys, values, completion_bias, scaling, dropout)[0].flatten(0, 1))
    return torch.cat(parts)[None]  # [1, U, H, D]


def grouped_eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, L, D]
    key: torch.Tensor,  # [B, K, S, D], H = K * G
    value: torch.Tensor,  # [B, K, S, D]
    attention_mask: torch.Tensor | None,  # [B, 1, L, S] additive
    scaling: float,
    dropout: float = 0.0,
    packed: PackedPrompts | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """-> output [B, L, H, D], weights [B, H, L, S]: transformers' eager attention, computed per key-value
    head; for a packed micro-batch (`packed`), its structured attention (no weights)."""
    if packed is not None:
        return packed_prompt_attention(module, query, key, value, packed, scaling, dropout), None
    batch, heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    stacked = query.reshape(batch, kv_heads, groups * length, dim)  # query head h uses key-value head h // G
    scores = torch.matmul(stacked, key.transpose(2, 3)).mul_(scaling)  # [B, K, G*L, S]
    scores = scores.view(batch, kv_heads, groups, length, keys)  # [B, K, G, L, S]
    if attention_mask is not None:
        scores = scores.add_(attention_mask[:, :, None])  # the mask is the same for every head
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)  # [B, K, G, L, S]
    if dropout > 0.0 and module.training:
        weights = torch.nn.functional.dropout(weights, p=dropout)
    output = torch.matmul(weights.view(batch, kv_heads, groups * length, keys), value)  # [B, K, G*L, D]
    output = output.view(batch, kv_heads, groups, length, dim).permute(0, 3, 1, 2, 4).reshape(batch, length, heads, dim)
    return output, weights.view(batch, heads, length, keys)


def _sdpa(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor,
    scaling: float | None, dropout: float,
) -> tuple[torch.Tensor, None]:
    """One part of a packed micro-batch by torch's SDPA: query [B, H, L, D], key and value [B, K, S, D], bias
    [B, 1, L, S] additive -> output [B, L, H, D]."""
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=scaling, enable_gqa=True,
                                            dropout_p=dropout if module.training else 0.0)  # [B, H, L, D]
    return output.transpose(1, 2), None


def packed_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, L, D]
    key: torch.Tensor,  # [B, K, S, D]
    value: torch.Tensor,  # [B, K, S, D]
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    packed: PackedPrompts | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, and for a packed micro-batch (`packed`) its structured attention, each
    part by SDPA: so on a GPU the update runs one pass a micro-batch, as on CPU."""
    if packed is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    return packed_prompt_attention(module, query, key, value, packed, scaling, dropout, attend=_sdpa), None


AttentionInterface.register(NAME, grouped_eager_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, eager_mask)
AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_SDPA, sdpa_mask)


def skip_cudnn_attention(device: torch.device) -> None:
    """On a GPU, SDPA without its cuDNN backend, process-wide (the flash and memory-efficient kernels stay).
    cuDNN's attention builds an execution plan for each new shape, and grpo's shapes change at nearly every
    call: a decode step's keys grow by one, each step's prompts and micro-batches have lengths of their own.
    On an NVIDIA H200 (torch 2.11, bf16, 2026-11-27) an SDPA call then took 1.6 ms of host time, and the
    quickstart's steps 2-6 ran 2.6-4.0 s with cuDNN's attention and 1.3-1.7 s without (two alternating pairs)."""
    if device.type == "cuda" and torch.backends.cuda.cudnn_sdp_enabled():
        torch.backends.cuda.enable_cudnn_sdp(False)
        log.info("attention on %s: SDPA without cuDNN's backend, which plans each new shape anew (steps ran 2x "
                 "slower with it on an H200)", device.type)


def use_grouped_eager(model: torch.nn.Module) -> bool:
    """Switch a model that runs transformers' plain eager attention to the grouped form; False where it
    does not (its own attention variant, or another implementation), which is then left as it is."""
    config = model.config
    if config.model_type not in PLAIN_EAGER_MODELS or config._attn_implementation != "eager":
        return False
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME


def use_packed_sdpa(model: torch.nn.Module) -> bool:
    """Switch a model that runs transformers' SDPA attention to the form that also takes a packed micro-batch;
    False where it does not (its own attention variant, or another implementation), left as it is."""
    config = model.config
    if config.model_type not in PLAIN_EAGER_MODELS or config._attn_implementation != "sdpa":
        return False
    model.set_attn_implementation(PACKED_SDPA)
    return model.config._attn_implementation == PACKED_SDPA


def packs_prompts(model: torch.nn.Module, sequence_length: int) -> bool:
    """Whether the model's attention takes a `PackedPrompts` micro-batch: the grouped eager or the packed SDPA
    form is in use, and no sliding window is shorter than the sequence (the packed masks have none)."""
    config = model.config
    window = getattr(config, "sliding_window", None)
    return config._attn_implementation in PACKING_ATTENTIONS and (not window or sequence_length <= window)
