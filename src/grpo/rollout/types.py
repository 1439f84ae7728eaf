"""What every rollout engine takes and returns, below both the engines and the servers they drive.
Failure is a status on the sample, never a reward."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class GenerationCancelled(Exception):
    """Generation was cancelled from outside (a stop signal): nothing it produced may be used."""


class EngineGaveUp(Exception):
    """The engine cannot generate from the trainer's weights any more (its server cannot be brought back,
    or its weights cannot be made to match): the run stops, saved."""


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
