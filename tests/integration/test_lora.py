"""Whole runs with LoRA: reward rises, a crash resumes exactly from adapter checkpoints, and a server
engine serves the merged weights, verified by the probe after every update (a real vLLM server's case is
marked `long`)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from grpo.config import load_config

from .helpers import deterministic, make_loop, max_param_diff, metric_lines, params, run_tiny
from .test_server_engine import SGLANG

LORA = ["model.lora.rank=8"]


def test_reward_rises_with_lora(tmp_path):
    # hidden_size 512, not the preset's 64: with the head frozen, a logit can move by at most about
    # initializer_range x hidden_size (0.02 x 64 ~ 1.3 in the preset, where p(digit) tops out near
    # 0.15), because the final RMSNorm fixes the hidden state's length.
    run_tiny([f"run_dir={tmp_path / 'r'}", *LORA, "model.tiny.hidden_size=512", "model.tiny.intermediate_size=1024",
              "train.steps=20", "actor.lr=1e-2", "checkpoint.every_steps=0", "checkpoint.every_minutes=0"])
    rewards = [line["reward/mean"] for line in metric_lines(tmp_path / "r")]
    first, last = statistics.fmean(rewards[:5]), statistics.fmean(rewards[-5:])
    assert last > first + 0.2, (first, last)
    assert last > 0.5


def test_resume_after_crash_from_adapter_checkpoints_matches_uninterrupted_run(tmp_path):
    common = [*LORA, "train.steps=6", "actor.lr=1e-2", "algo.kl_coef=0.05", "model.lora.dropout=0.1"]
    straight = run_tiny([f"run_dir={tmp_path / 'straight'}", *common])

    interrupted_dir = tmp_path / "interrupted"
    with pytest.raises(RuntimeError, match="injected crash after step 3"):
        run_tiny([f"run_dir={interrupted_dir}", *common, "testing.faults.crash_at_step=3"])
    checkpoint = interrupted_dir / "checkpoints" / "step_000003" / "model"
    assert (checkpoint / "adapter_model.safetensors").is_file() and not (checkpoint / "model.safetensors").exists()
    resumed = run_tiny([f"run_dir={interrupted_dir}", *common])

    assert resumed.step == straight.step == 6
    a, b = params(straight.policy.model), params(resumed.policy.model)
    assert max_param_diff(a, b) == 0
    lora_b = [v for k, v in a.items() if ".lora_B." in k]
    assert lora_b and all(v.abs().sum() > 0 for v in lora_b)  # trained: every B has left its zero start
    lines_a = [deterministic(line) for line in metric_lines(tmp_path / "straight")]
    lines_b = [deterministic(line) for line in metric_lines(interrupted_dir)]
    assert [line["step"] for line in lines_b] == [1, 2, 3, 4, 5, 6]
    assert lines_a == lines_b
    assert all(line["actor/kl"] > 0 for line in lines_a[1:])  # the reference (adapters off) is in play


def test_old_logprobs_are_recomputed_by_default_only_where_merged_generation_rounds(tmp_path):
    for dtype, recompute in (("float32", False), ("bfloat16", True)):
        loop = make_loop(load_config("tiny", [f"run_dir={tmp_path / dtype}", *LORA, f"model.dtype={dtype}"]))
        try:
            assert loop.recompute_old is recompute
        finally:
            loop.close()


def test_a_server_engine_serves_the_merged_weights_verified_after_every_update(tmp_path):
    run_dir = tmp_path / "r"
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", *SGLANG, *LORA, "actor.lr=1e-2",
                                          "train.steps=3"]))
    exported = []
    original = loop.engine.sync_weights

    def sync_and_look(policy):
        metrics = original(policy)
        exported.append(sorted(p.name for p in loop.engine.model_dir.iterdir()))
        return metrics

    loop.engine.sync_weights = sync_and_look
    loop.train()
    lines = metric_lines(run_dir)
    assert [line["policy/version"] for line in lines] == [1, 2, 3]
    for line in lines:
        # After the first update the adapters are non-zero: a server serving the base, or stale
        # adapters, would fail the probe (and the run would stop).
        assert line["sync/probe_diff"] <= line["sync/tolerance"] == 2e-3
        assert line["rollout/logprob_mismatch"] < 1e-4  # the server sampled what the trainer computes
    assert all("model.safetensors" in files and "adapter_config.json" not in files for files in exported)
    assert (run_dir / "checkpoints" / "step_000003" / "model" / "adapter_model.safetensors").is_file()


VLLM_PYTHON = Path(os.environ.get("GRPO_VLLM_PYTHON", Path(__file__).resolve().parents[2] / ".venv-vllm/bin/python"))


@pytest.mark.vllm
@pytest.mark.long  # a vLLM start and three syncs (74 s): the stand-in serves the merged weights in the
# default suite (above), and CI syncs and verifies a real vLLM server in test_vllm.py
@pytest.mark.skipif(not VLLM_PYTHON.is_file(), reason=f"no vLLM environment at {VLLM_PYTHON} "
                    "(scripts/setup_vllm_env.sh builds it)")
def test_vllm_serves_the_merged_weights_and_their_fingerprint_matches(tmp_path):
    # vLLM-CPU's attention needs a head size of 32 or more: the tiny model with 2 heads of 32.
    run_dir = tmp_path / "r"
    make_loop(load_config("tiny", [
        f"run_dir={run_dir}", *LORA, "actor.lr=1e-2", "train.steps=3", "model.tiny.num_heads=2",
        "rollout.engine=vllm", f"rollout.server.python={VLLM_PYTHON}", "rollout.server.kv_cache_gib=1",
        "rollout.server.extra_args=[--enforce-eager,--max-model-len,1024]"])).train()
    lines = metric_lines(run_dir)
    assert [line["policy/version"] for line in lines] == [1, 2, 3]
    assert all(line["sync/probe_diff"] <= line["sync/tolerance"] for line in lines)
    events = (run_dir / "events.jsonl").read_text()
    assert "weight_sync_mismatch" not in events  # the embedding fingerprint matched at every sync
