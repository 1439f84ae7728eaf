"""The seed check's three verdicts: honoured, ignored, and too certain to tell; and that a failed
probe request fails the check rather than passing it."""

from __future__ import annotations

import itertools

import pytest

from grpo.rollout.server.backend import Generation
from grpo.rollout.server.client import ServerError
from grpo.rollout.server.seed_check import check_seeds

from .test_supervisor import ScriptedBackend


class Sampler(ScriptedBackend):
    """Answers as a server would that `honours` seeds, ignores them (a fresh draw per request), or is
    certain of its answer (the same tokens whatever the seed)."""

    def __init__(self, behaviour: str) -> None:
        super().__init__("")
        self.behaviour, self.requests, self.draws = behaviour, [], itertools.count()

    def generate(self, client, prompt_ids, params, seed, timeout_s=None) -> Generation:
        self.requests.append((tuple(prompt_ids), params.temperature, seed))
        if self.behaviour == "fails":
            raise ServerError("timeout", "no answer")
        source = {"honours": seed, "ignores": next(self.draws) * 7919, "certain": 1}[self.behaviour]
        tokens = [(source >> i) % 251 for i in range(params.max_new_tokens)]
        return Generation(tokens, [0.0] * len(tokens), "length")


@pytest.mark.parametrize("behaviour, verdict", [("honours", True), ("ignores", False), ("certain", None)])
def test_the_verdict_follows_what_the_server_does_with_the_seed(behaviour, verdict):
    backend = Sampler(behaviour)
    result = check_seeds(backend, None, [5, 6, 7], timeout_s=1.0)
    assert result.reproducible is verdict
    assert ("not reproducible" in result.detail) is (verdict is False)
    # Sampled (temperature 1) on the prompt given, the same seed twice and then another one.
    assert [r[:2] for r in backend.requests] == [((5, 6, 7), 1.0)] * 3
    seeds = [r[2] for r in backend.requests]
    assert seeds[0] == seeds[1] != seeds[2]


def test_a_probe_that_fails_raises_and_claims_nothing():
    with pytest.raises(ServerError):
        check_seeds(Sampler("fails"), None, [1], timeout_s=1.0)
