"""A reward function's identity is its code: a hash of its source and of what it uses from its module and
yours (the functions and classes it calls, followed through theirs; a module of yours it reaches into, whole;
the constants it reads, by value). Editing any of them changes the hash, so a run directory can tell that
its reward was edited between starts (grpo.rundir.identity). The rest of the module is left out: a script
that defines its reward and calls `grpo.api.train` may change its other lines (train.steps) and resume.

grpo's built-in rewards are identified by their name; code from installed packages is followed no
further than the reward function itself."""

from __future__ import annotations

import functools
import hashlib
import inspect
import marshal
import re
import sys
import types
import weakref
from pathlib import Path
from typing import Any

_VALUE_LIMIT = 100_000  # characters of a constant's text hashed; a larger one by its length and type


def code_fingerprint(fn: Any) -> str | None:
    """sha256 of `fn`'s code and what it uses; None for grpo's built-in rewards."""
    if _module_name(fn).partition(".")[0] == "grpo":
        return None
    digest = hashlib.sha256()
    _add(fn, digest, set(), top=True)
    return digest.hexdigest()


def _module_name(obj: Any) -> str:
    obj = inspect.unwrap(obj.func if isinstance(obj, functools.partial) else obj)
    return getattr(obj, "__module__", None) or type(obj).__module__ or ""


def _is_yours(obj: Any) -> bool:
    """Code of the user's: not Python's own, not an installed package's, not grpo's."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    if isinstance(obj, types.ModuleType):
        module = obj
    if module is None:
        return False
    top = module.__name__.partition(".")[0]
    if top == "grpo" or top in sys.stdlib_module_names or top == "builtins":
        return False
    path = getattr(module, "__file__", None)
    if path is None:
        return module.__name__ == "__main__"  # a notebook's cells
    parts = Path(path).parts
    return not ("site-packages" in parts or "dist-packages" in parts or Path(path).is_relative_to(sys.prefix))


def _add(obj: Any, digest: Any, seen: set[int], top: bool = False) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, functools.partial):
        digest.update(f"partial {_value(obj.args)} {_value(obj.keywords)}".encode())
        _add(obj.func, digest, seen, top)
        return
    if isinstance(obj, types.MethodType):
        _add(obj.__func__, digest, seen, top)
        return
    if not (top or _is_yours(obj)):
        return
    if isinstance(obj, types.ModuleType):
        digest.update(_source(obj).encode())
        return
    wrapped = getattr(obj, "__wrapped__", None)  # a decorated function: the decorator's code and the function's
    if wrapped is not None:
        _add(wrapped, digest, seen, top)
    if isinstance(obj, type):
        digest.update(_source(obj).encode())
        for member in vars(obj).values():
            member = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if isinstance(member, types.FunctionType):
                _uses(member, digest, seen)
        return
    if isinstance(obj, types.FunctionType):
        digest.update(_source(obj).encode())
        digest.update(f"defaults {_value(obj.__defaults__)} {_value(obj.__kwdefaults__)}".encode())
        if obj.__name__ == "<lambda>":  # its source is its whole line, which may hold other lambdas
            code = obj.__code__
            consts = [c for c in code.co_consts if not isinstance(c, types.CodeType)]
            digest.update(f"lambda {_value(consts)} {code.co_names} {code.co_varnames}".encode())
        _uses(obj, digest, seen)
        return
    if callable(obj):  # an instance with __call__: its class, and its state as this process first saw it
        digest.update(f"instance {_first_state(obj)}".encode())
        _add(type(obj), digest, seen, top)


_STATES: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def _first_state(obj: Any) -> str:
    """A callable object's attributes as first fingerprinted in this process: how it was made (a strict flag)
    is its identity, what it changes as it runs (a call counter, a cache) must not refuse a resume in the
    same process (a notebook that calls api.train again with the same object)."""
    state = _value(getattr(obj, "__dict__", None))
    try:
        return _STATES.setdefault(obj, state)
    except TypeError:  # not weakly referable: as it is now
        return state


def _uses(fn: types.FunctionType, digest: Any, seen: set[int]) -> None:
    """What `fn` reads from its module (names in its code) and from enclosing functions (its closure)."""
    names: list[str] = []
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        names.extend(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    for name in sorted(set(names)):
        if name in fn.__globals__:
            _add_value(name, fn.__globals__[name], digest, seen)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            _add_value(name, cell.cell_contents, digest, seen)
        except ValueError:  # a cell not filled yet
            continue


def _add_value(name: str, value: Any, digest: Any, seen: set[int]) -> None:
    if isinstance(value, (types.FunctionType, type, types.ModuleType, functools.partial, types.MethodType)):
        _add(value, digest, seen)
    else:
        digest.update(f"{name}={_value(value)}".encode())


def _value(value: Any) -> str:
    """A constant's text, the same in every process; values without one are named by their type."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        text = repr(value)
    elif isinstance(value, (list, tuple, set, frozenset, dict)) and len(value) > _VALUE_LIMIT // 10:
        text = f"<{type(value).__name__} of {len(value)} items>"
    elif isinstance(value, re.Pattern):
        text = f"re.compile({value.pattern!r}, {value.flags})"
    elif isinstance(value, (list, tuple)):
        text = f"{type(value).__name__}[{', '.join(_value(v) for v in value)}]"
    elif isinstance(value, (set, frozenset)):
        text = f"{type(value).__name__}{{{', '.join(sorted(_value(v) for v in value))}}}"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{_value(k)}: {_value(v)}" for k, v in value.items()) + "}"
    else:
        text = f"<{type(value).__module__}.{type(value).__qualname__}>"
    return text if len(text) <= _VALUE_LIMIT else f"<{type(value).__name__} of {len(text)} characters>"


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):  # no source (made by exec): its compiled code stands in
        code = getattr(obj, "__code__", None)
        return marshal.dumps(code).hex() if code is not None else f"<{getattr(obj, '__qualname__', type(obj))}>"
