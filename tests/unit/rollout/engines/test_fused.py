"""The decode step's fused CPU kernels: each against the eager operations it replaces (their roundings to bf16;
where they sum, within one bf16 step), the whole step against the eager one, and where they do not apply."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from grpo.policy.attention import use_grouped_eager
from grpo.policy.models import build_char_tokenizer
from grpo.policy.packed import packed_linears
from grpo.rollout.engines import SamplingParams, fused
from grpo.rollout.engines.decode_step import DecodeStep, rotate_in_place
from grpo.rollout.engines.embedded import EmbeddedEngine
from tests.unit.rollout.engines.test_decode_step import decode_against_transformers, grouped_query_model

kernels = fused.fused_kernels()
needs_kernels = pytest.mark.skipif(kernels is None, reason="the fused kernels are not built here (no C compiler or "
                                                           "no AVX-512): the decode step stays eager")
bf16 = torch.bfloat16


def assert_within_a_bf16_step(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Equal but where an fp32 sum taken in another order rounds to the neighbouring bf16 value: few and one step."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype == bf16
    step = theirs.float().abs().clamp(min=2.0 ** -100) * 2.0 ** -7  # one bf16 step at each value, at most
    assert ((ours.float() - theirs.float()).abs() <= step).all()
    assert (ours != theirs).float().mean() < 0.01


@needs_kernels
@pytest.mark.parametrize("rows, hidden", [(3, 40), (9, 64), (64, 576)])  # not a multiple of 16; one thread; both
def test_residual_add_and_rms_norm_are_eagers(rows, hidden):
    torch.manual_seed(0)
    norm = LlamaRMSNorm(hidden, eps=1e-5).to(bf16)
    torch.nn.init.normal_(norm.weight, 1.0, 0.3)
    residual, delta = (torch.randn(rows, hidden, dtype=bf16) * 4 for _ in range(2))
    expected_residual = residual + delta
    with torch.no_grad():
        expected = norm(expected_residual)
    out = torch.empty_like(residual)
    kernels.add_rms_norm(residual, delta, norm, out)
    assert torch.equal(residual, expected_residual)  # in place, as eager's add rounds
    assert_within_a_bf16_step(out, expected)
    again = torch.empty_like(residual)
    kernels.add_rms_norm(residual, None, norm, again)  # no delta: the norm alone
    assert torch.equal(residual, expected_residual) and torch.equal(again, out)


@needs_kernels
@pytest.mark.parametrize("rows, heads, kv_heads, dim", [(3, 4, 2, 64), (9, 6, 2, 40)])
def test_rotary_embedding_in_place_and_the_cache_write_are_eagers(rows, heads, kv_heads, dim):
    torch.manual_seed(0)
    qkv = torch.randn(rows, heads + 2 * kv_heads, dim, dtype=bf16)
    angles = torch.randn(rows, 1, dim // 2) * 3
    cos, sin = (torch.cat([f(angles), f(angles)], -1).to(bf16) for f in (torch.cos, torch.sin))
    sin_signed = torch.cat([-sin[..., : dim // 2], sin[..., dim // 2 :]], -1)  # [R, 1, D]
    expected = qkv.clone()
    rotate_in_place(expected[:, : heads + kv_heads], cos, sin_signed)
    keys, values = (torch.zeros(rows, kv_heads, 7, dim, dtype=bf16) for _ in range(2))
    ours = qkv.clone().view(rows, -1)
    kernels.rope_store(ours, cos.view(rows, dim), sin_signed.view(rows, dim).contiguous(), heads, kv_heads, keys,
                       values, position=5)
    assert torch.equal(ours.view_as(expected), expected)
    assert torch.equal(keys[:, :, 5], expected[:, heads : heads + kv_heads])
    assert torch.equal(values[:, :, 5], expected[:, heads + kv_heads :])
    assert not keys[:, :, :5].any() and not keys[:, :, 6:].any()  # nothing else written


@needs_kernels
@pytest.mark.parametrize("rows, heads, kv_heads, dim, length", [(3, 9, 3, 64, 37), (9, 8, 1, 128, 5), (2, 2, 2, 64, 1)])
def test_attention_over_the_buffers_is_eagers_within_a_bf16_step(rows, heads, kv_heads, dim, length):
    torch.manual_seed(0)
    capacity = length + 6
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, dtype=bf16) * 2
    keys, values = (torch.zeros(rows, kv_heads, capacity, dim, dtype=bf16) for _ in range(2))
    keys[:, :, :length], values[:, :, :length] = (torch.randn(rows, kv_heads, length, dim, dtype=bf16) for _ in range(2))
    allowed = torch.ones(rows, length, dtype=torch.uint8)
    allowed[0, : length // 2] = 0  # a left-padded row
    scaling = dim ** -0.5
    # Eager's arithmetic (DecodeStep's whole-buffer attention): scores rounded to bf16, scaled, masked, softmax in
    # fp32, its weights in bf16, the weighted values.
    query = qkv.view(rows, -1, dim)[:, :heads].reshape(rows, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(query, keys[:, :, :length].transpose(-1, -2)).mul_(scaling)  # [R, K, G, S]
    scores = scores.masked_fill(~allowed.bool()[:, None, None], float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(bf16)
    expected = torch.matmul(weights, values[:, :, :length]).view(rows, heads * dim)
    out = torch.empty(rows, heads * dim, dtype=bf16)
    assert kernels.attention_fits(heads, kv_heads, dim)
    kernels.attention(qkv, heads, keys, values, allowed, scaling, out)
    assert_within_a_bf16_step(out, expected)


@needs_kernels
def test_silu_and_multiply_are_eagers():
    torch.manual_seed(0)
    gate, up = (torch.randn(5, 1000, dtype=bf16) * 6 for _ in range(2))
    gate[0, :3] = torch.tensor([-200.0, 90.0, 0.0])  # exp's ends: 0, infinity (silu -0 and x), and 0
    expected = torch.nn.functional.silu(gate) * up
    assert_within_a_bf16_step(kernels.silu_mul(gate.clone(), up), expected)


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
    # A sum in another order may tip a sample the other way; on this model and these seeds none does.
    assert [c.token_ids for c in fused_run] == [c.token_ids for c in eager_run]
    for ours, theirs in zip(fused_run, eager_run):
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs), atol=0.05, rtol=0)


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


def test_a_build_that_cannot_run_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(RuntimeError, match="no C compiler"):
        fused._build()
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    with pytest.raises(RuntimeError, match="false failed"):
        fused._build()
    assert not list((tmp_path / "kernels").iterdir())  # no partial library left to load
