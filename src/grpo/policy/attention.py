"""Eager attention for grouped-query models without repeating keys and values.

Transformers' eager attention copies every key-value head's keys and values once per query head that
shares it (`repeat_kv`): at each decode step that is a copy of the whole KV cache in every layer (3x
for SmolLM2, whose 9 query heads share 3 key-value heads), about a tenth of CPU generation. Here a
key-value head's query heads are stacked along the query length instead, so each head's scores are the
same dot products against keys used where they lie. The arithmetic is eager's, op for op (scores scaled,
the additive mask, softmax in fp32, back to the model's dtype).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

from grpo.policy.constants import GROUPED_EAGER as NAME, PLAIN_EAGER_MODELS


def grouped_eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, L, D]
    key: torch.Tensor,  # [B, K, S, D], H = K * G
    value: torch.Tensor,  # [B, K, S, D]
    attention_mask: torch.Tensor | None,  # [B, 1, L, S] additive
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> output [B, L, H, D], weights [B, H, L, S]: transformers' eager attention, computed per key-value head."""
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


AttentionInterface.register(NAME, grouped_eager_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, eager_mask)


def use_grouped_eager(model: torch.nn.Module) -> bool:
    """Switch a model that runs transformers' plain eager attention to the grouped form; False where it
    does not (its own attention variant, or another implementation), which is then left as it is."""
    config = model.config
    if config.model_type not in PLAIN_EAGER_MODELS or config._attn_implementation != "eager":
        return False
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME
