"""The policy's training state through torch.distributed.checkpoint: fp32 masters, parameters and
AdamW's moments come back exactly, and training goes on identically."""

from __future__ import annotations

import pytest
import torch

from grpo.config import ActorConfig, TinyModelConfig
from grpo.policy import state
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.policy.optim import MasterWeightAdamW
from grpo.rundir.checkpoints import file_crc32
from grpo.rundir.direct import STAGING, Written

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


def test_a_save_goes_past_the_page_cache_recording_each_file_and_loads_back_equal(tmp_path):
    torch.manual_seed(0)
    wider = TinyModelConfig(hidden_size=256, num_layers=4, intermediate_size=512)
    model = build_tiny_model(wider, build_char_tokenizer(), torch.bfloat16)  # fp32 masters, as the quickstart's
    opt = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
    model(torch.arange(12).view(2, 6)).logits.float().pow(2).mean().backward()
    opt.step()

    written = state.save(model, opt, tmp_path / "direct", sharded=False)
    assert state.save(model, opt, tmp_path / "plain", sharded=False, direct=False) == {}  # torch's own files
    files = sorted((tmp_path / "direct").iterdir())
    assert sorted(written) == files and any(f.stat().st_size > STAGING for f in files)
    for file in files:
        assert written[file] == Written(file.stat().st_size, file_crc32(file))
        if file.name != ".metadata":  # which holds the directory's name and a save's id
            assert file.read_bytes() == (tmp_path / "plain" / file.name).read_bytes()

    torch.manual_seed(1)
    fresh_model = build_tiny_model(wider, build_char_tokenizer(), torch.bfloat16)
    fresh = MasterWeightAdamW(fresh_model, ActorConfig(lr=1e-2))
    state.load(fresh_model, fresh, tmp_path / "direct", sharded=False)
    for a, b in zip(opt.master, fresh.master):
        assert torch.equal(a, b)
    for a, b in zip(opt.master, fresh.master):
        assert torch.equal(opt.optimizer.state[a]["exp_avg_sq"], fresh.optimizer.state[b]["exp_avg_sq"])
