"""The step's advantages phase: the rollout batch's kept groups made into the rows the update trains on, with
their advantages, the rows left out of the loss, and the rows that carry a gradient, all computed here once
for the step."""

from __future__ import annotations

import torch

from grpo.algo.advantages import group_advantages
from grpo.algo.loss import rows_with_gradient
from grpo.config import AlgoConfig
from grpo.policy.update import TrainBatch
from grpo.rollout.collector import RolloutBatch
from grpo.rollout.types import SampleStatus


def rows_to_train(batch: RolloutBatch, algo: AlgoConfig) -> TrainBatch:
    """The rows to train on, with their group advantages and the rows of them the update computes. With
    algo.mask_truncated the truncated completions are masked after the advantages are taken, as TRL does:
    their rewards still move their groups' means and standard deviations."""
    samples = [s for g in batch.groups for s in g.samples]
    if not samples:
        return TrainBatch([], [], [], torch.zeros(0), [])
    advantages = group_advantages(batch.rewards(), algo.advantage_norm, algo.advantage_std,
                                  algo.advantage_eps).flatten()  # [N*G]
    masked = frozenset(i for i, s in enumerate(samples) if s.status is SampleStatus.TRUNCATED
                       ) if algo.mask_truncated else frozenset()
    return TrainBatch(
        prompt_ids=[s.prompt_ids for s in samples],
        completion_ids=[s.completion.token_ids for s in samples],
        old_logprobs=[s.completion.logprobs for s in samples],
        advantages=advantages,
        gradient_rows=rows_with_gradient(advantages, algo.kl_coef, masked),
        masked_rows=masked,
    )
