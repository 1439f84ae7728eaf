"""The memory a run will need, by phase, predicted from the model's config and the run's sizes before anything
loads: `grpo plan`, and `grpo train`'s refusal of a run that cannot fit.

`model` is the prediction, a pure function of the config, the architecture and the prompt length;
`machine` reads what it needs from outside (the model's config.json, the prompts, the device, the memory
available). This module joins them for the CLI and the entry point.
"""

from __future__ import annotations

from grpo.config import RunConfig
from grpo.errors import ConfigError
from grpo.tools.plan.machine import (
    SMOLLM2_135M,
    architecture,
    available_memory,
    device_kind,
    gpu_total,
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

__all__ = ["COSTS", "GIB", "SMOLLM2_135M", "Architecture", "Available", "Component", "Costs", "Phase", "Plan",
           "architecture", "available_memory", "device_kind", "gpu_total", "plan_memory", "prompt_tokens",
           "refusal", "render", "suggestion"]


def refusal(cfg: RunConfig, device: str) -> str | None:
    """One line when the run's predicted peak exceeds the memory available, else None. A model whose
    architecture cannot be read is not judged here: loading it gives the error."""
    if not cfg.memory.check:
        return None
    try:  # no download here: a hub model not yet cached is judged by nothing, and its load says what fails
        arch = architecture(cfg, download=False)
        prompt_len = prompt_tokens(cfg)
    except (ConfigError, OSError):
        return None
    plan = plan_memory(cfg, device, arch, prompt_len)
    available = available_memory(cfg, device)
    if plan.peak_bytes <= available.bytes:
        return None
    what = "GPU memory" if device == "cuda" else "memory"
    change = suggestion(cfg, plan, available.bytes, device, gpu_total() if device == "cuda" else None)
    return (f"this run needs {plan.peak_bytes / GIB:.1f} GiB of {what} at its peak ({plan.peak.name}), "
            f"{available.bytes / GIB:.1f} GiB is available ({available.source}): "
            f"{change}; grpo plan shows where it goes (memory.check=false runs it anyway)")
