"""The memory plan: parameter counts match the real models, and each knob moves the phase it should."""

from dataclasses import replace

import pytest

from grpo.config import load_config
from grpo.tools.plan import GIB, SMOLLM2_135M, Architecture, architecture, plan_memory, suggestion
from grpo.policy.models import build_char_tokenizer, build_tiny_model

SMOL = Architecture.from_config_json(SMOLLM2_135M, "float32")


def phases(cfg, arch=SMOL, prompt_len=51):
    return {p.name: p.bytes for p in plan_memory(cfg, "cpu", arch, prompt_len).phases}


def test_the_tiny_architecture_counts_the_parameters_of_the_model_it_builds():
    cfg = load_config("tiny", ["model.tiny.hidden_size=96", "model.tiny.num_heads=3", "model.tiny.num_layers=3"])
    model = build_tiny_model(cfg.model.tiny, build_char_tokenizer(), dtype=__import__("torch").float32)
    assert architecture(cfg).params == sum(p.numel() for p in model.parameters())


def test_smollm2_preset_is_135m_parameters():
    assert SMOL.params == 134_515_008  # SmolLM2-135M's count, embeddings tied


@pytest.mark.parametrize("targets", [["all-linear"], ["q_proj", "v_proj"]])
def test_lora_counts_the_adapters_peft_makes(targets):
    pytest.importorskip("peft")
    from grpo.policy import lora

    cfg = load_config("tiny", ["model.tiny.hidden_size=96", "model.tiny.num_heads=3", "model.lora.rank=4",
                               f"model.lora.target_modules=[{','.join(targets)}]"])
    model = lora.wrap(build_tiny_model(cfg.model.tiny, build_char_tokenizer(), __import__("torch").float32),
                      cfg.model.lora)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert architecture(cfg).lora_params(4, targets) == trained


@pytest.mark.parametrize("override, lower", [
    ("model.lora.rank=16", "update"),
    ("actor.fp32_master_weights=false", "update"),
    ("model.gradient_checkpointing=true", "update"),
    ("algo.micro_batch_size=8", "update"),
    ("rollout.generation_batch_size=16", "generation"),
])
def test_each_memory_knob_lowers_its_phase(override, lower):
    base = load_config("quickstart")
    changed = load_config("quickstart", [override])
    assert phases(changed)[lower] < phases(base)[lower]


def test_fp32_master_weights_cost_what_they_should():
    with_master = phases(load_config("quickstart"))["update"]
    without = phases(load_config("quickstart", ["actor.fp32_master_weights=false"]))["update"]
    # fp32 master weights (4 bytes), fp32 instead of bf16 AdamW moments (2 x 2) and fp32 gradients (2)
    assert with_master - without == pytest.approx(SMOL.params * (4 + 4 + 2), rel=1e-9)


def test_the_suggested_micro_batch_size_fits_the_room_it_was_asked_for():
    cfg = load_config("quickstart")
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
    cfg = load_config("quickstart", ["rollout.engine=vllm", "rollout.server.memory_fraction=0.6"])
    plan = plan_memory(cfg, "cuda", SMOL, 51)
    assert plan.server_note is not None and "60%" in plan.server_note
    assert "KV cache" not in [c.name for p in plan.phases for c in p.components]  # the server generates


def test_a_local_model_is_planned_from_its_config_json_alone(tmp_path):
    (tmp_path / "config.json").write_text(__import__("json").dumps({**SMOLLM2_135M, "tie_word_embeddings": False}))
    arch = architecture(load_config("quickstart", [f"model.name={tmp_path}"]))
    assert arch.params == SMOL.params + SMOL.vocab_size * SMOL.hidden_size  # an untied head is counted
    assert not (tmp_path / "model.safetensors").exists()  # nothing but the config was needed


def test_a_hub_model_not_in_the_cache_is_not_downloaded_by_train(monkeypatch, tmp_path):
    from grpo.errors import ConfigError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache"):
        architecture(load_config("quickstart", ["model.name=nobody/nothing"]), download=False)


def test_grouped_eager_attention_keeps_keys_and_values_once_per_key_value_head():
    grouped = phases(load_config("quickstart", []))
    eager = phases(load_config("quickstart", ["model.attn_implementation=eager"]))
    assert grouped["update"] < eager["update"]  # SmolLM2: 3 key-value heads for 9 query heads
    assert grouped["load"] == eager["load"]


def test_a_long_answer_budget_is_refused_naming_the_budget_that_fits():
    """Issue 25 item 3: a run refused for memory names the knob with which `grpo plan` says it fits."""
    import re

    from grpo.tools.plan import refusal

    cfg = load_config("quickstart", ["rollout.max_new_tokens=100000", "memory.limit_gib=16"])
    line = refusal(cfg, "cpu")
    assert line is not None and "no knob" not in line, line
    budget = int(re.search(r"rollout\.max_new_tokens=(\d+) \(from 100000\)", line).group(1))
    fitted = load_config("quickstart", [f"rollout.max_new_tokens={budget}", "memory.limit_gib=16"])
    assert refusal(fitted, "cpu") is None
    assert refusal(load_config("quickstart", [f"rollout.max_new_tokens={budget + 1}", "memory.limit_gib=16"]),
                   "cpu") is not None
