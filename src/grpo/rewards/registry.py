"""Reward functions by name: registered ones, or imported from ``"package.module:function"``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, overload

RewardFn = Callable[..., list[float | None]]

_REGISTRY: dict[str, RewardFn] = {}


@overload
def register_reward(name: str, fn: None = None) -> Callable[[RewardFn], RewardFn]: ...
@overload
def register_reward(name: str, fn: RewardFn) -> RewardFn: ...
def register_reward(
    name: str, fn: RewardFn | None = None
) -> RewardFn | Callable[[RewardFn], RewardFn]:
    """Register a reward under ``name``; use as ``@register_reward("x")`` or
    ``register_reward("x", fn)``. A name can be registered once."""

    def add(reward_fn: RewardFn) -> RewardFn:
        if not callable(reward_fn):
            raise TypeError(f"reward {name!r} must be callable, got {type(reward_fn).__name__}")
        if name in _REGISTRY:
            raise ValueError(f"a reward named {name!r} is already registered")
        _REGISTRY[name] = reward_fn
        return reward_fn

    if fn is None:
        if name in _REGISTRY:
            raise ValueError(f"a reward named {name!r} is already registered")
        return add
    return add(fn)


def registered_rewards() -> list[str]:
    return sorted(_REGISTRY)


def get_reward(name: str) -> RewardFn:
    """A registered reward, or one imported from ``"package.module:function"``."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" not in name:
        raise KeyError(
            f"unknown reward {name!r}; registered rewards: {', '.join(registered_rewards())}"
            " (or give an import path 'package.module:function')"
        )
    module_name, _, attr_path = name.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        if not hasattr(obj, attr):
            raise AttributeError(f"reward {name!r}: {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"reward {name!r} is not callable (got {type(obj).__name__})")
    return obj
