"""The seam between the server engine and one kind of inference server (vLLM, SGLang): how to start
it, ask it for completions and probe log-probs, and move new weights into it.

A backend turns the server's answers into grpo's terms and checks their shape: an answer that does
not fit raises ServerError("garbage"), so a confused server fails samples, never scores them.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path

from grpo.config import ServerConfig
from grpo.rollout.server.client import HttpClient, ServerError
from grpo.rollout.types import SamplingParams


@dataclass
class Generation:
    token_ids: list[int]  # [T] generated ids, EOS included when the model emitted it
    logprobs: list[float]  # [T] under the sampling distribution (temperature-scaled)
    finish_reason: str  # "stop" | "length"


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


class ReloadMode:
    """How a sync moves weights in: `full` is the correct path; the others exist to rehearse the
    failures the probe must catch (testing.faults.*)."""

    FULL = "full"
    STOCK = "stock"  # the server's own reload, which (in vLLM) leaves a tied lm_head stale
    SKIP = "skip"  # no reload at all


class Backend(abc.ABC):
    name: str
    # Tokens a server keeps back from its KV cache: one sequence needs this many more than its own length.
    cache_slack_tokens: int = 0

    @abc.abstractmethod
    def launch(self, cfg: ServerConfig, python: str, model_dir: Path, host: str, port: int, dtype: str,
               seed: int) -> LaunchSpec: ...

    @abc.abstractmethod
    def generate(self, client: HttpClient, prompt_ids: list[int], params: SamplingParams, seed: int,
                 timeout_s: float | None = None) -> Generation: ...

    @abc.abstractmethod
    def prompt_logprobs(self, client: HttpClient, token_ids: list[int]) -> list[float]:
        """[T-1] raw log p(ids[k] | ids[:k]) for k >= 1 (temperature 1), under the served weights."""

    @abc.abstractmethod
    def reload_weights(self, client: HttpClient, model_dir: Path, mode: str) -> None: ...

    @abc.abstractmethod
    def reset_cache(self, client: HttpClient) -> None:
        """Drop cached prefixes: their KV was computed with the old weights."""

    def fingerprint(self, client: HttpClient) -> dict | None:
        """An exact check of the served weights, where the server can give one (vLLM, through grpo's
        worker extension): {"embed_sha256", "head_vs_embed_maxdiff", ...}. None where it cannot."""
        return None

    def kv_cache_tokens(self, gib: float, bytes_per_token: int) -> int | None:
        """The tokens of `bytes_per_token` each (kv_bytes_per_token) that rollout.server.kv_cache_gib=`gib` gives
        this server's KV cache, as the server sizes it; None where the knob does not size it."""
        return None

    def identify(self, client: HttpClient) -> None:
        """Raise ServerError unless this is such a server: for a URL given by the user, before any work."""
        self.health_generate(client, [1, 2, 3], client.timeout_s)

    def health_generate(self, client: HttpClient, token_ids: list[int], timeout_s: float) -> None:
        """A real one-token generation: ready means this answers, not that a port is open."""
        result = self.generate(client, token_ids, SamplingParams(max_new_tokens=1, temperature=0.0), seed=0,
                               timeout_s=timeout_s)
        if len(result.token_ids) != 1:
            raise ServerError("garbage", f"a one-token generation returned {len(result.token_ids)} tokens")


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: str) -> int:
    """A token's KV cache: a key and a value per layer and KV head, in the served dtype."""
    return 2 * num_layers * num_kv_heads * head_dim * (4 if dtype == "float32" else 2)


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise ServerError("garbage", f"unexpected answer: {what}")
