from __future__ import annotations

import math

import pytest
import torch

from grpo.config import ActorConfig
from grpo.policy.optim import MasterWeightAdamW, lr_at


def bf16_linear(seed: int) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3).to(torch.bfloat16)


def backward_on(model: torch.nn.Linear, x: torch.Tensor) -> None:
    model(x.to(model.weight.dtype)).float().pow(2).sum().backward()


# ---------------------------------------------------------------------------------------------
# Master weights


def test_bf16_model_gets_separate_fp32_masters_equal_to_its_weights():
    model = bf16_linear(0)
    opt = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
    assert opt.use_master
    assert len(opt.master) == 2
    for param, master in zip(model.parameters(), opt.master):
        assert param.dtype == torch.bfloat16
        assert master.dtype == torch.float32
        assert master.data_ptr() != param.data_ptr()
        assert torch.equal(master, param.float())
    # the AdamW optimises the masters, not the bf16 params
    assert opt.optimizer.param_groups[0]["params"][0] is opt.master[0]


def test_micro_batch_grads_accumulate_in_fp32():
    model = bf16_linear(0)
    opt = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
    # d/dW of sum(W * c) is c: grads 1.0 then 2^-9, both exact in bf16.
    # fp32 sum 1 + 2^-9 = 1.001953125; in bf16 (8 significant bits) it would round back to 1.0
    small = 2.0**-9
    assert (torch.tensor(1.0, dtype=torch.bfloat16) + small).item() == 1.0
    for c in (1.0, small):
        (model.weight.float() * c).sum().backward()
        assert model.weight.grad is None  # moved into the master
    assert opt.master[0].grad.dtype == torch.float32
    assert torch.equal(opt.master[0].grad, torch.full((3, 4), 1.0 + small))
    assert opt.master[1].grad is None  # the bias got no gradient


def test_accumulated_grads_equal_the_fp32_sum_of_each_micro_batch():
    x1, x2 = torch.randn(5, 4, generator=torch.Generator().manual_seed(1)), torch.randn(
        5, 4, generator=torch.Generator().manual_seed(2)
    )
    # each micro-batch's bf16 grads on their own
    reference = bf16_linear(0)
    per_batch = []
    for x in (x1, x2):
        backward_on(reference, x)
        per_batch.append([p.grad.clone() for p in reference.parameters()])
        reference.zero_grad(set_to_none=True)

    model = bf16_linear(0)
    opt = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
    for x in (x1, x2):
        backward_on(model, x)
    for master, g1, g2 in zip(opt.master, *per_batch):
        assert torch.equal(master.grad, g1.float() + g2.float())


def test_step_updates_masters_and_copies_the_rounded_masters_into_the_bf16_params():
    model = bf16_linear(0)
    lr = 1e-3
    opt = MasterWeightAdamW(model, ActorConfig(lr=lr))
    before = [m.detach().clone() for m in opt.master]
    backward_on(model, torch.randn(5, 4, generator=torch.Generator().manual_seed(3)))
    grads = [m.grad.clone() for m in opt.master]
    opt.step()
    for param, master, old, grad in zip(model.parameters(), opt.master, before, grads):
        # AdamW's first step (no weight decay) moves each weight by lr * g / (|g| + eps) ~ lr * sign(g)
        expected = old - lr * grad / (grad.abs() + 1e-8)
        torch.testing.assert_close(master, expected, atol=1e-6, rtol=1e-6)
        assert param.dtype == torch.bfloat16
        assert torch.equal(param, master.to(torch.bfloat16))
    # the masters keep what bf16 cannot hold (a 1e-3 step is below bf16 resolution for most weights)
    assert any(not torch.equal(m, p.float()) for m, p in zip(opt.master, model.parameters()))


def test_zero_grad_clears_master_and_model_grads():
    model = bf16_linear(0)
    opt = MasterWeightAdamW(model, ActorConfig())
    backward_on(model, torch.ones(2, 4))
    opt.zero_grad()
    assert all(m.grad is None for m in opt.master)
    assert all(p.grad is None for p in model.parameters())


def _train(model: torch.nn.Linear, opt: MasterWeightAdamW, seeds: list[int]) -> None:
    for seed in seeds:
        backward_on(model, torch.randn(5, 4, generator=torch.Generator().manual_seed(seed)))
        opt.step()
        opt.zero_grad()


def test_fp32_model_keeps_no_master_copies():
    model = torch.nn.Linear(4, 3)
    opt = MasterWeightAdamW(model, ActorConfig(lr=0.1))
    assert not opt.use_master
    params = list(model.parameters())
    assert opt.master is opt.params
    assert all(m is p for m, p in zip(opt.master, params))
    backward_on(model, torch.ones(2, 4))
    grad = model.weight.grad.clone()
    assert torch.equal(model.weight.grad, grad)
    before = model.weight.detach().clone()
    opt.step()
    assert not torch.equal(model.weight, before)  # AdamW stepped the model's own params


def test_bf16_model_with_master_weights_disabled_keeps_no_copies():
    model = bf16_linear(0)
    opt = MasterWeightAdamW(model, ActorConfig(fp32_master_weights=False))
    assert not opt.use_master
    assert all(m is p for m, p in zip(opt.master, model.parameters()))


# ---------------------------------------------------------------------------------------------
# Gradient clipping


def _fp32_opt_with_grads(weight_grad: torch.Tensor) -> MasterWeightAdamW:
    model = torch.nn.Linear(2, 1, bias=False)
    opt = MasterWeightAdamW(model, ActorConfig())
    model.weight.grad = weight_grad.clone()
    return opt


def test_clip_grad_norm_returns_the_norm_before_clipping_and_clips():
    opt = _fp32_opt_with_grads(torch.tensor([[3.0, 4.0]]))
    assert opt.clip_grad_norm(1.0) == pytest.approx(5.0)
    torch.testing.assert_close(opt.master[0].grad, torch.tensor([[0.6, 0.8]]), atol=1e-5, rtol=0)


def test_clip_grad_norm_zero_max_norm_does_not_clip():
    opt = _fp32_opt_with_grads(torch.tensor([[3.0, 4.0]]))
    assert opt.clip_grad_norm(0.0) == pytest.approx(5.0)
    assert torch.equal(opt.master[0].grad, torch.tensor([[3.0, 4.0]]))


def test_clip_grad_norm_reports_non_finite_grads():
    assert math.isinf(_fp32_opt_with_grads(torch.tensor([[float("inf"), 1.0]])).clip_grad_norm(1.0))
    assert math.isnan(_fp32_opt_with_grads(torch.tensor([[float("nan"), 1.0]])).clip_grad_norm(1.0))


def test_clip_grad_norm_without_grads_is_zero():
    assert MasterWeightAdamW(torch.nn.Linear(2, 1), ActorConfig()).clip_grad_norm(1.0) == 0.0


def test_params_finite():
    model = torch.nn.Linear(2, 1)
    opt = MasterWeightAdamW(model, ActorConfig())
    assert opt.params_finite()
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    assert not opt.params_finite()


def test_set_lr():
    opt = MasterWeightAdamW(torch.nn.Linear(2, 1), ActorConfig(lr=1.0))
    opt.set_lr(0.25)
    assert [g["lr"] for g in opt.optimizer.param_groups] == [0.25]


# ---------------------------------------------------------------------------------------------
# Learning-rate schedule (steps are 0-based)


def test_lr_warmup_then_constant():
    cfg = ActorConfig(lr=1.0, warmup_steps=4, schedule="constant")
    # warm-up: lr * (step + 1) / 4
    assert [lr_at(s, 100, cfg) for s in range(6)] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    assert lr_at(99, 100, cfg) == 1.0


def test_lr_constant_without_warmup():
    cfg = ActorConfig(lr=3e-6)
    assert lr_at(0, 10, cfg) == 3e-6
    assert lr_at(50, 10, cfg) == 3e-6


def test_lr_linear_decay():
    cfg = ActorConfig(lr=1.0, warmup_steps=2, schedule="linear")
    # decay over 12 - 2 = 10 steps after warm-up; progress = (step - 2) / 10
    assert lr_at(0, 12, cfg) == pytest.approx(0.5)  # warm-up
    assert lr_at(2, 12, cfg) == pytest.approx(1.0)
    assert lr_at(7, 12, cfg) == pytest.approx(0.5)
    assert lr_at(12, 12, cfg) == pytest.approx(0.0)
    assert lr_at(20, 12, cfg) == pytest.approx(0.0)  # progress clamped at 1


def test_lr_linear_decay_with_min_lr_ratio():
    cfg = ActorConfig(lr=1.0, warmup_steps=2, schedule="linear", min_lr_ratio=0.1)
    # 0.1 + 0.9 * (1 - progress)
    assert lr_at(7, 12, cfg) == pytest.approx(0.55)
    assert lr_at(12, 12, cfg) == pytest.approx(0.1)


def test_lr_cosine_with_min_lr_ratio():
    cfg = ActorConfig(lr=2.0, schedule="cosine", min_lr_ratio=0.1)
    # 2 * (0.1 + 0.9 * 0.5 * (1 + cos(pi * step / 10)))
    assert lr_at(0, 10, cfg) == pytest.approx(2.0)
    assert lr_at(2, 10, cfg) == pytest.approx(2 * (0.1 + 0.9 * 0.5 * (1 + math.cos(0.2 * math.pi))))  # 1.828115
    assert lr_at(2, 10, cfg) == pytest.approx(1.828115, abs=1e-6)
    assert lr_at(5, 10, cfg) == pytest.approx(1.1)
    assert lr_at(10, 10, cfg) == pytest.approx(0.2)
    assert lr_at(15, 10, cfg) == pytest.approx(0.2)


def test_lr_cosine_after_warmup_starts_at_peak():
    cfg = ActorConfig(lr=1.0, warmup_steps=5, schedule="cosine")
    assert lr_at(4, 25, cfg) == pytest.approx(1.0)  # last warm-up step reaches the peak
    assert lr_at(5, 25, cfg) == pytest.approx(1.0)  # decay starts from the peak
    assert lr_at(15, 25, cfg) == pytest.approx(0.5)  # halfway through the 20 decay steps
