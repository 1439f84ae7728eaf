"""The step's advantages phase (grpo.train.advantages): the kept groups' rows with their advantages."""

import math

import pytest
import torch

from grpo.config import AlgoConfig
from grpo.rollout.collector import Group, RolloutBatch, Sample
from grpo.rollout.engines import Completion, SampleStatus
from grpo.tasks import Problem
from grpo.train.advantages import rows_to_train

OK = SampleStatus.OK


def group(*rewards: float, truncated: tuple[int, ...] = ()) -> Group:
    """A group of these rewards; the samples at `truncated` ran to rollout.max_new_tokens."""
    problem = Problem("p", "1 + 1", "2")
    statuses = [SampleStatus.TRUNCATED if i in truncated else OK for i in range(len(rewards))]
    return Group(problem, [Sample(problem, [1], Completion([5], [-0.1], "x", "length" if s is not OK else "stop", s),
                                  s, reward=r) for r, s in zip(rewards, statuses)])


def test_the_rows_advantages_follow_algo_s_std_and_epsilon():
    batch = RolloutBatch(groups=[group(1.0, 0.0)], next_data_index=1)
    assert rows_to_train(batch, AlgoConfig()).advantages.tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    trl = rows_to_train(batch, AlgoConfig(advantage_std="sample", advantage_eps=1e-4)).advantages
    assert trl.tolist() == pytest.approx([0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4)], abs=1e-6)


def test_the_rows_with_a_gradient_are_named_once_here_for_the_update():
    batch = RolloutBatch(groups=[group(1.0, 1.0), group(1.0, 0.0)], next_data_index=2)  # the first group agreed
    assert rows_to_train(batch, AlgoConfig()).gradient_rows == [2, 3]
    assert rows_to_train(batch, AlgoConfig(kl_coef=0.1)).gradient_rows == [0, 1, 2, 3]  # a KL term reaches every row
    empty = rows_to_train(RolloutBatch(groups=[], next_data_index=0), AlgoConfig())
    assert len(empty) == 0 and empty.gradient_rows == []


def test_truncated_rows_are_masked_after_their_rewards_made_the_advantages():
    batch = RolloutBatch(groups=[group(1.0, 0.0, 0.0, truncated=(0,)), group(1.0, 0.0, 1.0, truncated=(1,))],
                         next_data_index=2)
    masked, unmasked = rows_to_train(batch, AlgoConfig(mask_truncated=True)), rows_to_train(batch, AlgoConfig())
    assert masked.masked_rows == {0, 4} and unmasked.masked_rows == frozenset()
    # The truncated 1.0 still lifts its group's mean: the others' advantages are those of [1, 0, 0], not of [0, 0].
    assert torch.equal(masked.advantages, unmasked.advantages) and masked.advantages[1] < 0
    assert masked.gradient_rows == [1, 2, 3, 5] and unmasked.gradient_rows == list(range(6))
    assert rows_to_train(batch, AlgoConfig(mask_truncated=True, kl_coef=0.1)).gradient_rows == [1, 2, 3, 5]
    assert masked.loss_totals.num_sequences == 4 and unmasked.loss_totals.num_sequences == 6
