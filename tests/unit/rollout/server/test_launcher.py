"""Where a server's processes run: the local launcher starts the command built for its host and port
as this process's child; the Ray placement is read from the launcher's environment (no Ray needed)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from grpo.errors import ConfigError
from grpo.rollout.server.backend import LaunchSpec
from grpo.rollout.server.launcher import Launch, LocalLauncher
from grpo.rollout.server.ray_host import SERVER_BUNDLES_ENV, ray_launchers
from tests.waiting import wait_until


def test_the_local_launcher_starts_the_command_for_its_host_and_a_free_port(tmp_path):
    asked = []

    def spec_for(host: str, port: int) -> LaunchSpec:
        asked.append((host, port))
        return LaunchSpec([sys.executable, "-c", "print('up', flush=True)"])

    exits = []
    launched = LocalLauncher("127.0.0.1", 0).launch(Launch(spec_for, tmp_path / "s.log", exits.append, None,
                                                           threading.Event(), time.monotonic() + 60))
    ((host, port),) = asked
    assert host == "127.0.0.1" and port > 0 and launched.url == f"http://127.0.0.1:{port}"
    assert launched.handle.exited.wait(30) and launched.handle.describe_exit() == "exited with status 0"
    assert "up" in launched.handle.output()
    wait_until(lambda: exits, 5, "the exit reported", interval=0.01)  # reported just after it is seen
    assert exits == [launched.handle]


def test_servers_run_locally_unless_the_ray_launcher_placed_them(monkeypatch):
    monkeypatch.delenv(SERVER_BUNDLES_ENV, raising=False)
    assert ray_launchers(["sglang-0", "sglang-1"], lambda *a, **k: None) is None
    monkeypatch.setenv(SERVER_BUNDLES_ENV, "1")
    with pytest.raises(ConfigError, match=r"reserved 1 server bundle\(s\) for 2 server\(s\)"):
        ray_launchers(["sglang-0", "sglang-1"], lambda *a, **k: None)
