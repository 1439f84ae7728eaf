"""What the plan reads from outside: architectures from a config alone, whose parameter counts match the real
models, and no download where train asks for none."""

import pytest

from grpo.config import load_config
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.tools.plan import SMOLLM2_135M, Architecture, architecture

SMOL = Architecture.from_config_json(SMOLLM2_135M, "float32")


def test_the_tiny_architecture_counts_the_parameters_of_the_model_it_builds():
    cfg = load_config("tiny", ["model.tiny.hidden_size=96", "model.tiny.num_heads=3", "model.tiny.num_layers=3"])
    model = build_tiny_model(cfg.model.tiny, build_char_tokenizer(), dtype=__import__("torch").float32)
    assert architecture(cfg).params == sum(p.numel() for p in model.parameters())


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


def test_a_gpu_run_planned_on_a_machine_without_cuda_asks_for_its_memory(monkeypatch):
    import torch

    from grpo.errors import ConfigError
    from grpo.tools.plan import available_memory

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = load_config("quickstart", ["model.device=cuda"])
    with pytest.raises(ConfigError, match="memory.limit_gib=GIB"):
        available_memory(cfg, "cuda")
    given = load_config("quickstart", ["model.device=cuda", "memory.limit_gib=80"])
    assert available_memory(given, "cuda").bytes == 80 * 2**30
