"""When each fault fires: at the steps the config lists, at most once per step number in a process,
so a step replayed after a rollback runs clean, as it would after a transient outage."""

from __future__ import annotations

import random
import threading

from grpo.config import FaultsConfig
from grpo.faults.names import steps


class Schedule:
    def __init__(self, cfg: FaultsConfig, seed: int = 0, rank: int = 0) -> None:
        self.cfg, self.rank = cfg, rank
        self.rng = random.Random(seed)  # which samples fail, at fail_fraction < 1
        self.done: set[int] = set()
        self.lock = threading.Lock()  # a step ahead is collected on the rollout queue's worker

    def fires(self, name: str, step: int) -> bool:
        with self.lock:
            return step in steps(self.cfg, name) and step not in self.done

    def step_done(self, step: int) -> None:
        with self.lock:
            self.done.add(step)
