"""The memory a run will need, by phase, predicted from the model's config and the run's sizes before anything
loads: `grpo plan`, and `grpo train`'s refusal of a run that cannot fit, or whose servers' KV cache cannot.

`model` is the prediction, a pure function of the config, the architecture and the prompt length; `server`
judges a started server's KV cache the same way; `machine` reads what they need from outside (the model's
config.json, the prompts, the device, the memory available). This module joins them for the CLI and the
entry point.
"""

from __future__ import annotations

from grpo.config import RunConfig
from grpo.errors import ConfigError
from grpo.tools.plan.machine import (
    SMOLLM2_135M,
    architecture,
    available_memory,
    context_verdict,
    device_kind,
    gpu_total,
    probe_tokens,
    prompt_tokens,
)
from grpo.tools.plan.model import (
    COSTS,
    GIB,
    Architecture,
    Available,
    Component,
    Costs,
    Phase,
    Plan,
    plan_memory,
    render,
    suggestion,
)
from grpo.tools.plan.server import describe, server_cache, sizes_a_cache
from grpo.tools.plan.server import refusal as cache_refusal

__all__ = ["COSTS", "GIB", "SMOLLM2_135M", "Architecture", "Available", "Component", "Costs", "Phase", "Plan",
           "architecture", "available_memory", "context_verdict", "device_kind", "gpu_total", "plan_memory",
           "probe_tokens", "prompt_tokens", "refusal", "render", "server_verdict", "suggestion"]


def refusal(cfg: RunConfig, device: str, sharded: bool = False) -> str | None:
    """One line when the run's predicted peak exceeds the memory available, or when its servers' KV cache is too
    small for its longest request or too large beside the trainer; else None. A model whose architecture cannot
    be read is not judged here: loading it gives the error. With memory.check=false, and under torchrun
    (`sharded`: each rank holds a share, which the plan does not model), only the cache's size in tokens is
    judged: a cache too small fails every request whatever the memory."""
    memory = cfg.memory.check and not sharded
    if not memory and not sizes_a_cache(cfg):
        return None
    try:  # no download here: a hub model not yet cached is judged by nothing, and its load says what fails
        arch = architecture(cfg, download=False)
        prompt_len = prompt_tokens(cfg)
    except (ConfigError, OSError):
        return None
    plan = plan_memory(cfg, device, arch, prompt_len)
    available = available_memory(cfg, device) if memory else None
    if available is not None and plan.peak_bytes > available.bytes:
        what = "GPU memory" if device == "cuda" else "memory"
        change = suggestion(cfg, plan, available.bytes, device, gpu_total() if device == "cuda" else None)
        return (f"this run needs {plan.peak_bytes / GIB:.1f} GiB of {what} at its peak ({plan.peak.name}), "
                f"{available.bytes / GIB:.1f} GiB is available ({available.source}): "
                f"{change}; grpo plan shows where it goes (memory.check=false runs it anyway)")
    return server_verdict(cfg, device, arch, prompt_len, plan, available)[1]


def server_verdict(cfg: RunConfig, device: str, arch: Architecture, prompt_len: int, plan: Plan,
                   available: Available | None) -> tuple[list[str], str | None]:
    """The KV cache of the servers the run starts: `grpo plan`'s lines on it, and the refusal when it cannot hold
    the run's longest request or, on a CPU, when the servers do not fit in what `available` leaves beside the
    trainer's peak (None: not judged)."""
    if not sizes_a_cache(cfg):
        return [], None
    cache = server_cache(cfg, device, arch, prompt_len, probe_tokens(cfg))
    if cache is None:
        return [], None
    room = available.bytes - plan.peak_bytes if available is not None and device == "cpu" else None
    source = (f"{available.bytes / GIB:.1f} GiB available ({available.source}) less the trainer's "
              f"{plan.peak_bytes / GIB:.1f} GiB peak" if room is not None else "")
    return describe(cache, room), cache_refusal(cache, room, source)
