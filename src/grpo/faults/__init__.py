"""Deliberate failures, so users and tests can rehearse what the guard does: `testing.faults.*` in a
run's config. Nothing in the production paths knows of them: an entry point (grpo.entry, for
`grpo train`, the Python API and each Ray rank) asks `install` for the run's hooks, which wrap the
parts as they are built (the server backend, the collector) and act at the step's seams
(grpo.hooks). Fault names are listed once, in grpo.faults.names."""

from __future__ import annotations

import os

from grpo.config import FaultsConfig, RunConfig
from grpo.errors import ConfigError
from grpo.faults.hooks import Faults
from grpo.faults.names import SERVER, key, steps
from grpo.faults.rollout import InjectedFault
from grpo.faults.server import ServerFaults
from grpo.rollout.engines.registry import serves
from grpo.rollout.server.ray_host import SERVER_BUNDLES_ENV

__all__ = ["Faults", "InjectedFault", "ServerFaults", "install"]


def install(cfg: RunConfig, rank: int = 0) -> Faults:
    """The hooks that carry out `cfg.testing.faults` on this rank; ConfigError for a fault this run cannot have."""
    faults = cfg.testing.faults
    check(faults, cfg)
    return Faults(faults, cfg.train.seed, rank)


def check(faults: FaultsConfig, cfg: RunConfig) -> None:
    server = [name for name in SERVER if steps(faults, name)]
    if server and not serves(cfg.rollout.engine):
        raise ConfigError(f"{key(server[0])} needs a server engine: set rollout.engine=vllm or sglang")
    if steps(faults, "kill_server_actor") and not os.environ.get(SERVER_BUNDLES_ENV):
        raise ConfigError(f"{key('kill_server_actor')} needs servers placed by Ray: grpo train --launcher ray "
                          "with rollout.engine=vllm|sglang and no rollout.server.urls")
