"""The embedded engine's own decode step: transformers' hidden states to the bit, and only where it applies."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from grpo.policy.attention import use_grouped_eager
from grpo.policy.cache_keyword import cache_argument
from grpo.policy.models import build_char_tokenizer
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_steps_give_transformers_hidden_states_to_the_bit(dtype):
    tokenizer = build_char_tokenizer()
    model = grouped_query_model(tokenizer, dtype)
    decoder = model.get_decoder()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]  # left-padded to 5
    length = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (length - len(p)) + p for p in prompts])  # [3, 5]
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts])  # [3, 5]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    caches = [preallocated_cache(length + 6) for _ in range(2)]
    step = DecodeStep(decoder)
    with torch.no_grad():
        for cache in caches:
            decoder(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_argument(decoder, cache),
                    use_cache=True)
        tokens, next_position = torch.tensor([20, 21, 22]), positions[:, -1] + 1
        for _ in range(6):
            mask = torch.cat([mask, mask.new_ones(3, 1)], dim=-1)
            expected = decoder(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_position[:, None],
                               **cache_argument(decoder, caches[0]), use_cache=True).last_hidden_state[:, -1]
            assert torch.equal(step(tokens, mask, next_position, caches[1]), expected)
            tokens, next_position = tokens + 1, next_position + 1


def test_the_engine_generates_the_same_tokens_and_log_probs_with_and_without_it(monkeypatch):
    tokenizer = build_char_tokenizer()
    engine = EmbeddedEngine(grouped_query_model(tokenizer), tokenizer, batch_size=4)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("1+1=", "what is 23+45? ", "7", "1+1=")]
    params, seeds = SamplingParams(12, 0.7), [3, 4, 5, 6]
    calls = []
    monkeypatch.setattr(DecodeStep, "__call__", lambda self, *a, _call=DecodeStep.__call__: calls.append(1) or _call(self, *a))
    with_step = engine.generate(prompts, params, seeds)
    assert calls  # the decode steps went through it
    monkeypatch.setattr(embedded, "llama_shaped", lambda decoder, capacity: False)
    without = engine.generate(prompts, params, seeds)
    assert [c.token_ids for c in with_step] == [c.token_ids for c in without]
    assert [c.logprobs for c in with_step] == [c.logprobs for c in without]


def test_only_transformers_llama_shaped_layers_on_the_grouped_attention_without_a_shorter_window_take_it():
    tokenizer = build_char_tokenizer()
    assert llama_shaped(grouped_query_model(tokenizer).get_decoder(), 100)
    windowed = grouped_query_model(tokenizer, kind=MistralForCausalLM, config_class=MistralConfig, sliding_window=16)
    assert llama_shaped(windowed.get_decoder(), 16) and not llama_shaped(windowed.get_decoder(), 17)
    plain = grouped_query_model(tokenizer)
    plain.set_attn_implementation("eager")
    assert not llama_shaped(plain.get_decoder(), 100)
    changed = grouped_query_model(tokenizer)
    layer = changed.get_decoder().layers[1]
    layer.__class__ = type("LlamaDecoderLayer", (type(layer),), {"__module__": __name__})  # a layer of its own
    assert not llama_shaped(changed.get_decoder(), 100)
