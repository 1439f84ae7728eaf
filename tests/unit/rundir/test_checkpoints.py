from __future__ import annotations

import errno
import random
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo.config import ActorConfig, CheckpointConfig, TinyModelConfig
from grpo.errors import DiskError
from grpo.policy import state as policy_state
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.policy.optim import MasterWeightAdamW
from grpo.rundir import checkpoints, direct
from grpo.rundir.checkpoints import (
    META_FILE,
    STATE_FILE,
    CheckpointInvalid,
    CheckpointStore,
    capture_rng,
    file_crc32,
    load_weights,
    restore_rng,
)


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
    """What the loop writes into a checkpoint: the model directory and the policy's training state."""

    def write(directory):
        model.save_pretrained(directory / "model")
        tokenizer.save_pretrained(directory / "model")
        return policy_state.save(model, MasterWeightAdamW(model, ActorConfig()), directory / "policy", sharded=False)

    return write


def load_checkpoint(path, model):
    store = CheckpointStore(path.parent, CheckpointConfig())
    info = store.open(path)
    state = store.load_state(info)
    load_weights(info.model_dir, model)
    return state


def manager(tmp_path, **cfg) -> CheckpointStore:
    return CheckpointStore(tmp_path / "checkpoints", CheckpointConfig(**cfg))


def steps(mgr: CheckpointStore) -> list[int]:
    return [info.step for info in mgr.list()]


def on_disk(mgr: CheckpointStore) -> list[str]:
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


def test_open_rejects_a_non_checkpoint_and_load_weights_a_mismatched_model(tmp_path, model, tokenizer):
    with pytest.raises(CheckpointInvalid, match=META_FILE):
        load_checkpoint(tmp_path, model)
    info = manager(tmp_path).save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    with pytest.raises(ValueError, match="does not match the model"):
        load_checkpoint(info.path, tiny_model(tokenizer, seed=0, num_layers=3))
    with pytest.raises(ValueError, match="has shape"):
        load_checkpoint(info.path, tiny_model(tokenizer, seed=0, hidden_size=32))


def test_a_lora_adapter_is_a_model_directory_and_a_directory_with_neither_is_not(tmp_path):
    layer = torch.nn.Linear(2, 2)

    def adapter(directory):
        (directory / "model").mkdir()
        (directory / "model" / "adapter_config.json").write_text("{}")
        (directory / "model" / "adapter_model.safetensors").write_bytes(b"x")
        policy_state.save(layer, MasterWeightAdamW(layer, ActorConfig()), directory / "policy", sharded=False)

    def policy_only(directory):
        policy_state.save(layer, MasterWeightAdamW(layer, ActorConfig()), directory / "policy", sharded=False)

    mgr = manager(tmp_path)
    info = mgr.save(1, adapter, {}, healthy=True, score=None)
    assert mgr.open(info.path).step == 1 and "model/adapter_config.json" in info.meta["files"]
    mgr.save(2, policy_only, {}, healthy=True, score=None)
    _, invalid = mgr.scan()
    assert invalid == [(mgr.root / "step_000002",
                        "the manifest lists no model/config.json (or model/adapter_config.json)")]


def test_the_manifest_lists_every_file_with_size_and_checksum(tmp_path, model, tokenizer):
    info = manager(tmp_path).save(1, writer(model, tokenizer), {"x": 1}, healthy=True, score=None,
                                  logs={"metrics.jsonl": 123})
    files = info.meta["files"]
    assert STATE_FILE in files and "model/config.json" in files and "model/model.safetensors" in files
    for name, entry in files.items():
        assert (info.path / name).stat().st_size == entry["size"]
    assert info.log_offsets == {"metrics.jsonl": 123}


def test_the_manifest_takes_the_policy_files_as_written_and_reads_back_the_others(tmp_path, model, tokenizer,
                                                                                  monkeypatch):
    read = []

    def reading(path):
        read.append(path.relative_to(tmp_path / "checkpoints" / ".tmp-step_000001").as_posix())
        return file_crc32(path)

    monkeypatch.setattr(checkpoints, "file_crc32", reading)
    info = manager(tmp_path).save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    policy = {name for name in info.meta["files"] if name.startswith("policy/")}
    assert "policy/.metadata" in policy and "policy/__0_0.distcp" in policy
    assert sorted(read) == sorted(set(info.meta["files"]) - policy)  # model/ and trainer_state.pt
    for name, entry in info.meta["files"].items():  # what `verify` checks on resume
        assert entry == {"size": (info.path / name).stat().st_size, "crc32": file_crc32(info.path / name)}, name


def test_a_full_disk_in_the_policy_state_raises_enospc_from_the_direct_write_and_leaves_nothing(
        small_disk, model, tokenizer):
    disk = small_disk("16m")
    mgr = CheckpointStore(disk / "checkpoints", CheckpointConfig())

    def write(directory):
        model.save_pretrained(directory / "model")
        small_disk(f"{(shutil.disk_usage(disk).used >> 10) + 64}k")  # room for 64 KiB of the policy state
        return policy_state.save(model, MasterWeightAdamW(model, ActorConfig()), directory / "policy", sharded=False)

    with pytest.raises(DiskError, match="No space left on device while writing .*step_000001") as raised:
        mgr.save(1, write, {}, healthy=True, score=None)
    assert raised.value.errno == errno.ENOSPC
    failure, stack = raised.value.cause.failures[0]  # torch.distributed.checkpoint's CheckpointException
    assert type(failure) is OSError and failure.errno == errno.ENOSPC
    assert stack[-1].filename == direct.__file__  # raised by os.write in DirectFile, not by the page cache
    assert on_disk(mgr) == []


# ---------------------------------------------------------------------------------------------
# What counts as a checkpoint


def tear(path, how: str) -> None:
    """Damage a file the ways a kill, a full disk or bit rot do."""
    if how == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "flip":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif how == "garbage":
        path.write_bytes(b"\x00\x01not json")
    elif how == "delete":
        path.unlink()


@pytest.mark.parametrize("target,how,reason", [
    (STATE_FILE, "truncate", "bytes, expected"),
    (STATE_FILE, "empty", "bytes, expected"),
    (STATE_FILE, "delete", "is missing"),
    ("model/model.safetensors", "truncate", "bytes, expected"),
    (META_FILE, "garbage", "unreadable"),
    (META_FILE, "delete", "meta.json is missing"),
])
def test_a_torn_checkpoint_is_invalid_and_says_why(tmp_path, model, tokenizer, target, how, reason):
    mgr = manager(tmp_path, keep_last=5)
    older = mgr.save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    newest = mgr.save(2, writer(model, tokenizer), {}, healthy=True, score=None)
    tear(newest.path / target, how)
    valid, invalid = mgr.scan()
    assert valid == [older] and mgr.latest() == older and mgr.last_good() == older
    assert [(p.name, reason in why) for p, why in invalid] == [("step_000002", True)]


def test_verify_catches_a_flipped_byte_that_keeps_the_size(tmp_path, model, tokenizer):
    mgr = manager(tmp_path)
    info = mgr.save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    tear(info.path / "model" / "model.safetensors", "flip")
    assert mgr.list() == [info]  # the cheap scan cannot see it...
    with pytest.raises(CheckpointInvalid, match="checksum"):
        mgr.verify(info)  # ...the verify before every load does


def test_recover_removes_unfinished_writes_and_moves_invalid_checkpoints_aside(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=5)
    good = mgr.save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    torn = mgr.save(2, writer(model, tokenizer), {}, healthy=True, score=None)
    tear(torn.path / STATE_FILE, "truncate")
    unfinished = mgr.root / ".tmp-step_000003"
    (unfinished / "model").mkdir(parents=True)
    (unfinished / STATE_FILE).write_bytes(b"torn")
    notes = mgr.recover()
    assert on_disk(mgr) == ["invalid", "step_000001"]
    assert mgr.list() == [good]
    quarantined = list((mgr.root / "invalid").iterdir())
    assert len(quarantined) == 1 and "bytes, expected" in (quarantined[0] / "INVALID.txt").read_text()
    assert any("unfinished" in n for n in notes) and any("invalid" in n for n in notes)


def test_only_the_newest_invalid_checkpoint_is_kept_so_torn_ones_never_fill_the_disk(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=5)
    mgr.save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    for step in (2, 3):  # torn, found at a start, torn again at the next save of that step
        torn = mgr.save(step, writer(model, tokenizer), {}, healthy=True, score=None)
        tear(torn.path / STATE_FILE, "truncate")
        mgr.recover()
    quarantined = [p.name for p in (mgr.root / "invalid").iterdir()]
    assert len(quarantined) == 1 and quarantined[0].startswith("step_000003-")
    assert on_disk(mgr) == ["invalid", "step_000001"]


def test_recover_undoes_a_replacement_cut_short(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=5)
    info = mgr.save(2, writer(model, tokenizer), {"version": 1}, healthy=True, score=None)
    # killed between renaming the old copy aside and renaming the new one in
    info.path.rename(mgr.root / ".replaced-step_000002")
    (mgr.root / ".tmp-step_000002").mkdir()
    notes = mgr.recover()
    assert steps(mgr) == [2] and on_disk(mgr) == ["step_000002"]
    assert any("restored step_000002" in n for n in notes)


def test_recover_finishes_a_deletion_cut_short(tmp_path, model, tokenizer):
    mgr = manager(tmp_path, keep_last=5)
    mgr.save(1, writer(model, tokenizer), {}, healthy=True, score=None)
    info = mgr.save(2, writer(model, tokenizer), {}, healthy=True, score=None)
    trash = mgr.root / ".trash-step_000002"
    info.path.rename(trash)  # killed while pruning: half of it already unlinked
    (trash / "meta.json").unlink()
    mgr.recover()
    assert on_disk(mgr) == ["step_000001"] and steps(mgr) == [1]


def test_a_failed_write_leaves_nothing_behind(tmp_path, model, tokenizer):
    mgr = manager(tmp_path)

    def failing(directory):
        (directory / "model").mkdir()
        (directory / "model" / "partial").write_bytes(b"x" * 100)
        raise OSError(28, "No space left on device")

    from grpo.errors import DiskError

    with pytest.raises(DiskError, match="No space left on device while writing .*step_000001"):
        mgr.save(1, failing, {}, healthy=True, score=None)
    assert on_disk(mgr) == []


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
    assert on_disk(mgr) == ["step_000001", "step_000002"]  # deleted through .trash-*, which is gone too


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


def draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_capture_and_restore_rng_reproduce_the_same_draws():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = capture_rng()
    first = draws()
    assert draws() != first  # the streams moved on
    restore_rng(state)
    assert draws() == first


def test_rng_round_trips_through_a_checkpoint(tmp_path, model, tokenizer):
    state = capture_rng()
    expected = draws()
    info = manager(tmp_path).save(1, writer(model, tokenizer), {"rng": state}, healthy=True, score=None)
    draws()  # move everything elsewhere
    restore_rng(load_checkpoint(info.path, tiny_model(tokenizer, seed=0))["rng"])
    assert draws() == expected
