from __future__ import annotations

import math

import pytest
import torch

from grpo.algo.advantages import group_advantages, zero_variance_groups


def assert_values(actual: torch.Tensor, expected: list, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_group_norm_two_right_two_wrong_is_plus_minus_one():
    # mean 0.5, population std 0.5 -> (1 - 0.5) / 0.5 = 1, (0 - 0.5) / 0.5 = -1
    adv = group_advantages(torch.tensor([[1.0, 1.0, 0.0, 0.0]]), "group")
    assert adv.shape == (1, 4)
    assert_values(adv, [[1.0, 1.0, -1.0, -1.0]])


def test_group_norm_group_of_three_by_hand():
    # mean 1/3; centred [-1/3, -1/3, 2/3]; population var (1/9 + 1/9 + 4/9) / 3 = 2/9, std = sqrt(2)/3
    # -> [-1/sqrt(2), -1/sqrt(2), sqrt(2)]  (the sample std sqrt(1/3) would give [-0.577, -0.577, 1.155])
    adv = group_advantages(torch.tensor([[0.0, 0.0, 1.0]]), "group")
    s = 1 / math.sqrt(2)
    assert adv[0].tolist() == pytest.approx([-s, -s, math.sqrt(2)], abs=1e-5)


def test_group_norm_each_group_uses_its_own_statistics():
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0], [2.0, 2.0, 0.0, 0.0]])
    adv = group_advantages(rewards, "group")
    # second group: mean 1, std 1 -> also [1, 1, -1, -1] (scale-free)
    assert_values(adv, [[1.0, 1.0, -1.0, -1.0], [1.0, 1.0, -1.0, -1.0]])


def test_none_is_reward_minus_group_mean():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 1.5, 1.0, 1.0]])
    adv = group_advantages(rewards, "none")
    # means 0.25 and 1.0
    assert_values(adv, [[0.75, -0.25, -0.25, -0.25], [-0.5, 0.5, 0.0, 0.0]], atol=1e-6)


def test_batch_norm_divides_by_the_std_of_the_whole_batch():
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    adv = group_advantages(rewards, "batch")
    # group means 0.5 and 0.25 -> centred [.5, .5, -.5, -.5] and [.75, -.25, -.25, -.25]
    # batch: 3 ones in 8 -> mean 3/8, population var 3/8 * 5/8 = 15/64, std = sqrt(15)/8 ~ 0.48412
    std = math.sqrt(15) / 8
    expected = [[0.5 / std, 0.5 / std, -0.5 / std, -0.5 / std], [0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std]]
    assert_values(adv, expected)
    # differs from per-group normalisation: group 2's own std is sqrt(3)/4 ~ 0.433
    assert adv[1, 0].item() != pytest.approx(group_advantages(rewards, "group")[1, 0].item(), abs=1e-3)


def test_zero_variance_group_gets_zero_advantage_and_is_flagged():
    rewards = torch.tensor([[0.5, 0.5, 0.5, 0.5], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    adv = group_advantages(rewards, "group")
    assert torch.isfinite(adv).all()
    assert adv[0].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert adv[2].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert_values(adv[1], [1.0, -1.0, 1.0, -1.0])
    assert zero_variance_groups(rewards).tolist() == [True, False, True]


@pytest.mark.parametrize("shape", [(4,), (2, 2, 2), ()])
def test_rewards_must_be_two_dimensional(shape):
    with pytest.raises(ValueError, match="num_groups, group_size"):
        group_advantages(torch.zeros(shape), "group")


def test_unknown_norm_raises_and_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown advantage norm 'std'.*group, batch, none"):
        group_advantages(torch.tensor([[1.0, 0.0]]), "std")


def trl_advantages(rewards: torch.Tensor, norm: str) -> torch.Tensor:
    """TRL 1.16's `_generate_and_score_completions`: centred by the group mean, divided by the sample (Bessel's)
    standard deviation of the group (`scale_rewards=group`) or of the batch (`batch`), plus 1e-4."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True) if norm == "group" else rewards.std()
    return centered / (std + 1e-4)


@pytest.mark.parametrize("norm", ["group", "batch"])
@pytest.mark.parametrize("group_size", [2, 8])
def test_sample_std_with_trls_epsilon_gives_trls_advantages(norm, group_size):
    rewards = torch.rand(3, group_size, generator=torch.Generator().manual_seed(group_size))
    rewards[0, : group_size // 2] = 1.0  # a group of a few distinct values, as a correctness reward gives
    rewards[0, group_size // 2:] = 0.0
    ours = group_advantages(rewards, norm, std="sample", eps=1e-4)
    torch.testing.assert_close(ours, trl_advantages(rewards, norm), atol=1e-6, rtol=0)
    # The default is unchanged: the population std, +1e-6, sqrt(G / (G - 1)) larger than TRL's (1.41x at G=2).
    population = group_advantages(rewards, norm)
    std = rewards.std(dim=1, unbiased=False, keepdim=True) if norm == "group" else rewards.std(unbiased=False)
    torch.testing.assert_close(population, (rewards - rewards.mean(dim=1, keepdim=True)) / (std + 1e-6))
    if norm == "group":
        assert population[0, 0].item() == pytest.approx(1.0, abs=1e-5)
        assert ours[0, 0].item() == pytest.approx(math.sqrt((group_size - 1) / group_size), abs=1e-3)


def test_unknown_std_raises_and_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown advantage std 'bessel'.*population, sample"):
        group_advantages(torch.tensor([[1.0, 0.0]]), "group", std="bessel")
