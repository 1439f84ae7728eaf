"""`grpo config show`: the resolved config with every key's value, default and meaning.

The meanings are the comments beside (or just above) each field in grpo/config.py, so the
documentation lives in one place and a key without one fails a test.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from typing import Any

import yaml

from grpo.config import RunConfig

_FIELD = re.compile(r"^\s+(\w+):\s*[^=]+?(?:=.*?)?(?:#\s*(?P<comment>.*))?$")


def field_comments(cls: type) -> dict[str, str]:
    """field name -> its comment: the trailing one, else the comment lines right above it."""
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD.match(line)
        if match and not stripped.startswith(("def ", "@", '"""')):
            trailing = match.group("comment")
            text = " ".join(above + ([trailing] if trailing else []))
            if text:
                comments[match.group(1)] = text
        above = []
    return comments


def section_doc(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.split("\n\n")[0].replace("\n", " ") if doc and not doc.startswith(cls.__name__ + "(") else ""


def render(cfg: RunConfig) -> str:
    lines = ["# The resolved config: every key, its value, [its default when different] and its meaning.",
             "# A valid --config file as it stands."]
    _render(cfg, type(cfg)(), 0, lines)
    return "\n".join(lines) + "\n"


def _render(obj: Any, default: Any, depth: int, lines: list[str]) -> None:
    cls = type(obj)
    comments = field_comments(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value, base = getattr(obj, f.name), getattr(default, f.name)
        indent = "  " * depth
        if dataclasses.is_dataclass(value):
            doc = comments.get(f.name) or section_doc(hints[f.name])
            lines.append(f"{indent}{f.name}:" + (f"  # {doc}" if doc else ""))
            _render(value, base, depth + 1, lines)
            continue
        shown = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
        note = comments.get(f.name, "")
        if value != base:
            was = yaml.safe_dump(base, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
            note = f"[default {was}] {note}".strip()
        lines.append(f"{indent}{f.name}: {shown}" + (f"  # {note}" if note else ""))


def undocumented() -> list[str]:
    """Keys with no meaning written beside them (a test keeps this empty)."""
    missing: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        comments = field_comments(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                if f.name not in comments and not section_doc(hints[f.name]):
                    missing.append(prefix + f.name)
                walk(hints[f.name], f"{prefix}{f.name}.")
            elif f.name not in comments:
                missing.append(prefix + f.name)

    walk(RunConfig, "")
    return missing
