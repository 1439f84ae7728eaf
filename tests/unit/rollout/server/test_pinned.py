"""The probe's reference for pinned weights: what the weights were at the pin, whatever the policy does next."""

import pytest
import torch

from grpo.config import load_config
from grpo.policy.policy import Policy
from grpo.rollout.server.pinned import PinnedWeights
from grpo.rollout.server.weights import embedding_sha256, fingerprint_error, probe_ids


def test_pinned_weights_keep_the_probe_reference_of_their_revision_while_the_policy_trains():
    torch.manual_seed(0)
    policy = Policy(load_config("tiny", []), torch.device("cpu"))
    probe = probe_ids(policy.tokenizer)
    before = policy.sequence_logprobs(probe)
    served = {"embed_sha256": embedding_sha256(policy.model, torch.float32), "embed_dtype": "float32"}
    pinned = PinnedWeights(policy, probe)
    with torch.no_grad():  # the policy trains on
        for p in policy.model.parameters():
            p.add_(0.1)
    policy.revision += 1
    assert pinned.revision == policy.revision - 1
    assert pinned.sequence_logprobs(probe + [5, 6]) == before  # the prompt's alone: nothing generated is known
    assert policy.sequence_logprobs(probe) != before
    # A server still serving the pinned weights passes the fingerprint; against the policy it would not.
    assert fingerprint_error(served, pinned.model, "float32") is None
    assert fingerprint_error(served, policy.model, "float32") is not None
    with pytest.raises(ValueError, match="probe prompt only"):
        pinned.sequence_logprobs([1, 2, 3])
    with pytest.raises(RuntimeError, match="never exported"):
        pinned.save_full_model(None)
