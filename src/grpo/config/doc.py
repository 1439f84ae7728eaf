"""Every config key's meaning, read from the dataclasses: `grpo config show` (the resolved config with each
key's value, default and meaning) and the configuration reference (`reference_markdown`).

A key's meaning is the `help` of its `knob(...)` in schema.py; a section's is the first paragraph of
its dataclass's docstring. A key without one fails a test (`undocumented`).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any, Literal

import yaml

from grpo.config.keys import CHECK, key_help
from grpo.config.schema import RunConfig


def field_help(cls: type) -> dict[str, str]:
    """field name -> its meaning, for the fields that have one."""
    return {f.name: key_help(f) for f in dataclasses.fields(cls) if key_help(f)}


def section_doc(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.split("\n\n")[0].replace("\n", " ") if doc and not doc.startswith(cls.__name__ + "(") else ""


def _flow(value: Any) -> str:
    """A value as YAML writes it on one line (`null`, `[a, b]`, `1.0e-06`)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def render(cfg: RunConfig) -> str:
    lines = ["# The resolved config: every key, its value, [its default when different] and its meaning.",
             "# A valid --config file as it stands."]
    _render(cfg, type(cfg)(), 0, lines)
    return "\n".join(lines) + "\n"


def _render(obj: Any, default: Any, depth: int, lines: list[str]) -> None:
    cls = type(obj)
    meanings = field_help(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value, base = getattr(obj, f.name), getattr(default, f.name)
        indent = "  " * depth
        if dataclasses.is_dataclass(value):
            doc = meanings.get(f.name) or section_doc(hints[f.name])
            lines.append(f"{indent}{f.name}:" + (f"  # {doc}" if doc else ""))
            _render(value, base, depth + 1, lines)
            continue
        note = meanings.get(f.name, "")
        if value != base:
            note = f"[default {_flow(base)}] {note}".strip()
        lines.append(f"{indent}{f.name}: {_flow(value)}" + (f"  # {note}" if note else ""))


def undocumented() -> list[str]:
    """Keys with no meaning written beside them (a test keeps this empty)."""
    missing: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        meanings = field_help(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                if f.name not in meanings and not section_doc(hints[f.name]):
                    missing.append(prefix + f.name)
                walk(hints[f.name], f"{prefix}{f.name}.")
            elif f.name not in meanings:
                missing.append(prefix + f.name)

    walk(RunConfig, "")
    return missing


def reference_markdown() -> str:
    """The configuration reference as Markdown: a section per config section (`## rollout.server`, with the
    section's meaning), and under it a line per key with its dotted name, type, default, meaning and, where
    it has one, the check of its value. Read from the dataclasses, so it is never out of date; the docs site
    writes it to a page at build time:

        from grpo.config.doc import reference_markdown
        Path("docs/reference/config.md").write_text(reference_markdown())
    """
    lines = ["# Configuration reference", "",
             "Every key of a run's configuration: its type, its default and what it means. Set keys in a YAML file "
             "(`--config FILE`) or as dotted overrides (`rollout.max_new_tokens=64`); `grpo config show` prints a "
             "run's resolved values beside their defaults. An optional key (`... | None`) takes `null` for the "
             "behaviour its meaning describes.", ""]
    _reference(RunConfig(), "", "Top level", "", lines)
    return "\n".join(lines).rstrip("\n") + "\n"


def _reference(obj: Any, at: str, title: str, doc: str, lines: list[str]) -> None:
    """`doc`: the section's meaning (its key's help, else its dataclass's docstring)."""
    cls = type(obj)
    hints = typing.get_type_hints(cls)
    meanings = field_help(cls)
    lines += [f"## {title}", ""]
    if doc:
        lines += [doc, ""]
    prefix = f"{at}." if at else ""
    sections = []
    for f in dataclasses.fields(cls):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            sections.append((f, value))
            continue
        text = f"- **`{prefix}{f.name}`** ({_type_name(hints[f.name], f)}, default `{_flow(value)}`): " \
               f"{_sentence(meanings.get(f.name, ''))}"
        check = f.metadata.get(CHECK)
        if check is not None:
            text += f" Its value {_sentence(check.says.lstrip(': '))}"
        lines.append(text)
    lines.append("")
    for f, value in sections:
        doc = meanings.get(f.name) or section_doc(type(value))
        _reference(value, prefix + f.name, f"`{prefix}{f.name}`", _sentence(doc), lines)


def _type_name(hint: Any, f: dataclasses.Field) -> str:
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in typing.get_args(hint))
    return f"`{f.type}`" if isinstance(f.type, str) else f"`{getattr(hint, '__name__', hint)}`"


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    return text if text.endswith(".") else text + "."
