"""The decode step with its per-token work in the fused CPU kernels (grpo.policy.kernels): the eager step's hidden
states within rounding, the same samples here, and the eager step where the kernels do not apply."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from grpo.policy.attention import use_grouped_eager
from grpo.policy.cache_keyword import cache_argument
from grpo.policy.models import build_char_tokenizer
from grpo.policy.packed import packed_linears
from grpo.rollout.engines import SamplingParams
from grpo.rollout.engines.decode_step import DecodeStep
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rollout.engines.kv_cache import preallocated_cache
from tests.unit.policy.test_kernels import bf16, kernels, needs_kernels
from tests.unit.rollout.engines.test_decode_step import decode_against_transformers, grouped_query_model


def head_dim_64_model(tokenizer, layers=2):
    """A tiny bf16 Llama whose heads are 64 wide (the kernels' attention takes 64 or 128), 2 query heads a key-value head."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=96, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=True, attn_implementation="eager")
    model = LlamaForCausalLM(config).to(bf16).eval()
    for module in model.modules():
        if isinstance(module, LlamaRMSNorm):  # weights other than 1, which the kernels must multiply by
            torch.nn.init.normal_(module.weight, 1.0, 0.2)
    assert use_grouped_eager(model)  # grpo's attention on a CPU, as its models load
    return model


@needs_kernels
def test_the_fused_step_gives_the_eager_steps_hidden_states_within_rounding():
    tokenizer = build_char_tokenizer()
    model = head_dim_64_model(tokenizer)
    decoder = model.get_decoder()
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    with packed_linears(model, rows=3):
        step, eager = DecodeStep(decoder, rows=3), DecodeStep(decoder, rows=3, fused=False)
        assert step.fused is kernels and eager.fused is None
        assert step.form.endswith("norms, rotary embedding, attention and SiLU in fused CPU kernels")
        pairs = decode_against_transformers(decoder, step, tokenizer, prompts, steps=8)
        eager_pairs = decode_against_transformers(decoder, eager, tokenizer, prompts, steps=8)
    for (ours, theirs), (plain, _) in zip(pairs, eager_pairs):
        torch.testing.assert_close(ours, plain, atol=0.05, rtol=0.02)  # a few bf16 steps (0.008 relative)
        torch.testing.assert_close(ours, theirs, atol=0.05, rtol=0.02)


@needs_kernels
def test_the_engine_samples_with_the_fused_step_as_with_the_eager_one():
    tokenizer = build_char_tokenizer()
    engine = EmbeddedEngine(head_dim_64_model(tokenizer), tokenizer, batch_size=4)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("1+1=", "what is 23+45? ", "7", "1+1=")]
    params, seeds = SamplingParams(12, 0.7), [3, 4, 5, 6]
    fused_run = engine.generate(prompts, params, seeds)
    assert "fused CPU kernels" in engine.decode_form
    engine.fused_kernels = False
    eager_run = engine.generate(prompts, params, seeds)
    assert "fused" not in engine.decode_form
    # A sum in another order may tip a sample the other way (on an Intel Xeon with AMX none does here): up to where
    # a row's samples part, the same tokens at log-probs within rounding, and most rows the same throughout.
    same_rows = 0
    for ours, theirs in zip(fused_run, eager_run):
        agree = next((i for i, (a, b) in enumerate(zip(ours.token_ids, theirs.token_ids)) if a != b),
                     min(len(ours.token_ids), len(theirs.token_ids)))
        assert agree >= 1
        torch.testing.assert_close(torch.tensor(ours.logprobs[:agree]), torch.tensor(theirs.logprobs[:agree]),
                                   atol=0.05, rtol=0)
        same_rows += ours.token_ids == theirs.token_ids
    assert same_rows >= 3


@needs_kernels
def test_models_the_kernels_do_not_cover_keep_the_eager_step():
    tokenizer = build_char_tokenizer()
    narrow = grouped_query_model(tokenizer, bf16)  # heads 8 wide
    with packed_linears(narrow, rows=2):
        assert DecodeStep(narrow.get_decoder(), rows=2).fused is None
    full = head_dim_64_model(tokenizer).float()  # fp32
    assert DecodeStep(full.get_decoder(), rows=2).fused is None
    hooked = head_dim_64_model(tokenizer)
    hooked.get_decoder().layers[0].post_attention_layernorm.register_forward_hook(lambda module, args, output: None)
    with packed_linears(hooked, rows=2):
        assert DecodeStep(hooked.get_decoder(), rows=2).fused is None  # a hook the kernels would skip
    gelu = head_dim_64_model(tokenizer)
    gelu.get_decoder().layers[1].mlp.act_fn = torch.nn.GELU()
    with packed_linears(gelu, rows=2):
        assert DecodeStep(gelu.get_decoder(), rows=2).fused is None


@needs_kernels
def test_a_mask_or_batch_that_does_not_match_the_cache_is_refused_before_the_kernels_read():
    tokenizer = build_char_tokenizer()
    model = head_dim_64_model(tokenizer)
    decoder = model.get_decoder()
    with packed_linears(model, rows=2):
        step = DecodeStep(decoder, rows=2)
        assert step.fused is kernels
        cache = preallocated_cache(8)
        with torch.no_grad():
            decoder(input_ids=torch.tensor([[5, 6, 7], [8, 9, 10]]), **cache_argument(decoder, cache), use_cache=True)
            tokens, positions = torch.tensor([1, 2]), torch.tensor([3, 3])
            with pytest.raises(ValueError, match="a mask of \\(2, 9\\)"):
                step(tokens, torch.ones(2, 9, dtype=torch.long), positions, cache)  # past the cache's 8 positions
            with pytest.raises(ValueError, match="decode step of 1 rows"):
                step(tokens[:1], torch.ones(1, 4, dtype=torch.long), positions[:1], cache)
            assert cache.layers[0].length == 3  # nothing reserved, nothing written
