"""One decode step of a Llama-shaped decoder, without transformers' per-call machinery.

At every decode step transformers' forward builds the attention mask anew from the whole attention mask,
runs its output-recording and argument decorators, and hands keyword arguments down through every layer:
on SmolLM2-135M 3-5 ms of a 28-84 ms step (1 to 64 rows; AMD EPYC 9004, 2 cores), about a tenth. This
step calls the same modules (norms, projections, MLP, rotary embedding) and the same grouped eager
attention in transformers' order, with the additive mask transformers would build, so its hidden states
are transformers' to the bit (tested); module hooks (LoRA's, the laid-out products') still run.

Only for the decoders whose layers are exactly transformers' Llama, Mistral or Qwen2 layers on the grouped
eager attention with no sliding window shorter than the generation: anything else (another model, FSDP's
wrapped layers, an attention of its own) keeps transformers' forward.
"""

from __future__ import annotations

import torch
from transformers.models.llama.modeling_llama import rotate_half

from grpo.policy.attention import additive, grouped_eager_attention
from grpo.policy.constants import GROUPED_EAGER

# transformers' decoder layers whose forward is Llama's: norm, attention (projections, rotary embedding,
# KV cache, attention, output projection), residual, norm, MLP, residual. (Qwen3's normalises queries and keys.)
LLAMA_SHAPED_LAYERS = frozenset({"LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer"})


def llama_shaped(decoder: torch.nn.Module, capacity: int) -> bool:
    """Whether `decoder` (a model's body: embeddings, layers, final norm) can take `DecodeStep` for a
    generation of `capacity` positions."""
    config = getattr(decoder, "config", None)
    layers = getattr(decoder, "layers", None)
    if config is None or layers is None or config._attn_implementation != GROUPED_EAGER:
        return False
    window = getattr(config, "sliding_window", None)
    return (not window or capacity <= window) and all(
        type(layer).__name__ in LLAMA_SHAPED_LAYERS and type(layer).__module__.startswith("transformers.models.")
        for layer in layers)


class DecodeStep:
    """Calls of one token per row into a KV cache (`grpo.rollout.engines.kv_cache`): -> final hidden states."""

    def __init__(self, decoder: torch.nn.Module) -> None:
        self.decoder = decoder

    def __call__(self, tokens: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor,
                 cache) -> torch.Tensor:
        """tokens [A], attention_mask [A, S] (1 on real positions, this token's last), positions [A]
        -> hidden [A, H] after the final norm."""
        decoder = self.decoder
        hidden = decoder.embed_tokens(tokens[:, None])  # [A, 1, H]
        bias = additive(attention_mask.bool(), hidden.dtype)[:, None, None, :]  # [A, 1, 1, S] as eager's mask
        cos, sin = decoder.rotary_emb(hidden, positions[:, None])  # [A, 1, D]
        cos, sin = cos[:, None], sin[:, None]  # [A, 1, 1, D]: every head alike
        rows = len(tokens)
        for index, layer in enumerate(decoder.layers):
            attention = layer.self_attn
            normed = layer.input_layernorm(hidden)  # [A, 1, H]
            shape = (rows, 1, -1, attention.head_dim)
            query = attention.q_proj(normed).view(shape).transpose(1, 2)  # [A, heads, 1, D]
            key = attention.k_proj(normed).view(shape).transpose(1, 2)  # [A, kv heads, 1, D]
            value = attention.v_proj(normed).view(shape).transpose(1, 2)
            query = (query * cos) + (rotate_half(query) * sin)
            key = (key * cos) + (rotate_half(key) * sin)
            keys, values = cache.update(key, value, index)  # [A, kv heads, S, D]
            attended, _ = grouped_eager_attention(attention, query, keys, values, bias, attention.scaling)  # [A, 1, heads, D]
            hidden = hidden + attention.o_proj(attended.reshape(rows, 1, -1).contiguous())
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return decoder.norm(hidden)[:, -1]  # [A, H]
