"""The step's advantages phase (grpo.train.advantages): the kept groups' rows with their advantages."""

import math

import pytest

from grpo.config import AlgoConfig
from grpo.rollout.collector import Group, RolloutBatch, Sample
from grpo.rollout.engines import Completion, SampleStatus
from grpo.tasks import Problem
from grpo.train.advantages import rows_to_train

OK = SampleStatus.OK


def group(*rewards: float) -> Group:
    problem = Problem("p", "1 + 1", "2")
    return Group(problem, [Sample(problem, [1], Completion([5], [-0.1], "x", "stop", OK), OK, reward=r)
                           for r in rewards])


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
