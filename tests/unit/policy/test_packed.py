"""bf16 linear layers laid out once for oneDNN during a generation: `F.linear`'s outputs, the
model as it was afterwards, and nothing packed where it would not be faster."""

import pytest
import torch

from grpo.config import TinyModelConfig
from grpo.policy import packed
from grpo.policy.head import split_head
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.rollout.engines import SamplingParams
from grpo.rollout.engines.embedded import EmbeddedEngine

needs_onednn_bf16 = pytest.mark.skipif(not packed._onednn_bf16(), reason="this CPU's oneDNN has no bf16 kernels")


def tiny_bf16():
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    return build_tiny_model(TinyModelConfig(), tokenizer, torch.bfloat16), tokenizer


@needs_onednn_bf16
@pytest.mark.parametrize("rows, shape", [(64, (64, 576)), (64, (3, 1, 576)), (8, (40, 576)), (64, (1, 576))])
def test_a_packed_product_is_f_linear_within_one_bf16_rounding(rows, shape):
    """To the bit on an AMD EPYC 9004; on an Intel Xeon with AMX, oneDNN's kernels for the two forms sum in
    another order from 40 rows on, and about 1 element in 10,000 lands one bf16 step away (bench/RESULTS.md)."""
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(1536, 576, generator=generator).bfloat16()
    bias = torch.randn(1536, generator=generator).bfloat16()
    x = torch.randn(*shape, generator=generator).bfloat16()
    last = torch.randn(5, 7, 576, generator=generator).bfloat16()[:, -1]  # a strided view, as the head is given
    for b in (None, bias):
        for inputs in (x, last):
            expected = torch.nn.functional.linear(inputs, weight, b)
            torch.testing.assert_close(packed.packed_product(weight, b, rows)(inputs), expected,
                                       rtol=2**-7, atol=2**-7)  # bf16 keeps 8 significant bits


@needs_onednn_bf16
def test_generation_with_packed_weights_gives_the_same_tokens_and_logprobs(monkeypatch):
    model, tokenizer = tiny_bf16()
    engine = EmbeddedEngine(model, tokenizer, batch_size=4)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ["1+1=", "abc", "abc", "hello", "7"]]
    params = SamplingParams(max_new_tokens=12, temperature=0.7)
    calls = []
    original = packed.packed_product
    monkeypatch.setattr(packed, "packed_product", lambda *a: calls.append(a) or original(*a))
    with_packing = engine.generate(prompts, params, seeds=list(range(5)))
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert len(calls) == len(linears)  # every linear layer once, the tied head not twice, once for two batches
    monkeypatch.setattr(packed, "packs", lambda weight: False)
    without = engine.generate(prompts, params, seeds=list(range(5)))
    assert [c.token_ids for c in with_packing] == [c.token_ids for c in without]
    assert [c.logprobs for c in with_packing] == [c.logprobs for c in without]


@needs_onednn_bf16
def test_the_model_is_itself_again_after_a_generation_even_a_failed_one():
    model, _ = tiny_bf16()
    linear = next(m for m in model.modules() if type(m) is torch.nn.Linear)
    head = split_head(model)[1]
    with pytest.raises(RuntimeError, match="mid-generation"):
        with packed.packed_linears(model, 8, head) as packed_head:
            assert packed_head is not None and "forward" in vars(linear)
            raise RuntimeError("mid-generation")
    assert "forward" not in vars(linear)
    x = torch.randn(2, linear.in_features).bfloat16()
    x.requires_grad_(True)
    linear(x).sum().backward()  # the class's forward again: differentiable, for the update
    assert x.grad is not None


@needs_onednn_bf16
def test_forward_hooks_still_run_on_packed_layers():
    model, _ = tiny_bf16()
    linear = next(m for m in model.modules() if type(m) is torch.nn.Linear)
    seen = []
    linear.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    with packed.packed_linears(model, 8):
        linear(torch.randn(3, linear.in_features).bfloat16())
    assert seen == [torch.Size([3, linear.out_features])]


def test_only_bf16_weights_on_a_cpu_pack():
    assert not packed.packs(torch.zeros(4, 4))  # fp32: MKL's product, not measured against a packed one
    assert not packed.packs(torch.zeros(4, 4, dtype=torch.bfloat16, device="meta"))
    model = build_tiny_model(TinyModelConfig(), build_char_tokenizer(), torch.float32)
    with packed.packed_linears(model, 8, split_head(model)[1]) as packed_head:
        assert packed_head is None
        assert not any("forward" in vars(m) for m in model.modules())
