import os

import pytest

# Tests never reach a hub: everything is built from configs or read from local files.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def tiny_overrides(tmp_path):
    """Overrides that put a tiny-config run in a fresh directory."""

    def make(*extra: str, run_dir=None) -> list[str]:
        return [f"run_dir={run_dir or tmp_path / 'run'}", *extra]

    return make
