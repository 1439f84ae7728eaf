import os
import subprocess
from pathlib import Path

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


def _mount(mount_point: Path, fstype: str, options: list[str]) -> None:
    result = subprocess.run(["mount", "-t", fstype, *options, fstype, str(mount_point)], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a {fstype} here ({result.stderr.strip()}): needs root")


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of the given size (root only), resizable; unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()

    def mount(size: str) -> Path:
        _mount(mount_point, "tmpfs", ["-o", f"remount,size={size}" if os.path.ismount(mount_point) else f"size={size}"])
        return mount_point

    yield mount
    if os.path.ismount(mount_point):
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.fixture
def ramfs(tmp_path):
    """A ramfs (root only): a filesystem that refuses O_DIRECT at open, as tmpfs did before Linux 6.6."""
    mount_point = tmp_path / "ramfs"
    mount_point.mkdir()
    _mount(mount_point, "ramfs", [])
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def pytest_configure(config):
    # Under xdist each of the two workers gets one intra-op thread (and so do the processes its tests
    # start): two workers of two threads each on two cores spin against each other.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)
