"""The policy's training state through torch.distributed.checkpoint: fp32 masters, parameters and
AdamW's moments come back exactly, and training goes on identically."""

from __future__ import annotations

import pytest
import torch

from grpo.config import ActorConfig
from grpo.policy import state
from grpo.policy.optim import MasterWeightAdamW

from .test_optim import _train, bf16_linear


def test_a_round_trip_restores_masters_params_and_moments_and_training_goes_on_identically(tmp_path):
    cfg = ActorConfig(lr=1e-2, weight_decay=0.01)
    model = bf16_linear(0)
    opt = MasterWeightAdamW(model, cfg)
    _train(model, opt, [10, 11, 12])
    state.save(model, opt, tmp_path / "policy", sharded=False)

    fresh_model = bf16_linear(99)
    assert not torch.equal(fresh_model.weight, model.weight)
    fresh = MasterWeightAdamW(fresh_model, cfg)
    state.load(fresh_model, fresh, tmp_path / "policy", sharded=False)
    for a, b in zip(opt.master, fresh.master):
        assert torch.equal(a, b)
    for a, b in zip(model.parameters(), fresh_model.parameters()):
        assert torch.equal(a, b)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(opt.optimizer.state[opt.master[0]][key], fresh.optimizer.state[fresh.master[0]][key])

    _train(model, opt, [13])
    _train(fresh_model, fresh, [13])
    for a, b in zip(model.parameters(), fresh_model.parameters()):
        assert torch.equal(a, b)


def test_a_state_saved_before_the_first_step_leaves_adamw_fresh(tmp_path):
    model = bf16_linear(0)
    opt = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
    state.save(model, opt, tmp_path / "policy", sharded=False)
    trained = bf16_linear(5)
    other = MasterWeightAdamW(trained, ActorConfig(lr=1e-2))
    _train(trained, other, [1])
    state.load(trained, other, tmp_path / "policy", sharded=False)
    assert not other.optimizer.state  # as it was when saved: the next step is AdamW's first
    assert torch.equal(trained.weight, model.weight)


def test_a_state_of_another_shape_is_refused(tmp_path):
    model = bf16_linear(0)
    state.save(model, MasterWeightAdamW(model, ActorConfig()), tmp_path / "policy", sharded=False)
    wider = torch.nn.Linear(4, 5).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"weight has shape \(3, 4\) there, the model's is \(5, 4\)"):
        state.load(wider, MasterWeightAdamW(wider, ActorConfig()), tmp_path / "policy", sharded=False)
