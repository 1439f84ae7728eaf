"""How grpo starts SGLang: its CPU engine on a CPU trainer, the deterministic switch passed through."""

from __future__ import annotations

from pathlib import Path

from grpo.config import ServerConfig
from grpo.rollout.engines.server import make_backend


def launch(device: str, **cfg):
    return make_backend("sglang", device).launch(ServerConfig(**cfg), "py", Path("/m"), "127.0.0.1", 4321,
                                                 "float32", 7)


def test_a_cpu_trainer_starts_sglangs_cpu_engine_with_torch_native_attention():
    spec = launch("cpu")
    assert spec.argv[:3] == ["py", "-m", "sglang.launch_server"]
    assert " --device cpu --attention-backend torch_native" in " ".join(spec.argv)
    assert "--sleep-on-idle" in spec.argv  # its scheduler would spin a core the trainer needs
    assert spec.env == {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}
    assert "--enable-deterministic-inference" not in spec.argv


def test_a_cuda_trainer_leaves_the_device_to_sglang_and_deterministic_passes_the_flag():
    spec = launch("cuda", deterministic=True)
    assert "--device" not in spec.argv and spec.env == {"HF_HUB_OFFLINE": "1"}
    assert spec.argv[-1] == "--enable-deterministic-inference"


def test_kv_cache_gib_becomes_sglangs_token_budget_from_the_models_shape(tmp_path):
    # SmolLM2-135M's shape: 30 layers, 3 KV heads of 64 -> 2 * 30 * 3 * 64 * 2 bytes = 23,040 per bf16 token.
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 30, "num_attention_heads": 9, '
                                          '"num_key_value_heads": 3, "hidden_size": 576}')
    spec = make_backend("sglang").launch(ServerConfig(kv_cache_gib=1.0), "py", tmp_path, "h", 1, "bfloat16", 0)
    assert spec.argv[spec.argv.index("--max-total-tokens") + 1] == str(2**30 // 23_040)
