"""The weights a server holds while the policy trains on (grpo.rollout.queue), as the probe's reference.

A server restarted during a rollout generated ahead of the trainer starts from the weight files of the
last sync, which is what it must serve; the policy's own weights are moving meanwhile. So its probe is
checked against these, kept at the pin: the probe prompt's log-probs (every weight, the tied head
included) and the input embedding (the fingerprint). The log-probs of the tokens a server generates
after the prompt cannot be known ahead; they check that an in-place reload reset the prefix cache, and
a freshly started server has none: it is verified on the prompt and the fingerprint.
"""

from __future__ import annotations

from pathlib import Path

import torch


class _Embeddings(torch.nn.Module):
    """What the fingerprint reads of a model: its input embedding."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding.from_pretrained(weight)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed


class PinnedWeights:
    """A WeightSource (grpo.rollout.server.weights) for the weights of one revision, held."""

    def __init__(self, policy, probe: list[int]) -> None:
        self.revision, self.version = policy.revision, policy.version
        self.probe = list(probe)
        self.prompt_logprobs = policy.sequence_logprobs(self.probe)  # [P-1]
        self.model = _Embeddings(policy.model.get_input_embeddings().weight.detach().clone())

    def sequence_logprobs(self, token_ids: list[int]) -> list[float]:
        """The probe prompt's log-probs alone, whatever was generated after it."""
        if list(token_ids[: len(self.probe)]) != self.probe:
            raise ValueError("pinned weights know the log-probs of the probe prompt only")
        return list(self.prompt_logprobs)

    def save_full_model(self, directory: Path) -> None:
        raise RuntimeError("pinned weights are never exported: the server's files hold them already")
