"""Reward functions by name: registered ones, or imported from ``"package.module:function"``."""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from grpo.errors import ConfigError
from grpo.rewards.harness import Reward, RewardFn

_REGISTRY: dict[str, RewardFn] = {}


@overload
def register_reward(name: str, fn: None = None, *, replace: bool = False) -> Callable[[RewardFn], RewardFn]: ...
@overload
def register_reward(name: str, fn: RewardFn, *, replace: bool = False) -> RewardFn: ...
def register_reward(
    name: str, fn: RewardFn | None = None, *, replace: bool = False
) -> RewardFn | Callable[[RewardFn], RewardFn]:
    """Register a reward under ``name``; use as ``@register_reward("x")`` or
    ``register_reward("x", fn)``. A name can be registered once, unless ``replace`` (a notebook cell
    run again redefines its function)."""

    def add(reward_fn: RewardFn) -> RewardFn:
        if not callable(reward_fn):
            raise TypeError(f"reward {name!r} must be callable, got {type(reward_fn).__name__}")
        _refuse_taken(name, replace)
        _REGISTRY[name] = reward_fn
        return reward_fn

    if fn is None:
        _refuse_taken(name, replace)  # at the decorator's line, before the function it decorates is defined
        return add
    return add(fn)


def _refuse_taken(name: str, replace: bool) -> None:
    if name in _REGISTRY and not replace:
        raise ValueError(f"a reward named {name!r} is already registered")


def registered_rewards() -> list[str]:
    return sorted(_REGISTRY)


# A hub model id (ORG/NAME), as TRL's GRPOTrainer takes one in reward_funcs for a reward model.
_MODEL_ID = re.compile(r"[\w.-]+/[\w.-]+")


def _unknown(name: str) -> str:
    """Why `name` names no reward, and what to write: TRL takes a model id (or a model's folder) as a reward model
    and TRL's `trl grpo` script a dotted import path; grpo takes neither as it is."""
    if _MODEL_ID.fullmatch(name) or (Path(name).is_dir() and (Path(name) / "config.json").is_file()):
        return (f"{name!r} is a model, which TRL loads as a reward model (AutoModelForSequenceClassification); grpo "
                "takes reward functions: load the model in a function(prompts, completions, **kwargs) that returns "
                "one score per completion and give its import path (module:function)")
    module, _, function = name.rpartition(".")
    if module and function.isidentifier():
        return f"unknown reward {name!r}: an import path puts a colon before the function: {module}:{function}"
    return (f"unknown reward {name!r}; registered rewards: {', '.join(registered_rewards())} (or give an import path "
            "'package.module:function')")


def get_reward(name: str) -> RewardFn:
    """A registered reward, or one imported from ``"package.module:function"``."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" not in name:
        raise KeyError(_unknown(name))
    module_name, _, attr_path = name.partition(":")
    # A module in the working directory imports as `python -m` would find it; the `grpo` script's own
    # path starts at its bin/ directory instead.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        if not hasattr(obj, attr):
            raise AttributeError(f"reward {name!r}: {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"reward {name!r} is not callable (got {type(obj).__name__})")
    return obj


def _import_error(spec: str, exc: BaseException) -> str:
    module_name = spec.partition(":")[0]
    if isinstance(exc, ModuleNotFoundError) and exc.name is not None and (module_name + ".").startswith(exc.name + "."):
        return (f"no module named {exc.name!r} in the working directory ({os.getcwd()}) or on the Python path; "
                "give the module's name as you would import it (my_rewards:fn for ./my_rewards.py)")
    if isinstance(exc, (KeyError, AttributeError, TypeError)) and exc.args:
        return str(exc.args[0])
    where = f" ({exc.filename}:{exc.lineno})" if isinstance(exc, SyntaxError) else ""
    return f"importing {module_name} failed: {type(exc).__name__}: {exc}{where}"


def resolve_rewards(specs: str | Callable | Sequence[str | Callable], weights: Sequence[float] | None,
                    key: str) -> list[Reward]:
    """The reward functions `key` names (registered names, import paths or callables) with their weights;
    a name that does not resolve is a ConfigError naming `key`, before any model is loaded."""
    entries = [specs] if isinstance(specs, str) or callable(specs) else list(specs)
    if not entries:
        raise ConfigError(f"{key} names no reward function; give a name (math) or a list ([math, my_rewards:fn])")
    if weights is not None and len(weights) != len(entries):
        raise ConfigError(f"{key}_weights has {len(weights)} weights for {len(entries)} reward functions "
                          f"({key}); give one weight per function")
    rewards: list[Reward] = []
    for i, entry in enumerate(entries):
        if callable(entry):
            fn, name = entry, getattr(entry, "__name__", type(entry).__name__).strip("<>")
        else:
            try:
                fn = get_reward(entry)
            except Exception as exc:  # a user module may raise anything while it imports: one line, not a crash
                raise ConfigError(f"{key}={entry!r}: {_import_error(entry, exc)}") from exc
            name = entry.rpartition(":")[2].rpartition(".")[2]
        taken = {r.name for r in rewards}
        unique = name if name not in taken else next(f"{name}_{k}" for k in range(2, len(entries) + 2)
                                                      if f"{name}_{k}" not in taken)
        rewards.append(Reward(unique, fn, 1.0 if weights is None else float(weights[i])))
    return rewards
