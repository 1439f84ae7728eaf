"""Handing a KV cache to a model's forward under the name its transformers release reads.

transformers 5.2x names the argument `cache` and warns at `past_key_values`, which it says 5.40 drops;
the releases before (4.56 on, which grpo supports) know only `past_key_values`. PEFT's wrappers pass
keyword arguments through, so the name is the wrapped model's."""

from __future__ import annotations

import functools
import inspect

import torch
from transformers import Cache


@functools.cache
def _keyword(forward_class: type) -> str:
    return "cache" if "cache" in inspect.signature(forward_class.forward).parameters else "past_key_values"


def cache_argument(module: torch.nn.Module, cache: Cache) -> dict[str, Cache]:
    """{name: cache} for `module(**inputs, **cache_argument(module, cache))`."""
    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    return {_keyword(type(base)): cache}
