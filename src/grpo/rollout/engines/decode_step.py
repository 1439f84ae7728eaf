"""One decode step of a Llama-shaped decoder, without transformers' per-call machinery.

At every decode step transformers' forward builds the attention mask anew from the whole attention mask,
runs its output-recording and argument decorators, and hands keyword arguments down through every layer:
on SmolLM2-135M 3-5 ms of a 28-84 ms step (1 to 64 rows; AMD EPYC 9004, 2 cores), about a tenth. This
step calls the same modules (norms, projections, MLP, rotary embedding) in transformers' order, with the
additive mask transformers would build and eager attention's arithmetic, and two changes of form where
they apply (`DecodeStep.form`):
- q, k and v in one product, where the three are plain linear layers whose weights a generation lays out
  for oneDNN (`grpo.policy.packed`): their weights laid out as one matrix, one call where there were three.
- attention over the whole KV buffer, on a CPU in bf16 or fp16: oneDNN's batched product takes only dense
  matrices, so the cache's filled part, a slice of a longer buffer, was copied into dense ones for both
  products, in every layer at every step (14% of a step at 64 rows in a profile). Here the scores are
  taken against the whole key buffer, softmax runs over the filled positions only, and their weights
  multiply the whole value buffer, which is zero past them (`grpo.rollout.engines.kv_cache`).
Rotary embedding is applied in place to q and k together, with transformers' roundings. With these and
the sampler's reused buffers (`grpo.rollout.engines.embedded.sample_next`), whole quickstart generations ran
1.14-1.18x faster (AMD EPYC 9004; bench/RESULTS.md), the same tokens and log-probs to the bit there; in
general the hidden states are transformers' to the products' rounding (tested):
oneDNN may sum a fused or longer product in another order. Module hooks still run, except on fused q, k
and v (fused only where their hooks are `grpo.policy.unpad`'s, which pass generation through).

Only for the decoders whose layers are exactly transformers' Llama, Mistral or Qwen2 layers on grpo's grouped
eager or packed SDPA attention (a CPU's and a GPU's; the step's own arithmetic is eager's) with no sliding
window shorter than the generation: anything else (another model, FSDP's wrapped layers, an attention of its
own) keeps transformers' forward. On a GPU the engine replays the step as a CUDA graph (`static`,
`grpo.rollout.engines.graphed`). On a CPU with AVX-512, in bf16, the work between the products runs in fused
kernels where the model's heads, norms and MLPs are those they repeat (`grpo.policy.kernels`): quickstart
generations 1.36-1.42x faster on an Intel Xeon with AMX, the hidden states eager's to the fp32 sums' rounding.
"""

from __future__ import annotations

import torch

from grpo.policy.attention import additive, grouped_eager_attention
from grpo.policy.constants import PACKING_ATTENTIONS
from grpo.policy.fused_norm import RMS_NORMS
from grpo.policy.kernels import FusedKernels, fused_kernels
from grpo.policy.packed import Product, packed_product, packs
from grpo.policy.unpad import RealTokens

# transformers' decoder layers whose forward is Llama's: norm, attention (projections, rotary embedding,
# KV cache, attention, output projection), residual, norm, MLP, residual. (Qwen3's normalises queries and keys.)
LLAMA_SHAPED_LAYERS = frozenset({"LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer"})
# Their MLPs, whose arithmetic the fused kernels repeat (`grpo.policy.kernels`), as their norms' (`RMS_NORMS`).
GATED_MLPS = frozenset({"LlamaMLP", "MistralMLP", "Qwen2MLP"})
SILUS = frozenset({"SiLU", "SiLUActivation"})  # torch's, and transformers' for hidden_act "silu"


def llama_shaped(decoder: torch.nn.Module) -> bool:
    """Whether `decoder` (a model's body: embeddings, layers, final norm) can take `DecodeStep` (for the
    generations it `fits`)."""
    config = getattr(decoder, "config", None)
    layers = getattr(decoder, "layers", None)
    if config is None or layers is None or config._attn_implementation not in PACKING_ATTENTIONS:
        return False
    return all(type(layer).__name__ in LLAMA_SHAPED_LAYERS and type(layer).__module__.startswith("transformers.models.")
               for layer in layers)


def rotate_in_place(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> None:
    """x [A, N, D] <- x * cos + rotate_half(x) * sin, as transformers rounds it: rotate_half(x) * sin is
    cat(x2, x1) * cat(-sin1, sin2) (sin_signed), the same products up to their exact signs."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)  # cat(x2, x1), a copy
    x.mul_(cos).add_(swapped.mul_(sin_signed))


def generation_ignores_hooks(module: torch.nn.Module) -> bool:
    """Whether every hook on `module` passes generation through: none but `grpo.policy.unpad`'s."""
    hooks = [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]
    return all(isinstance(getattr(hook, "__self__", None), RealTokens) for hook in hooks)


def takes_fused_kernels(decoder: torch.nn.Module, heads: int, kv_heads: int, head_dim: int) -> FusedKernels | None:
    """The fused CPU kernels, where they are built here and `decoder`'s layers (bf16 on a CPU) have the norms,
    the SiLU MLP and the attention shape they repeat, with no hooks but those that pass generation through."""
    weight = decoder.embed_tokens.weight
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16:
        return None
    norms = [decoder.norm, *(n for layer in decoder.layers for n in (layer.input_layernorm, layer.post_attention_layernorm))]
    mlps = [layer.mlp for layer in decoder.layers]
    if not (all(type(n).__name__ in RMS_NORMS and n.weight.dtype == torch.bfloat16 and generation_ignores_hooks(n)
                for n in norms)
            and all(type(m).__name__ in GATED_MLPS and type(m.act_fn).__name__ in SILUS and generation_ignores_hooks(m)
                    for m in mlps)):
        return None
    kernels = fused_kernels()
    return kernels if kernels is not None and kernels.attention_fits(heads, kv_heads, head_dim) else None


def fused_qkv(attention: torch.nn.Module, rows: int) -> Product | None:
    """One product for the layer's q, k and v projections (x [.., H] -> [.., (heads + 2 kv heads) D]),
    laid out for about `rows` rows; None unless all three are linear layers whose weights lay out and whose
    hooks pass generation through."""
    linears = attention.q_proj, attention.k_proj, attention.v_proj
    if not all(type(m) is torch.nn.Linear and packs(m.weight) and generation_ignores_hooks(m) for m in linears):
        return None
    biases = [m.bias for m in linears]
    if any(b is None for b in biases) and not all(b is None for b in biases):
        return None
    weight = torch.cat([m.weight.detach() for m in linears])  # [(heads + 2 kv heads) D, H]
    bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
    return packed_product(weight, bias, rows)


class DecodeStep:
    """Calls of one token per row into a KV cache (`grpo.rollout.engines.kv_cache`): -> final hidden states.
    Made once per generation (the fused products are laid out then); the weights must not change within."""

    def __init__(self, decoder: torch.nn.Module, rows: int, fused: bool = True) -> None:
        self.decoder = decoder
        config = decoder.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = decoder.layers[0].self_attn.head_dim
        products = [fused_qkv(layer.self_attn, rows) for layer in decoder.layers]
        self.qkv: list[Product] | None = products if all(products) else None
        weight = decoder.embed_tokens.weight
        self.whole_buffer = weight.device.type == "cpu" and weight.dtype in (torch.bfloat16, torch.float16)
        self._weights: torch.Tensor | None = None  # [A*K, G, capacity] attention weights (whole-buffer form)
        # The per-token work between the products in fused CPU kernels, where they apply (on the whole buffers).
        self.fused = (takes_fused_kernels(decoder, self.heads, self.kv_heads, self.head_dim)
                      if fused and self.qkv and self.whole_buffer else None)

    def fits(self, capacity: int) -> bool:
        """Whether a generation of `capacity` positions fits the model's sliding window (the step has none)."""
        window = getattr(self.decoder.config, "sliding_window", None)
        return not window or capacity <= window

    @property
    def form(self) -> str:
        """What this step runs, in words (the benchmarks record it)."""
        parts = ["the engine's decode step", "q/k/v in one product" if self.qkv else "q/k/v apart",
                 "attention over the whole KV buffer" if self.whole_buffer else "attention over the cache's filled part"]
        if self.fused:
            parts.append("norms, rotary embedding, attention and SiLU in fused CPU kernels")
        return ", ".join(parts)

    def __call__(self, tokens: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor,
                 cache) -> torch.Tensor:
        """tokens [A], attention_mask [A, S] (1 on real positions, this token's last), positions [A]
        -> hidden [A, H] after the final norm."""
        if self.fused:
            return self._fused_layers(tokens, attention_mask, positions, cache)
        bias = additive(attention_mask.bool(), self.decoder.embed_tokens.weight.dtype)  # [A, S] as eager's mask

        def attend(index: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
            attention = self.decoder.layers[index].self_attn
            keys, values = cache.update(key[:, :, None], value[:, :, None], index)  # [A, K, S, D] views
            if self.whole_buffer:
                return self._attend_whole_buffer(query, cache.layers[index], bias, attention.scaling)
            attended, _ = grouped_eager_attention(attention, query[:, :, None], keys, values,
                                                  bias[:, None, None], attention.scaling)  # [A, 1, N, D]
            return attended.reshape(len(tokens), -1)

        return self._layers(tokens, positions, attend)

    def static(self, tokens: torch.Tensor, positions: torch.Tensor, write: torch.Tensor, bias: torch.Tensor,
               buffers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """The step with every shape and address fixed for a whole generation, as a CUDA graph replays it
        (`grpo.rollout.engines.graphed`): tokens [R], positions [R], write [1] the cache position this token's
        keys and values go to, bias [R, C] additive over every position of the buffers (0 where a row may
        attend, this step's position included), buffers: each layer's (keys, values) [R, K, C, D]. Attention
        runs over whole buffers, its weights exactly 0 past the positions the bias allows -> hidden [R, H]."""

        def attend(index: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
            key_buffer, value_buffer = buffers[index]
            key_buffer.index_copy_(2, write, key[:, :, None])
            value_buffer.index_copy_(2, write, value[:, :, None])
            rows, heads, dim = query.shape
            grouped = query.view(rows, self.kv_heads, heads // self.kv_heads, dim)  # query head h uses kv head h // G
            scores = torch.matmul(grouped, key_buffer.transpose(-1, -2))  # [R, K, G, C]
            scores = scores.mul_(self.decoder.layers[index].self_attn.scaling).add_(bias[:, None, None])
            weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
            return torch.matmul(weights, value_buffer).view(rows, heads * dim)

        return self._layers(tokens, positions, attend)

    def _layers(self, tokens: torch.Tensor, positions: torch.Tensor, attend) -> torch.Tensor:
        """tokens [A], positions [A] through every layer, `attend(layer index, query [A, N, D], key [A, K, D],
        value [A, K, D])` storing the keys and values and giving attention's output [A, N*D] -> hidden [A, H]."""
        decoder = self.decoder
        rows, heads, kv_heads = len(tokens), self.heads, self.kv_heads
        hidden = decoder.embed_tokens(tokens)  # [A, H]
        cos, sin_signed = self._rotary(hidden, positions)  # [A, 1, D]
        for index, layer in enumerate(decoder.layers):
            attention = layer.self_attn
            normed = layer.input_layernorm(hidden)  # [A, H]
            if self.qkv:
                qkv = self.qkv[index](normed).view(rows, heads + 2 * kv_heads, -1)  # [A, N + 2K, D]
                rotate_in_place(qkv[:, : heads + kv_heads], cos, sin_signed)
                query, key, value = qkv[:, :heads], qkv[:, heads : heads + kv_heads], qkv[:, heads + kv_heads :]
            else:
                query = attention.q_proj(normed).view(rows, heads, -1)  # [A, N, D]
                key = attention.k_proj(normed).view(rows, kv_heads, -1)  # [A, K, D]
                value = attention.v_proj(normed).view(rows, kv_heads, -1)
                rotate_in_place(query, cos, sin_signed)
                rotate_in_place(key, cos, sin_signed)
            hidden = hidden + attention.o_proj(attend(index, query, key, value))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return decoder.norm(hidden)

    def _rotary(self, hidden: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [A, H], positions [A] -> cos, sin_signed [A, 1, D] (contiguous; every head alike), as
        `rotate_in_place` takes them."""
        cos, sin = self.decoder.rotary_emb(hidden, positions[:, None])  # [A, 1, D]
        half = sin.shape[-1] // 2
        return cos.contiguous(), torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)

    def _fused_layers(self, tokens: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor,
                      cache) -> torch.Tensor:
        """`__call__` with the work between the products in fused kernels: the same arithmetic, the residual
        stream updated in place, each layer's keys and values written straight into its buffers."""
        decoder, kernels = self.decoder, self.fused
        rows, heads, kv_heads = len(tokens), self.heads, self.kv_heads
        filled = cache.layers[0]
        # The kernels read the buffers as these say: a mismatch would read past them, not raise.
        if filled.key_buffer.shape[0] != rows or attention_mask.shape != (rows, filled.length + 1):
            raise ValueError(f"decode step of {rows} rows and a mask of {tuple(attention_mask.shape)} on a KV cache "
                             f"of {filled.key_buffer.shape[0]} rows filled to {filled.length}")
        hidden = decoder.embed_tokens(tokens)  # [A, H] the residual stream
        cos, sin_signed = (x.view(rows, -1) for x in self._rotary(hidden, positions))  # [A, D]
        allowed = attention_mask.to(torch.uint8)  # [A, S] 1 where a row attends, this step's position included
        normed = torch.empty_like(hidden)  # [A, H] each norm's output, reused
        attended = hidden.new_empty(rows, heads * self.head_dim)  # [A, N*D]
        delta = None  # [A, H] what the last attention or MLP adds to the residual stream
        for index, layer in enumerate(decoder.layers):
            layer_cache, attention, mlp = cache.layers[index], layer.self_attn, layer.mlp
            kernels.add_rms_norm(hidden, delta, layer.input_layernorm, normed)
            qkv = self.qkv[index](normed)  # [A, (N + 2K) D]
            position = layer_cache.reserve()
            kernels.rope_store(qkv, cos, sin_signed, heads, kv_heads, layer_cache.key_buffer,
                               layer_cache.value_buffer, position)
            kernels.attention(qkv, heads, layer_cache.key_buffer, layer_cache.value_buffer, allowed,
                              attention.scaling, attended)
            delta = attention.o_proj(attended)
            kernels.add_rms_norm(hidden, delta, layer.post_attention_layernorm, normed)
            delta = mlp.down_proj(kernels.silu_mul(mlp.gate_proj(normed), mlp.up_proj(normed)))
        out = torch.empty_like(hidden)  # [A, H]
        kernels.add_rms_norm(hidden, delta, decoder.norm, out)
        return out

    def _attend_whole_buffer(self, query: torch.Tensor, layer_cache, bias: torch.Tensor,
                             scaling: float) -> torch.Tensor:
        """query [A, N, D] against the layer's whole buffers [A, K, C, D] (filled to S positions, zero past
        them), bias [A, S] -> [A, N*D]: eager's arithmetic (scores scaled, the mask, softmax in fp32, back)."""
        rows, heads, dim = query.shape
        key_buffer, value_buffer, length = layer_cache.key_buffer, layer_cache.value_buffer, layer_cache.length
        kv_heads, capacity = key_buffer.shape[1], key_buffer.shape[2]
        groups = heads // kv_heads
        weights = self._weights_buffer(rows * kv_heads, groups, capacity, query)  # [A*K, G, C]
        stacked = query.reshape(rows * kv_heads, groups, dim)  # query head h uses key-value head h // G
        scores = torch.bmm(stacked, key_buffer.view(rows * kv_heads, capacity, dim).transpose(1, 2))  # [A*K, G, C]
        scores = scores[:, :, :length].mul_(scaling).view(rows, heads, length).add_(bias[:, None])  # [A, N, S]
        weights[:, :, :length] = torch.softmax(scores, dim=-1, dtype=torch.float32).view(-1, groups, length)
        return torch.bmm(weights, value_buffer.view(rows * kv_heads, capacity, dim)).view(rows, heads * dim)

    def _weights_buffer(self, batch: int, groups: int, capacity: int, like: torch.Tensor) -> torch.Tensor:
        """-> [batch, groups, capacity], finite everywhere: past the filled positions it holds zeros or an
        earlier step's weights, which multiply the value buffer's zeros there."""
        if self._weights is None or self._weights.shape[0] < batch or self._weights.shape[1:] != (groups, capacity):
            self._weights = like.new_zeros(batch, groups, capacity)
        return self._weights[:batch]
