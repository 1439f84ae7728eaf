"""The memory model: each knob moves the phase it should, and it models the constants the policy runs with."""

import subprocess
import sys
from dataclasses import replace

import pytest

from grpo.config import load_config
from grpo.policy import attention, head
from grpo.policy.constants import GROUPED_EAGER, HEAD_CHUNK_TOKENS, PACKED_SDPA, PLAIN_EAGER_MODELS
from grpo.policy.models import load_model_and_tokenizer
from grpo.tools.plan import GIB, SMOLLM2_135M, Architecture, architecture, plan_memory, suggestion
from grpo.tools.plan.model import attention_for

SMOL = Architecture.from_config_json(SMOLLM2_135M, "float32")
BF16 = ["model.dtype=bfloat16"]  # the model of bf16 weights with fp32 masters, whatever auto picks on this CPU


def phases(cfg, arch=SMOL, prompt_len=51):
    return {p.name: p.bytes for p in plan_memory(cfg, "cpu", arch, prompt_len).phases}


def test_smollm2_preset_is_135m_parameters():
    assert SMOL.params == 134_515_008  # SmolLM2-135M's count, embeddings tied


@pytest.mark.parametrize("override, lower", [
    ("model.lora.rank=16", "update"),
    ("actor.fp32_master_weights=false", "update"),
    ("model.gradient_checkpointing=true", "update"),
    ("algo.micro_batch_size=8", "update"),
    ("rollout.generation_batch_size=16", "generation"),
])
def test_each_memory_knob_lowers_its_phase(override, lower):
    base = load_config("quickstart", BF16)
    changed = load_config("quickstart", [*BF16, override])
    assert phases(changed)[lower] < phases(base)[lower]


def test_fp32_master_weights_cost_what_they_should():
    with_master = phases(load_config("quickstart", BF16))["update"]
    without = phases(load_config("quickstart", [*BF16, "actor.fp32_master_weights=false"]))["update"]
    # fp32 master weights (4 bytes), fp32 instead of bf16 AdamW moments (2 x 2) and fp32 gradients (2)
    assert with_master - without == pytest.approx(SMOL.params * (4 + 4 + 2), rel=1e-9)


def test_generation_on_a_cpu_in_bf16_holds_its_laid_out_weights():
    def packed(cfg, device):
        generation = plan_memory(cfg, device, SMOL, 51).phases[1]
        return sum(c.bytes for c in generation.components if c.name == "packed weights")

    # Every linear layer's weights and the head, in bf16: all the parameters but the norms (grpo.policy.packed),
    # and q, k and v once more, as the decode step's one product.
    norms = SMOL.num_layers * 2 * SMOL.hidden_size + SMOL.hidden_size
    qkv = SMOL.num_layers * SMOL.hidden_size * (SMOL.num_heads + 2 * SMOL.num_kv_heads) * SMOL.head_dim
    assert packed(load_config("quickstart", BF16), "cpu") == (SMOL.params - norms + qkv) * 2
    assert packed(load_config("quickstart", ["model.dtype=float32"]), "cpu") == 0  # F.linear, nothing laid out
    assert packed(load_config("quickstart", BF16), "cuda") == 0


def test_the_suggested_micro_batch_size_fits_the_room_it_was_asked_for():
    cfg = load_config("quickstart", BF16)
    plan = plan_memory(cfg, "cpu", SMOL, 51)
    room = plan.peak_bytes - 0.3 * GIB
    line = suggestion(cfg, plan, room, "cpu")
    size = int(line.split("algo.micro_batch_size=")[1].split()[0])
    assert size < cfg.algo.micro_batch_size
    fitted = replace(cfg, algo=replace(cfg.algo, micro_batch_size=size))
    assert plan_memory(fitted, "cpu", SMOL, 51).peak_bytes <= room
    bigger = replace(cfg, algo=replace(cfg.algo, micro_batch_size=size + 1))
    assert plan_memory(bigger, "cpu", SMOL, 51).peak_bytes > room  # the largest that fits


def test_a_same_gpu_server_is_named_in_the_plan():
    cfg = load_config("quickstart", [*BF16, "rollout.engine=vllm", "rollout.server.memory_fraction=0.6"])
    plan = plan_memory(cfg, "cuda", SMOL, 51)
    assert plan.server_note is not None and "60%" in plan.server_note
    assert "KV cache" not in [c.name for p in plan.phases for c in p.components]  # the server generates


def test_grouped_eager_attention_keeps_keys_and_values_once_per_key_value_head():
    grouped = phases(load_config("quickstart", BF16))
    eager = phases(load_config("quickstart", [*BF16, "model.attn_implementation=eager"]))
    assert grouped["update"] < eager["update"]  # SmolLM2: 3 key-value heads for 9 query heads
    assert grouped["load"] == eager["load"]


def test_the_plan_models_the_constants_the_policy_runs_with():
    assert head.CHUNK_TOKENS == HEAD_CHUNK_TOKENS
    assert attention.NAME == GROUPED_EAGER and attention.PACKED_SDPA == PACKED_SDPA
    assert attention.PLAIN_EAGER_MODELS is PLAIN_EAGER_MODELS
    # One more token than a chunk: the logits component grows by that token's model-dtype logits only, not by
    # another token of fp32 chunk temporaries.
    cfg = load_config("quickstart", [*BF16, "rollout.problems_per_step=1", "rollout.samples_per_problem=2",
                                     "model.lora.rank=4"])
    logits = {}
    for tokens in (HEAD_CHUNK_TOKENS // 2, HEAD_CHUNK_TOKENS // 2 + 1):
        trial = replace(cfg, rollout=replace(cfg.rollout, max_new_tokens=tokens))
        update = plan_memory(trial, "cpu", SMOL, 51).phases[2]
        logits[tokens] = next(c.bytes for c in update.components if c.name == "logits")
    assert logits[HEAD_CHUNK_TOKENS // 2 + 1] - logits[HEAD_CHUNK_TOKENS // 2] == 2 * SMOL.vocab_size * 2


def test_the_planned_attention_is_the_one_the_loader_runs():
    import torch

    cfg = load_config("tiny", ["model.device=cpu"])
    model, _ = load_model_and_tokenizer(cfg.model, torch.device("cpu"))
    assert model.config._attn_implementation == attention_for(cfg, "cpu", architecture(cfg)) == GROUPED_EAGER
    # Off the CPU, SDPA in the form that runs the update packed: the meta device takes the loader's same branch.
    gpu_model, _ = load_model_and_tokenizer(cfg.model, torch.device("meta"))
    assert gpu_model.config._attn_implementation == attention_for(cfg, "cuda", architecture(cfg)) == PACKED_SDPA


def test_the_memory_model_runs_without_torch():
    # On a CPU whose flags decide model.dtype=auto (AVX2 here); one with bf16 instructions and no AMX times
    # a product in torch to decide (grpo.precision).
    code = ("import sys; import grpo.precision as p; p.cpu_flags = lambda: frozenset({'avx2'}); "
            "from grpo.config import load_config; from grpo.tools.plan.model import Architecture, "
            "plan_memory; from grpo.tools.plan.machine import SMOLLM2_135M; "
            "arch = Architecture.from_config_json(SMOLLM2_135M, 'float32'); "
            "plan_memory(load_config('quickstart'), 'cpu', arch, 51); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_long_answer_budget_is_refused_naming_the_budget_that_fits():
    """Issue 25 item 3: a run refused for memory names the knob with which `grpo plan` says it fits."""
    import re

    from grpo.tools.plan import refusal

    cfg = load_config("quickstart", [*BF16, "rollout.max_new_tokens=100000", "memory.limit_gib=16"])
    line = refusal(cfg, "cpu")
    assert line is not None and "no knob" not in line, line
    budget = int(re.search(r"rollout\.max_new_tokens=(\d+) \(from 100000\)", line).group(1))
    fitted = load_config("quickstart", [*BF16, f"rollout.max_new_tokens={budget}", "memory.limit_gib=16"])
    assert refusal(fitted, "cpu") is None
    assert refusal(load_config("quickstart", [*BF16, f"rollout.max_new_tokens={budget + 1}", "memory.limit_gib=16"]),
                   "cpu") is not None
