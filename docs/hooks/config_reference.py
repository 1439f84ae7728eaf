"""The configuration reference page, generated at build time from the config's own field help.

`mkdocs build` calls `on_files`, which adds `configuration.md` rendered by `grpo.config.doc.reference_markdown`
from `grpo.config`'s dataclasses (each key's type, default, meaning and check, the metadata beside the field),
so the page cannot drift from the code. It needs neither mkdocs nor torch: tests/unit/test_docs.py checks
that every key is on the page.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from grpo.config.doc import reference_markdown  # noqa: E402

PAGE = "configuration.md"


def on_files(files, config):  # mkdocs hook
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=reference_markdown()))
    return files
