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


def pytest_configure(config):
    # Under xdist each of the two workers gets one intra-op thread (and so do the processes its tests
    # start): two workers of two threads each on two cores spin against each other.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)
