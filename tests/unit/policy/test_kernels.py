"""grpo's fused CPU kernels, each against the eager operations it replaces (their roundings to bf16; where they sum,
within one bf16 step), and a build that cannot run."""

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from grpo.policy import kernels as fused
from grpo.rollout.engines.decode_step import rotate_in_place

kernels = fused.fused_kernels()
needs_kernels = pytest.mark.skipif(kernels is None, reason="the fused kernels are not built here (no C compiler or "
                                                           "no AVX-512): the eager forms run")
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


@needs_kernels
@pytest.mark.parametrize("shape", [(2, 37, 40), (1, 300, 576), (5, 64)])  # rows on one thread and on both
def test_rms_norm_forward_and_backward_are_autograd_through_transformers_norm(shape):
    torch.manual_seed(0)
    norm = LlamaRMSNorm(shape[-1], eps=1e-6).to(bf16)
    torch.nn.init.normal_(norm.weight, 1.0, 0.3)
    x = (torch.randn(shape) * 3).to(bf16).requires_grad_()
    grad = torch.randn(shape).to(bf16)
    norm(x).backward(grad)
    out, inv_rms = kernels.rms_norm_forward(x.detach(), norm.weight.detach(), norm.variance_epsilon)
    grad_x, grad_weight = kernels.rms_norm_backward(grad, x.detach(), norm.weight.detach(), inv_rms)
    with torch.no_grad():
        assert_within_a_bf16_step(out, norm(x))
    assert inv_rms.shape == (x.numel() // shape[-1],) and inv_rms.dtype == torch.float32
    assert_within_a_bf16_step(grad_x, x.grad)
    assert_within_a_bf16_step(grad_weight, norm.weight.grad)


def test_a_build_that_cannot_run_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(RuntimeError, match="no C compiler"):
        fused._build()
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    with pytest.raises(RuntimeError, match="false failed"):
        fused._build()
    assert not list((tmp_path / "kernels").iterdir())  # no partial library left to load
