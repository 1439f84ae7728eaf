"""LoRA adapters through PEFT: wrapping a model, saving and loading the adapter, and merging it.

The base weights stay frozen and are never modified in place: the merged model a server loads, or
`grpo export --merged` writes, is computed into a new state dict (base + B @ A x alpha / rank, added
in fp32 and rounded once to the base dtype), and generation swaps merged copies in and the original
tensors back, so merging after every update cannot drift the base.

An adapter directory is PEFT's own (`adapter_config.json`, `adapter_model.safetensors`; it loads with
`peft.AutoPeftModelForCausalLM` when its base has a name) plus `grpo_base.json`: the model section of
the run's config and a SHA-256 of the base weights, so a resume or an export rebuilds the base and
refuses an adapter trained on a different one. A base built from the config alone (`model.name=tiny`)
has no name to load it by, so its weights are saved beside the adapter, in `base/`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors.torch import load_file

from grpo.config import LoraConfig, ModelConfig, from_dict
from grpo.errors import ConfigError
from grpo.policy.models import load_model_and_tokenizer

ADAPTER = "default"  # PEFT's name for the one adapter a policy has
BASE_FILE = "grpo_base.json"
BASE_DIR = "base"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


def _peft():
    try:
        import peft
    except ImportError:
        raise ConfigError("model.lora needs the peft package: pip install 'grpo[lora]'") from None
    return peft


def wrap(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """-> the PEFT model: `model` with LoRA adapters on `cfg.target_modules`, only they trainable."""
    peft = _peft()
    targets: str | list[str] = "all-linear" if cfg.target_modules == ["all-linear"] else list(cfg.target_modules)
    peft_cfg = peft.LoraConfig(
        r=cfg.rank, lora_alpha=cfg.alpha if cfg.alpha is not None else 2 * cfg.rank, lora_dropout=cfg.dropout,
        target_modules=targets, task_type="CAUSAL_LM",
    )
    # Adapting the embedding or the head would make the served (merged) embedding differ from the
    # trainer's and, with tied weights, the head from the embedding: refused rather than handled.
    frozen = {model.get_input_embeddings(), model.get_output_embeddings()}  # before PEFT replaces them
    try:
        wrapped = peft.get_peft_model(model, peft_cfg)
    except ValueError as exc:  # no module matched: name the ones that could
        linear = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                         if isinstance(m, torch.nn.Linear) and m is not model.get_output_embeddings()})
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"model.lora.target_modules={cfg.target_modules}: {first}; this model's linear layers: "
                          f"{', '.join(linear)}") from None
    for name, module in wrapped.named_modules():
        if isinstance(module, peft.tuners.lora.LoraLayer) and module.get_base_layer() in frozen:
            raise ConfigError(f"model.lora.target_modules={cfg.target_modules} adapts {name.rsplit('.', 1)[-1]}, "
                              "the embedding or output head; LoRA here adapts only the transformer's linear layers")
    return wrapped


def is_adapter_dir(directory: Path) -> bool:
    return (Path(directory) / ADAPTER_CONFIG).is_file()


def base_sha256(model: torch.nn.Module) -> str:
    """A hash of the frozen base weights (names, dtypes, bytes): what an adapter is only valid on."""
    state = base_state_dict(model)
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().contiguous().cpu()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def base_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's weights under their original names (no adapters, `base_layer` unwrapped)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {key.replace(".base_layer.", "."): value for key, value in inner.state_dict().items()
            if not any(part.startswith("lora_") for part in key.split("."))}


@torch.no_grad()
def _merged_weight(layer: torch.nn.Module) -> torch.Tensor:
    """A LoRA layer's base weight with its adapter's update added, in fp32, rounded once to the base dtype."""
    weight = layer.get_base_layer().weight
    return (weight.float() + layer.get_delta_weight(ADAPTER).float()).to(weight.dtype)


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base weights with each adapter's update added: a plain model's state."""
    peft = _peft()
    merged = {f"{name}.weight": _merged_weight(module) for name, module in model.get_base_model().named_modules()
              if isinstance(module, peft.tuners.lora.LoraLayer)}
    return {key: merged.get(key, value) for key, value in base_state_dict(model).items()}


@contextmanager
def merged_for_inference(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The adapters merged into the base weights while inside, and switched off. A PEFT LoRA layer
    runs a cast and two more small matmuls beside its base matmul: generation with SmolLM2-135M on
    CPU ran 2-4x slower than the plain model; merged, each layer is one matmul again. On exit the
    original weight tensors are put back (never subtracted), so the base stays exact; the merged
    copies exist only meanwhile (memory: the adapted layers' weights once more)."""
    peft = _peft()
    layers = [m for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    originals = []
    try:
        for layer in layers:
            merged = torch.nn.Parameter(_merged_weight(layer), requires_grad=False)
            originals.append(layer.get_base_layer().weight)
            layer.get_base_layer().weight = merged
        with model.disable_adapter():
            yield model
    finally:
        for layer, weight in zip(layers, originals):
            layer.get_base_layer().weight = weight


def save_merged(model: torch.nn.Module, directory: Path) -> None:
    """A directory `AutoModelForCausalLM.from_pretrained` loads: the adapted model as a plain one."""
    model.get_base_model().save_pretrained(directory, state_dict=merged_state_dict(model))


def save_adapter(model: torch.nn.Module, tokenizer, directory: Path, model_cfg: ModelConfig, base_hash: str) -> None:
    directory = Path(directory)
    # save_embedding_layers=False: embeddings are never adapted, and "auto" would look the base up on the hub.
    model.save_pretrained(directory, save_embedding_layers=False)
    tokenizer.save_pretrained(directory)
    base = {"model": dataclasses.asdict(model_cfg), "base_sha256": base_hash,
            "base_in_checkpoint": not model.peft_config[ADAPTER].base_model_name_or_path}
    if base["base_in_checkpoint"]:
        model.get_base_model().save_pretrained(directory / BASE_DIR, state_dict=base_state_dict(model))
        tokenizer.save_pretrained(directory / BASE_DIR)
    (directory / BASE_FILE).write_text(json.dumps(base, indent=2) + "\n")


def read_base_info(directory: Path) -> dict[str, Any]:
    path = Path(directory) / BASE_FILE
    if not path.is_file():
        raise ValueError(f"{directory} is not a grpo LoRA adapter directory: no {BASE_FILE}")
    return json.loads(path.read_text())


@torch.no_grad()
def load_adapter(model: torch.nn.Module, directory: Path, base_hash: str) -> None:
    """Load a saved adapter into `model`'s, after checking it was trained on this base with this shape."""
    peft = _peft()
    directory = Path(directory)
    info = read_base_info(directory)
    if info["base_sha256"] != base_hash:
        raise ValueError(f"the adapter in {directory} was trained on other base weights "
                         f"(model.name={info['model']['name']} then; the base's hash differs)")
    saved_cfg = json.loads((directory / ADAPTER_CONFIG).read_text())
    live_cfg = model.peft_config[ADAPTER]
    for key, live in (("r", live_cfg.r), ("lora_alpha", live_cfg.lora_alpha)):
        if saved_cfg.get(key) != live:
            raise ValueError(f"the adapter in {directory} has {key}={saved_cfg.get(key)}, this model {live}")
    weights = load_file(directory / ADAPTER_WEIGHTS)
    expected = peft.get_peft_model_state_dict(model, adapter_name=ADAPTER, save_embedding_layers=False)
    if set(weights) != set(expected):
        missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
        raise ValueError(f"the adapter in {directory} does not match the model: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    for key, tensor in weights.items():
        if tensor.shape != expected[key].shape:
            raise ValueError(f"the adapter in {directory} does not match the model: {key} has shape "
                             f"{tuple(tensor.shape)}, the model's is {tuple(expected[key].shape)}")
    peft.set_peft_model_state_dict(model, weights, adapter_name=ADAPTER)


def load_adapted(directory: Path, device: torch.device) -> tuple[torch.nn.Module, Any]:
    """Rebuild the adapted model an adapter directory was saved from: its base (by name, or from
    `base/`), checked against the recorded hash, with the adapter loaded. -> (model, tokenizer)"""
    directory = Path(directory)
    info = read_base_info(directory)
    model_cfg = from_dict(ModelConfig, info["model"])
    model_cfg.gradient_checkpointing = False
    if info["base_in_checkpoint"]:
        model_cfg.name = str(directory / BASE_DIR)
    model, tokenizer = load_model_and_tokenizer(model_cfg, device)
    model = wrap(model, model_cfg.lora)
    load_adapter(model, directory, base_sha256(model))
    return model.eval(), tokenizer
