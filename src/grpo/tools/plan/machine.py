"""What the memory model needs from outside the config: the model's architecture (its config.json, never its
weights), the longest prompt (the task's data and the tokenizer's files), the device a run resolves to,
and the memory available (/proc/meminfo, the cgroup, the GPU)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from grpo.config import RunConfig, TaskConfig
from grpo.errors import ConfigError
from grpo.rollout.engines.registry import serves
from grpo.tasks.base import Problem
from grpo.tools.plan.model import GIB, Architecture, Available, server_fraction

# The offline preset's architecture (SmolLM2-135M-Instruct), so its plan needs no conversion of the GGUF.
SMOLLM2_135M = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "tie_word_embeddings": True,
                "dtype": "float32", "model_type": "llama", "max_position_embeddings": 8192}


def architecture(cfg: RunConfig, download: bool = True) -> Architecture:
    """From the model's config alone: tiny's section, the offline preset's known sizes, a local directory's or a
    hub model's config.json (the hub's cache, else one small download when `download`). No weights are read."""
    name = cfg.model.name
    if name == "tiny":
        from grpo.policy.models import build_char_tokenizer

        t = cfg.model.tiny
        return Architecture(len(build_char_tokenizer()), t.hidden_size, t.intermediate_size, t.num_layers,
                            t.num_heads, t.num_heads, t.hidden_size // t.num_heads, True, None)
    config = config_json(cfg, download)
    try:
        return Architecture.from_config_json(config, config.get("dtype") or config.get("torch_dtype") or "float32")
    except KeyError as exc:
        raise ConfigError(f"model.name={name}: its config.json has no {exc.args[0]}; grpo plan models "
                          "Llama-style decoders") from None


def config_json(cfg: RunConfig, download: bool = True) -> dict:
    """The model's config.json as a dict (tiny's: its context alone)."""
    from grpo.policy.models import OFFLINE_MODELS, TINY_POSITIONS, cache_dir

    name = cfg.model.name
    if name == "tiny":
        return {"max_position_embeddings": TINY_POSITIONS}
    if name in OFFLINE_MODELS:
        path = cache_dir() / "models" / name / "config.json"
        return json.loads(path.read_text()) if path.is_file() else SMOLLM2_135M
    if Path(name).expanduser().is_dir():
        path = Path(name).expanduser() / "config.json"
        if not path.is_file():
            raise ConfigError(f"model.name={name} has no config.json; point it at a model directory")
        return json.loads(path.read_text())
    return _hub_config(name, download)


def _hub_config(name: str, download: bool) -> dict:
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    if isinstance(cached, str):
        return json.loads(Path(cached).read_text())
    if not download:
        raise ConfigError(f"model.name={name}: its config.json is not in the local Hugging Face cache")
    try:
        return json.loads(Path(hf_hub_download(name, "config.json")).read_text())
    except Exception as exc:  # hub errors come as many types; one line says which model and why
        raise ConfigError(f"model.name={name}: cannot read its config.json ({type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})") from None


def prompt_tokens(cfg: RunConfig) -> int:
    """The longest of the first training prompts, in tokens: counted with the tokenizer where it is on disk
    (tokenizer files only), else estimated at 3 characters a token."""
    from grpo.tasks import build_task
    from grpo.tasks.prompts import encode_prompt

    task = build_task(replace(cfg.task), splits=("train",))
    count = min(64, task.num_train) if task.num_train is not None else 64
    problems = [task.train_problem(i, cfg.train.seed) for i in range(count)]
    tokenizer = _local_tokenizer(cfg)
    if tokenizer is not None:
        longest = max(len(encode_prompt(tokenizer, p, cfg.task)) for p in problems)
    else:
        longest = max(_estimated_tokens(p, cfg.task) for p in problems)
    return min(longest, cfg.task.max_prompt_tokens or longest)  # a longer prompt is refused or cut to the cap


def _estimated_tokens(problem: Problem, task: TaskConfig) -> int:
    """A prompt's length where the tokenizer is not on disk: 3 characters a token, and the chat template's own."""
    from grpo.tasks.prompts import build_messages

    return math.ceil(sum(len(m["content"]) for m in build_messages(problem, task)) / 3) + 40


def context_verdict(cfg: RunConfig) -> str | None:
    """`grpo plan`'s line on the prompts against the model's context (grpo.tasks.context), over every training
    prompt, as `grpo train` judges them at load: a warning where it will refuse some, a note where
    task.truncate_prompts=left will cut some; None where all fit or the model's config says no context."""
    from grpo.tasks import build_task
    from grpo.tasks.context import fit_prompts, model_context, problems_to_check, prompt_lengths

    tokenizer = _local_tokenizer(cfg)
    context = model_context(config_json(cfg), tokenizer)
    if context is None:
        return None
    task = build_task(replace(cfg.task), splits=("train",))
    problems = problems_to_check(task, cfg.train.seed, (cfg.train.steps or 1) * cfg.rollout.problems_per_step)
    if tokenizer is not None:
        lengths, estimated = prompt_lengths(tokenizer, problems, cfg.task), ""
    else:
        lengths = [_estimated_tokens(p, cfg.task) for p in problems]
        estimated = " (prompt lengths estimated at 3 characters a token: the tokenizer is not on disk)"
    try:
        fit = fit_prompts(lengths, problems, context, cfg.rollout.max_new_tokens, "rollout.max_new_tokens", cfg.task,
                          "training prompts")
    except ConfigError as exc:
        return f"warning: grpo train will refuse this run: {exc}{estimated}"
    return f"note: {fit.message()}{estimated}" if fit.cut else None


def probe_tokens(cfg: RunConfig) -> int:
    """The weight probe's length in tokens (grpo.rollout.server.weights), with the same tokenizer as the
    prompts' or, where it is not on disk, estimated the same way."""
    from grpo.rollout.server.weights import PROBE_MAX_TOKENS, PROBE_TEXT, probe_ids

    tokenizer = _local_tokenizer(cfg)
    if tokenizer is not None:
        return len(probe_ids(tokenizer))
    return min(math.ceil(len(PROBE_TEXT) / 3), PROBE_MAX_TOKENS)


def _local_tokenizer(cfg: RunConfig):
    from grpo.policy.models import OFFLINE_MODELS, build_char_tokenizer, cache_dir

    name = cfg.model.name
    if name == "tiny":
        return build_char_tokenizer()
    path = cache_dir() / "models" / name if name in OFFLINE_MODELS else Path(name).expanduser()
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def device_kind(cfg: RunConfig) -> str:
    """cpu or cuda, as the run would resolve model.device, without initialising CUDA when told cpu."""
    if cfg.model.device == "cpu":
        return "cpu"
    if cfg.model.device.startswith("cuda"):
        return "cuda"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def available_memory(cfg: RunConfig, device: str) -> Available:
    """memory.limit_gib when set; else on CPU MemAvailable (and the cgroup's limit, when lower), on CUDA the
    GPU's free memory, less what a server on the same GPU takes."""
    if cfg.memory.limit_gib is not None:
        return Available(cfg.memory.limit_gib * GIB, "memory.limit_gib")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"model.device={cfg.model.device}: this machine has no CUDA device to read free memory "
                              "from; to plan a GPU run here, give its memory as memory.limit_gib=GIB")
        free, total = torch.cuda.mem_get_info()
        if serves(cfg.rollout.engine) and not cfg.rollout.server.urls:
            left = total * (1 - server_fraction(cfg))
            return Available(min(free, left), f"what the server's memory fraction {server_fraction(cfg):g} "
                                              f"leaves of {total / GIB:.1f} GiB")
        return Available(free, "free GPU memory")
    avail = _meminfo("MemAvailable")
    source = "MemAvailable"
    cgroup = _cgroup_room()
    if cgroup is not None and cgroup < avail:
        avail, source = cgroup, "the cgroup's memory.max less its usage"
    return Available(avail, source)


def _meminfo(key: str) -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    raise ConfigError(f"/proc/meminfo has no {key}: set memory.limit_gib to the memory this run may use")


def _cgroup_room() -> float | None:
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return None
    return None if limit == "max" else int(limit) - int(used)


def gpu_total() -> float:
    """The GPU's memory, in bytes."""
    import torch

    return torch.cuda.mem_get_info()[1]
