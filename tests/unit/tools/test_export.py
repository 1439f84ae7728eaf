"""`grpo export`: a LoRA checkpoint as an adapter users load with PEFT, or merged into a plain model
with the adapted model's logits; a full checkpoint copied; bad input refused in one line."""

import torch
from transformers import AutoModelForCausalLM

from grpo.cli import main
from grpo.config import CheckpointConfig, TinyModelConfig, load_config
from grpo.errors import EXIT_BAD_INPUT
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.policy.policy import Policy
from grpo.policy.update import TrainBatch
from grpo.rollout.engines import SamplingParams
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rundir.checkpoints import CheckpointStore

IDS = [5, 20, 21, 30, 9, 40, 41, 7]


def trained_checkpoint(tmp_path, *overrides: str) -> tuple[Policy, object]:
    """A policy after two updates, and a checkpoint of it written the way the loop writes one."""
    torch.manual_seed(0)
    policy = Policy(load_config("tiny", ["actor.lr=5e-2", *overrides]), torch.device("cpu"))
    prompt = policy.tokenizer("12+34=", add_special_tokens=False)["input_ids"]
    for _ in range(2):
        completions = EmbeddedEngine(policy.model, policy.tokenizer).generate(
            [prompt] * 4, SamplingParams(8), [0, 1, 2, 3])
        policy.update(TrainBatch([prompt] * 4, [c.token_ids for c in completions], [c.logprobs for c in completions],
                                 torch.tensor([1.0, -1.0, 0.5, -0.5]), [0, 1, 2, 3]))
    def write(directory):
        policy.save_model(directory / "model")
        policy.save_state(directory / "policy")

    info = CheckpointStore(tmp_path / "checkpoints", CheckpointConfig()).save(
        2, write, {"policy": policy.state_dict()}, healthy=True, score=None)
    policy.model.eval()
    return policy, info


def logits(model, ids=IDS) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits.float()


def test_merged_export_of_a_lora_checkpoint_is_a_plain_model_with_the_adapted_logits(tmp_path, capsys):
    policy, info = trained_checkpoint(tmp_path, "model.lora.rank=4")
    out = tmp_path / "merged"
    assert main(["export", "--checkpoint", str(info.path), "--out", str(out), "--merged"]) == 0
    assert "merged into its base: loads with AutoModelForCausalLM.from_pretrained" in capsys.readouterr().out
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    torch.testing.assert_close(logits(merged), logits(policy.model), atol=1e-5, rtol=1e-5)
    with policy.model.disable_adapter():
        assert (logits(policy.model) - logits(merged)).abs().max() > 1e-2  # the adapters are in it
    assert not list(tmp_path.glob(".merged.tmp-*"))


def test_an_adapter_on_a_named_base_exports_as_is_and_loads_with_peft(tmp_path, capsys):
    from peft import AutoPeftModelForCausalLM

    base = tmp_path / "base-model"
    tokenizer = build_char_tokenizer()
    torch.manual_seed(3)
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(base)
    tokenizer.save_pretrained(base)
    policy, info = trained_checkpoint(tmp_path, "model.lora.rank=4", f"model.name={base}")
    assert not (info.model_dir / "base").exists()  # the base has a name: it is not copied
    out = tmp_path / "adapter"
    assert main(["export", "--checkpoint", str(info.path), "--out", str(out)]) == 0
    assert "AutoPeftModelForCausalLM" in capsys.readouterr().out
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    loaded = AutoPeftModelForCausalLM.from_pretrained(out).eval()
    torch.testing.assert_close(logits(loaded), logits(policy.model), atol=1e-5, rtol=1e-5)
    # the same checkpoint merged: its base is found by name
    assert main(["export", "--checkpoint", str(info.path), "--out", str(tmp_path / "m"), "--merged"]) == 0
    torch.testing.assert_close(logits(AutoModelForCausalLM.from_pretrained(tmp_path / "m")), logits(policy.model),
                               atol=1e-5, rtol=1e-5)


def test_an_adapter_on_a_base_built_from_its_config_names_its_base_and_loads_with_peft(tmp_path, capsys):
    import json

    from peft import AutoPeftModelForCausalLM

    policy, info = trained_checkpoint(tmp_path, "model.lora.rank=4")  # model.name=tiny: a base with no name
    out = tmp_path / "adapter"
    assert main(["export", "--checkpoint", str(info.path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"wrote {out}: the LoRA adapter: loads with peft's AutoPeftModelForCausalLM.from_pretrained('{out}'), its "
        f"base from {out / 'base'} (--merged writes a plain model)")
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(out / "base")
    loaded = AutoPeftModelForCausalLM.from_pretrained(out).eval()
    torch.testing.assert_close(logits(loaded), logits(policy.model), atol=1e-5, rtol=1e-5)


def test_a_full_checkpoint_is_copied_and_bad_input_is_refused_in_one_line(tmp_path, capsys):
    policy, info = trained_checkpoint(tmp_path)
    out = tmp_path / "full"
    assert main(["export", "--checkpoint", str(info.path), "--out", str(out), "--merged"]) == 0
    torch.testing.assert_close(logits(AutoModelForCausalLM.from_pretrained(out)), logits(policy.model))
    capsys.readouterr()

    assert main(["export", "--checkpoint", str(info.path), "--out", str(out)]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip() == f"config error: --out {out} already exists; name a new directory"
    weights = info.model_dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert main(["export", "--checkpoint", str(info.path), "--out", str(tmp_path / "x")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err.endswith("is not a usable checkpoint: model/model.safetensors fails its checksum (corrupt)")
    assert "\n" not in err and not (tmp_path / "x").exists()


def test_a_lora_checkpoint_whose_base_changed_is_refused(tmp_path, capsys):
    base = tmp_path / "base-model"
    tokenizer = build_char_tokenizer()
    torch.manual_seed(3)
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(base)
    tokenizer.save_pretrained(base)
    _, info = trained_checkpoint(tmp_path, "model.lora.rank=4", f"model.name={base}")
    torch.manual_seed(4)  # the base directory is overwritten by another model of the same shape
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(base)
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(info.path), "--out", str(tmp_path / "m"), "--merged"]) == EXIT_BAD_INPUT
    assert "was trained on other base weights" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_a_run_directory_for_a_checkpoint_lists_its_checkpoints_and_the_export_honours_the_umask(tmp_path, capsys):
    """Issue 25 items 9 and 10."""
    import os
    import stat

    _, info = trained_checkpoint(tmp_path)
    capsys.readouterr()  # the training's own output (transformers' progress bars, where shown)
    assert main(["export", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(info.path) in err, err
    old = os.umask(0o022)
    try:
        assert main(["export", "--checkpoint", str(info.path), "--out", str(tmp_path / "out")]) == 0
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert modes and set(modes.values()) == {0o644}, modes
