from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo.rundir.checkpoints import (
    META_FILE, STATE_FILE, CheckpointManager, capture_rng, load_state, load_weights, restore_rng,
)
from grpo.config import CheckpointConfig, TinyModelConfig
from grpo.policy.models import build_char_tokenizer, build_tiny_model


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def tiny_model(tokenizer, seed: int, **cfg):
    torch.manual_seed(seed)
    return build_tiny_model(TinyModelConfig(**cfg), tokenizer, torch.float32)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer, seed=0)


def writer(model, tokenizer):
    def write(directory):
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)

    return write


def load_checkpoint(path, model):
    state = load_state(path)
    load_weights(path / "model", model)
    return state


def manager(tmp_path, **cfg) -> CheckpointManager:
    return CheckpointManager(tmp_path / "checkpoints", CheckpointConfig(**cfg))


def steps(mgr: CheckpointManager) -> list[int]:
    return [info.step for info in mgr.list()]


def on_disk(mgr: CheckpointManager) -> list[str]:
    return sorted(p.name for p in mgr.root.iterdir())


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


# ---------------------------------------------------------------------------------------------
# Save and load


def test_save_then_load_restores_the_weights_and_returns_the_state(tmp_path, model, tokenizer):
    mgr = manager(tmp_path)
    state = {"step": 3, "data_index": 12, "optimizer": {"exp_avg": torch.arange(4.0)}}
    info = mgr.save(3, writer(model, tokenizer), state, healthy=True, score=0.25)
    assert info.path == mgr.root / "step_000003"
    assert (info.path / STATE_FILE).is_file() and (info.path / META_FILE).is_file()
    assert (info.model_dir / "config.json").is_file()

    fresh = tiny_model(tokenizer, seed=1)
    assert not torch.equal(fresh.model.embed_tokens.weight, model.model.embed_tokens.weight)
    loaded = load_checkpoint(info.path, fresh)
    assert_same_weights(fresh, model)
    assert fresh.lm_head.weight.data_ptr() == fresh.model.embed_tokens.weight.data_ptr()  # still tied
    assert loaded["step"] == 3 and loaded["data_index"] == 12
    assert torch.equal(loaded["optimizer"]["exp_avg"], torch.arange(4.0))


def test_the_model_dir_loads_with_transformers(tmp_path, model, tokenizer):
    info = manager(tmp_path).save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    hf = AutoModelForCausalLM.from_pretrained(info.model_dir, dtype=torch.float32)
    assert_same_weights(hf, model)
    ids = torch.tensor([tokenizer.encode("1+2=")])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model(ids).logits)


def test_load_checkpoint_rejects_a_non_checkpoint_and_a_mismatched_model(tmp_path, model, tokenizer):
    with pytest.raises(FileNotFoundError, match=STATE_FILE):
        load_checkpoint(tmp_path, model)
    info = manager(tmp_path).save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    with pytest.raises(ValueError, match="does not match the model"):
        load_checkpoint(info.path, tiny_model(tokenizer, seed=0, num_layers=3))


# ---------------------------------------------------------------------------------------------
# What counts as a checkpoint


def test_stale_tmp_dirs_are_removed_on_init_and_never_listed(tmp_path, model, tokenizer):
    root = tmp_path / "checkpoints"
    for name in (".tmp-step_000005-4242", ".tmp-old-step_000004-4242"):
        (root / name / "model").mkdir(parents=True)
        (root / name / STATE_FILE).write_bytes(b"torn")
        (root / name / META_FILE).write_text('{"step": 5, "healthy": true}')
    mgr = CheckpointManager(root, CheckpointConfig())
    assert on_disk(mgr) == []
    # one appearing later (a save in flight) is not a checkpoint either
    (root / ".tmp-step_000007-1").mkdir()
    (root / ".tmp-step_000007-1" / STATE_FILE).write_bytes(b"")
    (root / ".tmp-step_000007-1" / META_FILE).write_text('{"step": 7, "healthy": true}')
    assert mgr.list() == []
    assert mgr.latest() is None
    mgr.save(2, writer(model, tokenizer), {}, healthy=True, score=None)
    assert steps(mgr) == [2]


def test_a_dir_without_trainer_state_or_meta_is_not_listed(tmp_path, model, tokenizer):
    mgr = manager(tmp_path)
    info = mgr.save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    no_state = mgr.root / "step_000009"
    no_state.mkdir()
    (no_state / META_FILE).write_text('{"step": 9, "healthy": true}')
    no_meta = mgr.root / "step_000010"
    no_meta.mkdir()
    (no_meta / STATE_FILE).write_bytes(b"")
    assert steps(mgr) == [1]
    assert mgr.latest() == info


# ---------------------------------------------------------------------------------------------
# Retention


def save_sequence(mgr, model, tokenizer):
    # step: (healthy, score)
    plan = {1: (True, 0.9), 2: (True, 0.5), 3: (True, 0.1), 4: (False, None), 5: (False, 0.95), 6: (False, None)}
    for step, (healthy, score) in plan.items():
        mgr.save(step, writer(model, tokenizer), {"step": step}, healthy=healthy, score=score)


def test_retention_keeps_newest_k_newest_healthy_and_best(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=2, keep_best=True)
    save_sequence(mgr, model, tokenizer)
    # newest 2: 5, 6; newest healthy: 3; best healthy score: 1 (0.9; step 5's 0.95 is unhealthy)
    assert steps(mgr) == [1, 3, 5, 6]
    assert on_disk(mgr) == ["step_000001", "step_000003", "step_000005", "step_000006"]
    assert mgr.latest().step == 6
    assert mgr.last_good().step == 3
    assert mgr.best().step == 1


def test_retention_without_keep_best(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=2, keep_best=False)
    save_sequence(mgr, model, tokenizer)
    assert steps(mgr) == [3, 5, 6]


def test_last_good_skips_unhealthy_and_is_none_when_all_are(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=10)
    mgr.save(1, writer(model, tokenizer), {}, healthy=False, score=None)
    assert mgr.last_good() is None
    assert mgr.best() is None
    mgr.save(2, writer(model, tokenizer), {}, healthy=True, score=None)
    mgr.save(3, writer(model, tokenizer), {}, healthy=False, score=None)
    assert mgr.latest().step == 3
    assert mgr.last_good().step == 2
    assert mgr.best() is None  # no score


def test_discard_after(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=10)
    for step in (1, 2, 3, 4):
        mgr.save(step, writer(model, tokenizer), {}, healthy=True, score=None)
    mgr.discard_after(2)
    assert steps(mgr) == [1, 2]
    assert on_disk(mgr) == ["step_000001", "step_000002"]


def test_saving_the_same_step_twice_replaces_it(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=10)
    mgr.save(2, writer(model, tokenizer), {"version": 1}, healthy=True, score=0.5)
    other = tiny_model(tokenizer, seed=5)
    info = mgr.save(2, writer(other, tokenizer), {"version": 2}, healthy=False, score=None)
    assert [(i.step, i.healthy, i.score) for i in mgr.list()] == [(2, False, None)]
    assert on_disk(mgr) == ["step_000002"]  # no leftover temporary dirs
    fresh = tiny_model(tokenizer, seed=0)
    assert load_checkpoint(info.path, fresh) == {"version": 2}
    assert_same_weights(fresh, other)


# ---------------------------------------------------------------------------------------------
# RNG


def draws(generator: torch.Generator) -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist(), torch.rand(3, generator=generator).tolist()


def test_capture_and_restore_rng_reproduce_the_same_draws():
    generator = torch.Generator().manual_seed(123)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = capture_rng(generator)
    first = draws(generator)
    assert draws(generator) != first  # the streams moved on
    restore_rng(state, generator)
    assert draws(generator) == first


def test_rng_round_trips_through_a_checkpoint(tmp_path, model, tokenizer):
    generator = torch.Generator().manual_seed(7)
    state = capture_rng(generator)
    expected = draws(generator)
    info = manager(tmp_path).save(1, writer(model, tokenizer), {"rng": state}, healthy=True, score=None)

    other = torch.Generator().manual_seed(999)
    draws(other)  # move everything elsewhere
    restore_rng(load_checkpoint(info.path, tiny_model(tokenizer, seed=0))["rng"], other)
    assert draws(other) == expected
