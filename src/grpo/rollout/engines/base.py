"""What every rollout engine takes and returns. Failure is a status on the sample, never a reward."""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field



class GenerationCancelled(Exception):
    """Generation was cancelled from outside (a stop signal): nothing it produced may be used."""


class SampleStatus(str, enum.Enum):
    OK = "ok"
    TRUNCATED = "truncated"  # hit max_new_tokens: a valid (if long) answer
    FAILED = "failed"  # the engine raised or the server answered with an error
    TIMEOUT = "timeout"
    EMPTY = "empty"  # no tokens came back: treated as a failure, never scored
    UNSCORABLE = "unscorable"  # the reward could not be computed (bad gold, reward raised)

    @property
    def trainable(self) -> bool:
        return self in (SampleStatus.OK, SampleStatus.TRUNCATED)

    @property
    def retryable(self) -> bool:
        return self in (SampleStatus.FAILED, SampleStatus.TIMEOUT, SampleStatus.EMPTY)


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass
class Completion:
    token_ids: list[int]  # [T_i] generated tokens, EOS included when the model emitted it
    logprobs: list[float]  # [T_i] log-prob of each token under the sampling distribution
    text: str
    finish_reason: str  # "stop" | "length" | "error"
    status: SampleStatus
    error: str | None = None
    meta: dict = field(default_factory=dict)


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
