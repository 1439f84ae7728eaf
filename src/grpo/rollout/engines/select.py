"""Which engine `rollout.engine=auto` means here."""

from __future__ import annotations

import importlib.util

import torch


def resolve_engine(name: str) -> str:
    """auto: vLLM where it is importable and CUDA is present (where it is fast), else embedded."""
    if name != "auto":
        return name
    return "vllm" if torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None else "embedded"
