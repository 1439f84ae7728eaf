import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, Qwen2Config
from transformers.models.llama.modeling_llama import eager_attention_forward

from grpo.policy.attention import (
    NAME,
    PACKED_SDPA,
    PLAIN_EAGER_MODELS,
    grouped_eager_attention,
    shared_prefix,
    skip_cudnn_attention,
    use_grouped_eager,
    use_packed_sdpa,
)
from grpo.policy.cache_keyword import cache_argument


class Module(torch.nn.Module):
    num_key_value_groups = 3


def inputs(dtype: torch.dtype):
    torch.manual_seed(0)
    batch, kv_heads, groups, length, keys, dim = 2, 2, 3, 5, 9, 16
    query = torch.randn(batch, kv_heads * groups, length, dim, dtype=dtype, requires_grad=True)
    key = torch.randn(batch, kv_heads, keys, dim, dtype=dtype, requires_grad=True)
    value = torch.randn(batch, kv_heads, keys, dim, dtype=dtype, requires_grad=True)
    mask = torch.zeros(batch, 1, length, keys, dtype=dtype)
    mask[0, :, :, :4] = torch.finfo(dtype).min  # row 0 is left-padded
    return query, key, value, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_outputs_and_gradients_are_eagers_to_rounding(dtype):
    query, key, value, mask = inputs(dtype)
    expected, expected_weights = eager_attention_forward(Module(), query, key, value, mask, 0.25)
    output, weights = grouped_eager_attention(Module(), query, key, value, mask, 0.25)
    assert output.shape == expected.shape == (2, 5, 6, 16)
    assert weights.shape == expected_weights.shape == (2, 6, 5, 9)
    grads = torch.autograd.grad(output.float().square().sum(), (query, key, value))
    expected_grads = torch.autograd.grad(expected.float().square().sum(), (query, key, value))
    # The same products, summed by matmuls of other shapes; eager also sums a key's gradient over its
    # copies after rounding each, where here it is summed inside the matmul.
    tolerance = 1e-6 if dtype == torch.float32 else 2 ** -7
    for got, want in zip((output, weights, *grads), (expected, expected_weights, *expected_grads)):
        assert (got.float() - want.float()).abs().max() <= tolerance * want.float().abs().max()


def small() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def test_a_llama_model_switches_and_computes_the_same_logits_to_rounding():
    model = small()
    ids = torch.randint(0, 64, (3, 7))
    with torch.no_grad():
        expected = model(ids).logits
    assert use_grouped_eager(model)
    assert model.config._attn_implementation == NAME
    with torch.no_grad():
        logits = model(ids).logits
    # The same products, summed by a matmul of another shape (a kernel may block them otherwise).
    assert (logits - expected).abs().max() <= 1e-6 * expected.abs().max()


def test_other_architectures_and_other_implementations_are_left_as_they_are():
    model = small()
    model.config.model_type = "gemma2"  # its eager attention softcaps the scores
    assert not use_grouped_eager(model) and model.config._attn_implementation == "eager"
    sdpa = small()
    sdpa.set_attn_implementation("sdpa")
    assert not use_grouped_eager(sdpa) and sdpa.config._attn_implementation == "sdpa"
    assert not use_packed_sdpa(model) and model.config._attn_implementation == "eager"
    assert {Qwen2Config().model_type, MistralConfig().model_type} <= PLAIN_EAGER_MODELS  # transformers' names


def test_packed_sdpa_is_transformers_sdpa_for_everything_but_a_packed_micro_batch():
    model = small()
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, 64, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[0, :3] = 0  # left padding: transformers builds its SDPA mask, not the causal shortcut
    def forwards() -> list[torch.Tensor]:
        with torch.no_grad():
            prefill = model(ids, attention_mask=mask, use_cache=True)
            decode = model(ids[:, :1], attention_mask=torch.cat([mask, mask[:, :1]], dim=1),
                           **cache_argument(model, prefill.past_key_values), use_cache=True)  # one token, cached
            return [model(ids).logits, prefill.logits, decode.logits]

    expected = forwards()
    assert use_packed_sdpa(model) and model.config._attn_implementation == PACKED_SDPA
    for logits, want in zip(forwards(), expected):
        assert torch.equal(logits, want)


def test_a_model_loaded_onto_a_gpu_takes_sdpa_without_cudnn():
    """cuDNN's attention plans every new shape anew (1.6 ms of host time a call on an H200); a CPU is left alone."""
    enabled = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        skip_cudnn_attention(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        skip_cudnn_attention(torch.device("cuda", 0))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(enabled)


def test_a_shared_beginning_leaves_each_prompt_a_token_and_is_used_where_it_saves_enough():
    beginning = list(range(10))
    assert shared_prefix([beginning + [1], beginning + [2, 3]], min_saved=10) == 10
    assert shared_prefix([beginning + [1], beginning + [2, 3]], min_saved=11) == 0  # 10 tokens saved: too few
    assert shared_prefix([beginning, beginning + [5], beginning + [6]], min_saved=1) == 9  # the shortest keeps one
    assert shared_prefix([beginning + [1]], min_saved=1) == 0  # one prompt: nothing shared
    assert shared_prefix([[1, *beginning], [2, *beginning]], min_saved=1) == 0  # a common end is not a beginning
