"""The embedded engine's own decode step: transformers' hidden states (to the bit in fp32, to the products'
rounding where bf16 fuses q, k, v and attends over the whole KV buffer), and only where it applies."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

from grpo.policy import unpad
from grpo.policy.attention import use_grouped_eager, use_packed_sdpa
from grpo.policy.cache_keyword import cache_argument
from grpo.policy.models import build_char_tokenizer
from grpo.policy.packed import packed_linears, packs
from grpo.rollout.engines import SamplingParams, embedded
from grpo.rollout.engines.decode_step import DecodeStep, llama_shaped
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rollout.engines.kv_cache import preallocated_cache


def grouped_query_model(tokenizer, dtype=torch.float32, kind=LlamaForCausalLM, config_class=LlamaConfig, **extra):
    """A tiny decoder with 4 query heads on 2 key-value heads, on the grouped eager attention."""
    torch.manual_seed(0)
    config = config_class(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                          tie_word_embeddings=True, attn_implementation="eager", **extra)
    model = kind(config).to(dtype).eval()
    assert use_grouped_eager(model)
    return model


def left_padded(tokenizer, prompts):
    """-> ids, mask, positions [R, P] of `prompts` left-padded to the longest."""
    length = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (length - len(p)) + p for p in prompts])  # [R, P]
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts])  # [R, P]
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def decode_against_transformers(decoder, step, tokenizer, prompts, steps=6):
    """-> (the step's, transformers') hidden states [R, H] at each of `steps` decode steps after a prefill of
    `prompts`, each into its own KV cache."""
    device = decoder.embed_tokens.weight.device
    ids, mask, positions = (x.to(device) for x in left_padded(tokenizer, prompts))
    caches = [preallocated_cache(ids.shape[1] + steps) for _ in range(2)]
    pairs = []
    with torch.no_grad():
        for cache in caches:
            decoder(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_argument(decoder, cache),
                    use_cache=True)
        tokens, next_position = torch.arange(20, 20 + len(prompts), device=device), positions[:, -1] + 1
        for _ in range(steps):
            mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=-1)
            expected = decoder(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_position[:, None],
                               **cache_argument(decoder, caches[0]), use_cache=True).last_hidden_state[:, -1]
            pairs.append((step(tokens, mask, next_position, caches[1]), expected))
            tokens, next_position = tokens + 1, next_position + 1
    return pairs


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (scripts/gpu_check.py runs the suite on one)"))])
def test_decode_steps_give_transformers_hidden_states_in_float32(device):
    tokenizer = build_char_tokenizer()
    decoder = grouped_query_model(tokenizer).to(device).get_decoder()
    step = DecodeStep(decoder, rows=3)
    assert step.qkv is None and not step.whole_buffer  # fp32: q, k, v apart, the filled part's attention
    for ours, theirs in decode_against_transformers(decoder, step, tokenizer, [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]):
        if device == "cpu":
            assert torch.equal(ours, theirs)  # to the bit
        else:  # the GPU's products may pick other kernels for other strides
            torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


needs_onednn_bf16 = pytest.mark.skipif(not packs(torch.zeros(1, 1, dtype=torch.bfloat16)),
                                       reason="no oneDNN bf16 products on this machine: q, k, v stay apart")


@needs_onednn_bf16
@pytest.mark.parametrize("kind, config_class", [(LlamaForCausalLM, LlamaConfig), (Qwen2ForCausalLM, Qwen2Config)])
def test_bf16_steps_fuse_q_k_v_and_attend_over_the_whole_buffer_within_the_products_rounding(kind, config_class):
    tokenizer = build_char_tokenizer()
    model = grouped_query_model(tokenizer, torch.bfloat16, kind, config_class)
    for module in model.modules():  # Qwen2's q, k and v have biases (made zero): ones that count
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            torch.nn.init.normal_(module.bias, std=0.5)
    decoder = model.get_decoder()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    with packed_linears(model, rows=3):
        step = DecodeStep(decoder, rows=3)
        assert step.qkv is not None and step.whole_buffer
        assert step.form == "the engine's decode step, q/k/v in one product, attention over the whole KV buffer"
        pairs = decode_against_transformers(decoder, step, tokenizer, prompts)
        # The same step over a new cache as long, filled from fewer positions: the buffer of attention weights
        # must not keep the last cache's weights past them.
        again = decode_against_transformers(decoder, step, tokenizer, [p[-2:] for p in prompts], steps=9)
        apart = DecodeStep(decoder, rows=3)
        apart.qkv, apart.whole_buffer = None, False
        unfused = decode_against_transformers(decoder, apart, tokenizer, prompts)
    for (ours, theirs), (plain, _) in zip(pairs, unfused):
        assert torch.equal(plain, theirs)  # without the two changes: transformers' bits
        torch.testing.assert_close(ours, theirs, atol=0.05, rtol=0.02)  # a few bf16 steps (0.008 relative)
    for ours, theirs in again:
        torch.testing.assert_close(ours, theirs, atol=0.05, rtol=0.02)


@needs_onednn_bf16
def test_q_k_v_stay_apart_where_a_hook_of_their_own_would_not_run():
    tokenizer = build_char_tokenizer()
    model = grouped_query_model(tokenizer, torch.bfloat16)
    model.get_decoder().layers[1].self_attn.k_proj.register_forward_hook(lambda module, args, output: None)
    with packed_linears(model, rows=2):
        assert DecodeStep(model.get_decoder(), rows=2).qkv is None
    unpadded = grouped_query_model(tokenizer, torch.bfloat16)
    unpad.install(unpadded)  # the update's hooks, which pass generation through
    with packed_linears(unpadded, rows=2):
        assert DecodeStep(unpadded.get_decoder(), rows=2).qkv is not None


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_onednn_bf16)])
def test_the_engine_generates_the_same_tokens_and_log_probs_with_and_without_it(monkeypatch, dtype):
    tokenizer = build_char_tokenizer()
    engine = EmbeddedEngine(grouped_query_model(tokenizer, dtype), tokenizer, batch_size=4)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("1+1=", "what is 23+45? ", "7", "1+1=")]
    params, seeds = SamplingParams(12, 0.7), [3, 4, 5, 6]
    calls = []
    monkeypatch.setattr(DecodeStep, "__call__", lambda self, *a, _call=DecodeStep.__call__: calls.append(1) or _call(self, *a))
    with_step = engine.generate(prompts, params, seeds)
    assert calls  # the decode steps went through it
    assert ("q/k/v in one product" in engine.decode_form) == (dtype == torch.bfloat16)
    monkeypatch.setattr(embedded, "llama_shaped", lambda decoder: False)
    without = engine.generate(prompts, params, seeds)
    assert engine.decode_form == "transformers' forward"
    # bf16: the same here; where oneDNN sums the fused product in another order, log-probs within its rounding.
    assert [c.token_ids for c in with_step] == [c.token_ids for c in without]
    for ours, theirs in zip(with_step, without):
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs),
                                   **({"atol": 0, "rtol": 0} if dtype == torch.float32 else {"atol": 0.02, "rtol": 0}))


def test_only_transformers_llama_shaped_layers_on_the_grouped_attention_without_a_shorter_window_take_it():
    tokenizer = build_char_tokenizer()
    assert llama_shaped(grouped_query_model(tokenizer).get_decoder())
    windowed = grouped_query_model(tokenizer, kind=MistralForCausalLM, config_class=MistralConfig, sliding_window=16)
    assert llama_shaped(windowed.get_decoder())
    step = DecodeStep(windowed.get_decoder(), rows=1)
    assert step.fits(16) and not step.fits(17)
    plain = grouped_query_model(tokenizer)
    plain.set_attn_implementation("eager")
    assert not llama_shaped(plain.get_decoder())
    plain.set_attn_implementation("sdpa")
    assert use_packed_sdpa(plain) and llama_shaped(plain.get_decoder())  # a GPU's: the step keeps eager's arithmetic
    changed = grouped_query_model(tokenizer)
    layer = changed.get_decoder().layers[1]
    layer.__class__ = type("LlamaDecoderLayer", (type(layer),), {"__module__": __name__})  # a layer of its own
    assert not llama_shaped(changed.get_decoder())
