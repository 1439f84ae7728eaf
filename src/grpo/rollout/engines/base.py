"""The seam every rollout engine implements; what it takes and returns is grpo.rollout.types."""

from __future__ import annotations

import abc

from grpo.rollout.types import Completion, SamplingParams


class RolloutEngine(abc.ABC):
    """Generates completions from the policy's current weights. `start` brings it up with the
    policy's weights; `sync_weights` is called whenever they change (after an update, a restore)."""

    def start(self, policy) -> None:
        """Bring the engine up serving `policy`'s weights."""

    @abc.abstractmethod
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[Completion]:
        """One completion per prompt, in order; seeds[i] keys prompt i's sampling (grpo.rollout.seeds),
        so a sample does not depend on its batch. Must not raise for a single bad sample: mark it FAILED."""

    def sync_weights(self, policy) -> dict[str, float]:
        """Make the engine sample from `policy`'s current weights: -> sync metrics. In-process
        engines share the weights already."""
        return {}

    def pinned(self, policy) -> RolloutEngine:
        """An engine that generates from `policy`'s current weights until the next `sync_weights`,
        while the policy trains on (grpo.rollout.queue)."""
        raise NotImplementedError(f"{type(self).__name__} cannot generate ahead of the trainer")

    def outlived(self, completion: Completion) -> bool:
        """Whether what produced `completion` has failed since (a server incarnation): then it is not used."""
        return False

    def status(self) -> list[dict]:
        """One entry per server, for `grpo health`; empty for in-process engines."""
        return []

    def close(self) -> None:
        """Release whatever the engine holds (servers, memory)."""
