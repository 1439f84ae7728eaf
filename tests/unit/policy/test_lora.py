"""LoRA through PEFT: only the adapters train, the base never changes, the reference costs no copy,
generation and the shared-prompt update work through the wrapper, and adapters save, load and merge."""

import importlib.util
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo import metric_keys as keys
from grpo.algo.loss import rows_with_gradient
from grpo.config import load_config
from grpo.errors import ConfigError
from grpo.policy import lora
from grpo.policy.policy import Policy
from grpo.policy.update import TrainBatch, collate, completion_logprobs
from grpo.rollout.engines import GenerationCancelled, SamplingParams
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rollout.server.weights import embedding_sha256

LORA = ["model.lora.rank=4"]


def tiny_policy(*overrides: str, seed: int = 0) -> Policy:
    torch.manual_seed(seed)
    return Policy(load_config("tiny", list(overrides)), torch.device("cpu"))


def batch_for(policy: Policy, advantages=(1.0, -1.0, 0.5, -0.5)) -> TrainBatch:
    """Sampled completions of two prompts, two samples each, with the sampler's log-probs."""
    tok = policy.tokenizer
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ("12+34=", "what is 7*8?")]
    rows = [prompts[0], prompts[0], prompts[1], prompts[1]]
    engine = EmbeddedEngine(policy.model, tok)
    completions = engine.generate(rows, SamplingParams(10, temperature=1.0), list(range(1, 1 + len(rows))))
    advantages = torch.tensor(advantages)  # [4]
    return TrainBatch(rows, [c.token_ids for c in completions], [c.logprobs for c in completions], advantages,
                      rows_with_gradient(advantages, policy.loss_cfg.kl_coef))


def base_weights(policy: Policy) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in lora.base_state_dict(policy.model).items()}


def adapter_weights(policy: Policy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}


def logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits.float()


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("override,message", [
    ("model.lora.rank=-1", "model.lora.rank must be 0 \\(off\\) or more"),
    ("model.lora.alpha=0", "model.lora.alpha must be above 0"),
    ("model.lora.dropout=1", "model.lora.dropout must be in \\[0, 1\\)"),
    ("model.lora.target_modules=[all-linear,q_proj]", "\\[all-linear\\] alone"),
    ("model.lora.target_modules=[]", "model.lora.target_modules must be module names"),
    ("model.lora.ranks=4", "unknown key model.lora.ranks \\(did you mean model.lora.rank\\?\\)"),
])
def test_bad_lora_values_are_one_line_config_errors(override, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_config("tiny", [override])
    assert "\n" not in str(error.value)


def test_lora_without_peft_names_the_extra_before_any_work(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(ConfigError, match=r"model.lora needs the peft package: pip install 'grpo\[lora\]'"):
        load_config("tiny", LORA)
    load_config("tiny", [])  # off by default: peft is not needed


def test_unknown_target_modules_name_the_models_linear_layers():
    with pytest.raises(ConfigError, match="this model's linear layers: down_proj, gate_proj, k_proj, o_proj, "
                                          "q_proj, up_proj, v_proj"):
        tiny_policy(*LORA, "model.lora.target_modules=[qkv]")


@pytest.mark.parametrize("target", ["embed_tokens", "lm_head"])
def test_the_embedding_and_head_cannot_be_adapted(target):
    with pytest.raises(ConfigError, match=f"adapts {target}, the embedding or output head"):
        tiny_policy(*LORA, f"model.lora.target_modules=[{target}]")


# --- training ----------------------------------------------------------------------------------


def test_only_the_adapters_are_trainable_and_in_the_optimizer():
    policy = tiny_policy(*LORA, "model.lora.target_modules=[q_proj,v_proj]")
    trainable = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "v_proj"}
    in_optimizer = {id(p) for group in policy.optimizer.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in policy.model.parameters() if p.requires_grad}
    total = sum(p.numel() for p in policy.model.parameters())
    assert sum(p.numel() for p in policy.model.parameters() if p.requires_grad) < total / 10


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_update_changes_only_the_adapters_and_a_bf16_base_trains_fp32_adapters(dtype):
    policy = tiny_policy(*LORA, f"model.dtype={dtype}", "actor.lr=1e-2")
    # PEFT keeps the adapters in fp32 on a bf16 base: AdamW works on them directly, no master copies.
    assert {p.dtype for p in policy.optimizer.params} == {torch.float32} and not policy.optimizer.use_master
    before_base, before_adapters = base_weights(policy), adapter_weights(policy)
    result = policy.update(batch_for(policy))
    assert result.applied and result.metrics[keys.GRAD_NORM] > 0
    after_base = base_weights(policy)
    assert all(torch.equal(before_base[k], after_base[k]) for k in before_base)
    after = adapter_weights(policy)
    moved = [n for n in after if not torch.equal(before_adapters[n], after[n])]
    assert {n.split(".lora_")[0] for n in moved} == {n.split(".lora_")[0] for n in after}  # every adapter moved


def test_the_kl_reference_is_the_base_with_the_adapters_off_and_costs_no_copy():
    policy = tiny_policy(*LORA, "algo.kl_coef=0.1", "actor.lr=1e-2")
    assert policy.ref_model is None and policy.uses_reference
    batch, _ = policy.prepare(batch_for(policy), recompute_old=False)
    start = [r.tolist() for r in batch.ref_logprobs]
    assert start == policy.logprobs(batch)  # B starts at 0: the adapted model is the base
    policy.update(batch)
    policy.update(batch)
    assert policy.reference_logprobs(batch) == start  # the reference did not move with the policy
    assert policy.logprobs(batch) != start  # the policy did
    assert all(p.requires_grad for p in policy.optimizer.params)  # adapters switched back on, still trainable


def test_shared_prompt_and_gradient_checkpointing_give_the_full_forwards_adapter_gradients():
    policy = tiny_policy(*LORA, "actor.lr=1e-2")
    policy.update(batch_for(policy))  # non-zero B, so every adapter has a gradient
    batch = batch_for(policy)
    mb = collate(batch, list(range(len(batch))), policy.tokenizer.pad_token_id, torch.device("cpu"))

    def adapter_grads(model, share_prompt):
        model.zero_grad()
        model.train()
        logprobs, _ = completion_logprobs(model, mb, 1.0, share_prompt=share_prompt)
        (logprobs * mb.completion_mask).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    shared, full = adapter_grads(policy.model, True), adapter_grads(policy.model, False)
    checkpointed_policy = tiny_policy(*LORA, "model.gradient_checkpointing=true")
    checkpointed_policy.model.load_state_dict(policy.model.state_dict())
    checkpointed = adapter_grads(checkpointed_policy.model, True)  # packed: no KV cache for checkpointing to turn off
    for name in full:
        assert full[name].abs().sum() > 0, name
        torch.testing.assert_close(shared[name], full[name], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(checkpointed[name], full[name], atol=1e-5, rtol=1e-4)


def test_the_embedded_engine_and_the_probe_reference_use_the_adapted_model():
    policy = tiny_policy(*LORA, "actor.lr=5e-2")
    for _ in range(3):
        policy.update(batch_for(policy))
    prompt = policy.tokenizer("12+34=", add_special_tokens=False)["input_ids"]
    engine = EmbeddedEngine(policy.model, policy.tokenizer)
    assert engine.eos_ids == {policy.tokenizer.eos_token_id}  # generation_config read through the wrapper
    (greedy,) = engine.generate([prompt], SamplingParams(8, temperature=0.0))
    assert len(greedy.token_ids) >= 1
    reference = policy.sequence_logprobs(prompt + greedy.token_ids)
    tail = reference[len(prompt) - 1:]
    assert max(abs(a - b) for a, b in zip(tail, greedy.logprobs)) < 1e-4  # KV-cached decoding == full forward
    with policy.model.disable_adapter():
        base = policy.sequence_logprobs(prompt + greedy.token_ids)
    assert max(abs(a - b) for a, b in zip(base, reference)) > 1e-3  # the adapters are in what was sampled


def test_generation_with_the_adapters_merged_in_matches_the_adapted_model_and_puts_the_base_back():
    from peft.tuners.lora import LoraLayer

    policy = trained()
    layers = [m for m in policy.model.modules() if isinstance(m, LoraLayer)]
    originals = [layer.get_base_layer().weight for layer in layers]
    before = base_weights(policy)
    prompts = [policy.tokenizer(p, add_special_tokens=False)["input_ids"] for p in ("12+34=", "7*8=", "9")]
    params = SamplingParams(8, temperature=1.0)
    adapted = EmbeddedEngine(policy.model, policy.tokenizer).generate(prompts, params, list(range(2, 2 + len(prompts))))
    merged_engine = EmbeddedEngine(policy.model, policy.tokenizer, inference=policy.inference_weights)
    merged = merged_engine.generate(prompts, params, list(range(2, 2 + len(prompts))))
    for a, b in zip(adapted, merged):
        assert a.token_ids == b.token_ids and max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
    with policy.inference_weights():
        assert not any(torch.equal(layer.get_base_layer().weight, w) for layer, w in zip(layers, originals))
    merged_engine.cancel.set()  # a generation abandoned midway puts the base back too
    with pytest.raises(GenerationCancelled):
        merged_engine.generate(prompts, params)
    assert all(layer.get_base_layer().weight is w for layer, w in zip(layers, originals))
    assert all(torch.equal(v, base_weights(policy)[k]) for k, v in before.items())
    assert all(p.requires_grad for p in policy.optimizer.params)  # the adapters are back on
    # fp32 merges exactly enough to keep the sampler's log-probs; half precision rounds the merge
    assert policy.inference_is_exact and not tiny_policy(*LORA, "model.dtype=bfloat16").inference_is_exact


# --- saving, loading, merging --------------------------------------------------------------------


def trained(*overrides: str) -> Policy:
    policy = tiny_policy(*LORA, "actor.lr=5e-2", *overrides)
    for _ in range(2):
        policy.update(batch_for(policy))
    return policy


def test_a_saved_adapter_is_small_and_loads_back_exactly(tmp_path):
    policy = trained()
    policy.save_model(tmp_path / "m")
    files = {p.name for p in (tmp_path / "m").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "grpo_base.json", "tokenizer.json"} <= files
    assert "model.safetensors" not in files and "config.json" not in files
    adapter_bytes = (tmp_path / "m" / "adapter_model.safetensors").stat().st_size
    base_bytes = sum(v.numel() * v.element_size() for v in lora.base_state_dict(policy.model).values())
    assert adapter_bytes < base_bytes / 5
    info = json.loads((tmp_path / "m" / "grpo_base.json").read_text())
    assert info["model"]["lora"]["rank"] == 4 and info["base_sha256"] == policy.base_hash
    # A from-config base has no name to load by: it is saved beside the adapter.
    assert info["base_in_checkpoint"] and (tmp_path / "m" / "base" / "model.safetensors").is_file()

    fresh = tiny_policy(*LORA, seed=0)  # same base (same seed), new adapters
    assert any(not torch.equal(a, b) for a, b in zip(adapter_weights(fresh).values(),
                                                     adapter_weights(policy).values()))
    revision = fresh.revision
    policy.save_state(tmp_path / "policy")  # a checkpoint: model/ (the adapter) and policy/ beside it
    (tmp_path / "m").rename(tmp_path / "model")
    fresh.load_state(tmp_path)
    assert fresh.revision == revision + 1
    for (name, a), b in zip(adapter_weights(policy).items(), adapter_weights(fresh).values()):
        assert torch.equal(a, b), name


def test_an_adapter_is_refused_on_another_base_rank_or_a_full_model(tmp_path):
    policy = trained()
    policy.save_model(tmp_path / "adapter" / "model")
    with pytest.raises(ValueError, match="trained on other base weights"):
        tiny_policy(*LORA, seed=1).load_state(tmp_path / "adapter")
    with pytest.raises(ValueError, match="has r=4, this model 8"):
        tiny_policy("model.lora.rank=8").load_state(tmp_path / "adapter")
    with pytest.raises(ValueError, match="holds a LoRA adapter, but model.lora.rank=0"):
        tiny_policy().load_state(tmp_path / "adapter")
    tiny_policy().save_model(tmp_path / "full" / "model")
    with pytest.raises(ValueError, match="holds a full model, but model.lora.rank=4"):
        policy.load_state(tmp_path / "full")


@pytest.mark.parametrize("dtype,tolerance", [("float32", 1e-5), ("bfloat16", 0.1)])
def test_the_merged_model_loads_plainly_and_gives_the_adapted_logits(tmp_path, dtype, tolerance):
    policy = trained(f"model.dtype={dtype}")
    base_before = base_weights(policy)
    policy.save_full_model(tmp_path / "merged")
    assert all(torch.equal(v, base_weights(policy)[k]) for k, v in base_before.items())  # nothing merged in place
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=getattr(torch, dtype)).eval()
    ids = policy.tokenizer("what is 12+34? 46", add_special_tokens=False)["input_ids"]
    policy.model.eval()
    adapted = logits(policy.model, ids)
    with policy.model.disable_adapter():
        base = logits(policy.model, ids)
    diff = (logits(merged, ids) - adapted).abs().max().item()
    assert diff <= tolerance, diff
    assert (base - adapted).abs().max().item() > 10 * diff  # the adapters matter more than the rounding
    # The served embedding, which a vLLM server fingerprints, is the trainer's.
    assert embedding_sha256(merged, torch.float32) == embedding_sha256(policy.model, torch.float32)
