from __future__ import annotations

import math

import pytest
import torch

from grpo import metric_keys as keys
from grpo.algo.loss import BatchTotals, LossConfig, policy_loss
from grpo.algo.offpolicy import importance_weights


def test_weights_are_proximal_over_behaviour_truncated_at_the_cap():
    behaviour = torch.tensor([-1.0, -2.0, -3.0, -0.5])
    proximal = behaviour + torch.tensor([0.0, math.log(2.0), math.log(8.0), math.log(0.5)])
    weights, m = importance_weights(proximal, behaviour, cap=5.0)
    assert weights.tolist() == pytest.approx([1.0, 2.0, 5.0, 0.5])
    assert m.importance_weight_mean == pytest.approx((1 + 2 + 5 + 0.5) / 4)
    assert m.importance_weight_max == pytest.approx(8.0)  # before the cap
    assert m.importance_capped_frac == 0.25
    # k3: r - 1 - log r per token, averaged
    k3 = [r - 1 - math.log(r) for r in (1.0, 2.0, 8.0, 0.5)]
    assert m.kl == pytest.approx(sum(k3) / 4)
    assert m.metrics() == {"offpolicy/importance_weight_mean": m.importance_weight_mean,
                           "offpolicy/importance_weight_max": m.importance_weight_max,
                           "offpolicy/importance_capped_frac": 0.25, "offpolicy/kl": m.kl}


def test_on_policy_the_weights_are_one_and_the_kl_zero():
    lp = torch.tensor([-0.3, -1.7, -4.0])
    weights, m = importance_weights(lp, lp.clone(), cap=5.0)
    assert weights.tolist() == [1.0, 1.0, 1.0]
    assert m.kl == 0.0 and m.importance_capped_frac == 0.0


def test_no_tokens_no_metrics():
    weights, m = importance_weights(torch.zeros(0), torch.zeros(0), cap=5.0)
    assert weights.shape == (0,) and m is None


def test_the_loss_weights_each_tokens_surrogate_and_its_gradient():
    """Ratio and clip against the proximal policy, times the weight: a weight of 2 doubles a token's
    loss and gradient, 0 removes them, and all ones is the on-policy loss exactly."""
    cfg, totals = LossConfig(), BatchTotals(num_tokens=3, num_sequences=1)
    proximal = torch.tensor([[-1.0, -2.0, -0.5]])
    logprobs = (proximal + torch.tensor([[0.1, -0.1, 0.5]])).requires_grad_(True)  # last token clipped (ratio 1.65)
    mask, adv = torch.ones(1, 3), torch.tensor([1.0])
    plain, _ = policy_loss(logprobs, proximal, adv, mask, cfg, totals)
    ones, _ = policy_loss(logprobs, proximal, adv, mask, cfg, totals, importance_weights=torch.ones(1, 3))
    assert ones.item() == plain.item()
    weighted, metrics = policy_loss(logprobs, proximal, adv, mask, cfg, totals,
                                    importance_weights=torch.tensor([[2.0, 0.0, 1.0]]))
    (grad,) = torch.autograd.grad(weighted, logprobs)
    ratio = (logprobs - proximal).exp().detach()
    expected = -(2 * ratio[0, 0] + 1.2) / 3  # token 2 weighs nothing; token 3 is clipped at 1 + 0.2
    assert weighted.item() == pytest.approx(expected.item())
    assert grad[0].tolist() == pytest.approx([-2 * ratio[0, 0].item() / 3, 0.0, 0.0])
    assert metrics[keys.CLIP_FRAC] == pytest.approx(1 / 3)  # clipping is against the proximal policy
