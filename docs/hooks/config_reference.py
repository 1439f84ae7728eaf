"""The configuration reference page, generated at build time from the config's own field help.

`mkdocs build` calls `on_files`, which adds `configuration.md` rendered from `grpo.config`'s
dataclasses and the comments beside their fields (`grpo.config_doc`), so the page cannot drift
from the code. `reference_markdown()` needs neither mkdocs nor torch: tests/unit/test_docs.py
imports it to check that every key is on the page.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from grpo.config import RunConfig  # noqa: E402
from grpo.config_doc import field_comments, section_doc  # noqa: E402

PAGE = "configuration.md"

_INTRO = """# Configuration reference

Generated from `src/grpo/config.py` when the site is built: every key, its default and the comment
written beside it in the code (the same text `grpo config show` prints). A key is set in a YAML file
given to `--config` or on the command line as `section.key=value` (values are parsed as YAML:
`[3,4]`, `true`, `null`). An unknown key is refused, naming the valid ones. How the pieces fit
together is in [Getting started](getting-started.md) and [Your own data and rewards](own-data.md).
"""


def reference_markdown() -> str:
    """Every config key as Markdown: one table per section, nested sections under their parent."""
    out = [_INTRO]
    _section(RunConfig(), "", "Top level", "The run's name, its directory and whether it resumes.", out)
    return "\n".join(out)


def _section(obj: object, prefix: str, title: str, doc: str, out: list[str]) -> None:
    cls = type(obj)
    comments = field_comments(cls)
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    scalars = [f for f in fields if not dataclasses.is_dataclass(hints[f.name])]
    nested = [f for f in fields if dataclasses.is_dataclass(hints[f.name])]
    # Several fields of one dataclass type (the guard's breakers) read best as one table.
    counts = typing.Counter(hints[f.name] for f in nested)
    repeated = [f for f in nested if counts[hints[f.name]] > 1]
    single = [f for f in nested if counts[hints[f.name]] == 1]

    level = "#" * min(2 + max(prefix.count(".") - 1, 0), 4)
    out.append(f"{level} {title}\n")
    if doc:
        out.append(doc + "\n")
    if scalars:
        out.append("| key | default | meaning |\n| --- | --- | --- |")
        for f in scalars:
            out.append(f"| `{prefix}{f.name}` | {_value(getattr(obj, f.name))} | {_cell(comments.get(f.name, ''))} |")
        out.append("")
    if repeated:
        inner_cls = hints[repeated[0].name]
        inner = [g.name for g in dataclasses.fields(inner_cls)]
        inner_comments = field_comments(inner_cls)
        example = f"{prefix}{repeated[0].name}.{inner[-1]}"
        out.append(f"Each row below is a `{inner_cls.__name__}`. {section_doc(inner_cls)} Its keys, set as "
                   f"`{example}=...`: " + "; ".join(f"`{name}`, {inner_comments.get(name, '')}" for name in inner) + ".\n")
        out.append("| key | meaning | " + " | ".join(inner) + " |\n|" + " --- |" * (len(inner) + 2))
        for f in repeated:
            value = getattr(obj, f.name)
            cells = " | ".join(_value(getattr(value, name)) for name in inner)
            out.append(f"| `{prefix}{f.name}` | {_cell(comments.get(f.name, ''))} | {cells} |")
        out.append("")
    for f in single:
        sub_doc = comments.get(f.name) or section_doc(hints[f.name])
        _section(getattr(obj, f.name), f"{prefix}{f.name}.", f"`{prefix}{f.name}`", _cell(sub_doc), out)


def _value(value: object) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    return f"`{text}`" if text else "`''`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def on_files(files, config):  # mkdocs hook
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=reference_markdown()))
    return files
