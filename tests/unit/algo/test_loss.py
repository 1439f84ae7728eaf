from __future__ import annotations

import math

import pytest
import torch

from grpo import metric_keys as keys
from grpo.algo.kl import kl_estimate
from grpo.algo.loss import BatchTotals, LossConfig, aggregate, importance_ratio, policy_loss, rows_with_gradient

# B=2, T=3: the second sequence has one padding token.
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
TOTALS = BatchTotals(num_tokens=5, num_sequences=2)
ADV = torch.tensor([1.0, -2.0])


def logprobs_with_ratios(ratios: list[list[float]], old: float = -1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs, old_logprobs) whose exp-difference is `ratios`; logprobs requires grad."""
    old_lp = torch.full((len(ratios), len(ratios[0])), old)
    lp = (old_lp + torch.tensor(ratios).log()).requires_grad_(True)
    return lp, old_lp


def single_token_loss(ratio: float, advantage: float, cfg: LossConfig) -> float:
    lp, old = logprobs_with_ratios([[ratio]])
    loss, _ = policy_loss(lp, old, torch.tensor([advantage]), torch.ones(1, 1), cfg, BatchTotals(1, 1))
    return loss.item()


# ---------------------------------------------------------------------------------------------
# ratio = 1: the loss is -advantage, aggregated


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        # token losses -A: row 0 -1,-1,-1 ; row 1 +2,+2 (padding ignored) -> sum 1
        ("token_mean", 1 / 5),  # sum / 5 tokens
        ("seq_mean", (-1 + 2) / 2),  # per-sequence means -1 and 2, over 2 sequences
        ("seq_sum_norm", 1 / (4 * 2)),  # sum / (max_new_tokens 4 * 2 sequences)
    ],
)
def test_ratio_one_gives_minus_advantage_aggregated(agg, expected):
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -4.0]], requires_grad=True)
    cfg = LossConfig(loss_agg=agg, max_new_tokens=4)
    loss, metrics = policy_loss(lp, lp.detach().clone(), ADV, MASK, cfg, TOTALS)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics[keys.RATIO_MEAN] == pytest.approx(1.0)
    assert metrics[keys.CLIP_FRAC] == 0.0
    assert metrics[keys.APPROX_KL_OLD] == 0.0
    assert metrics["tokens"] == 5


def test_padding_tokens_do_not_count():
    # a wild ratio (e^5) on the padding position must not change anything
    lp = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, 4.0]], requires_grad=True)
    old = torch.full((2, 3), -1.0)
    loss, metrics = policy_loss(lp, old, ADV, MASK, LossConfig(), TOTALS)
    assert loss.item() == pytest.approx(1 / 5, abs=1e-6)
    assert metrics[keys.RATIO_MEAN] == pytest.approx(1.0)
    assert metrics[keys.CLIP_FRAC] == 0.0


# ---------------------------------------------------------------------------------------------
# Clipping


def test_clip_low_with_negative_advantage_uses_the_clipped_value():
    # ratio 0.5, A = -1: unclipped -0.5, clipped clamp(0.5, 0.8, 1.2) * -1 = -0.8 -> min -0.8 -> loss 0.8
    assert single_token_loss(0.5, -1.0, LossConfig(clip_low=0.2)) == pytest.approx(0.8, abs=1e-6)
    # a wider clip_low (0.6 -> floor 0.4) no longer binds: loss = 0.5
    assert single_token_loss(0.5, -1.0, LossConfig(clip_low=0.6)) == pytest.approx(0.5, abs=1e-6)


def test_clip_low_with_positive_advantage_keeps_the_unclipped_value():
    # ratio 0.5, A = +1: min(0.5, 0.8) = 0.5 (pessimistic bound) -> loss -0.5
    assert single_token_loss(0.5, 1.0, LossConfig()) == pytest.approx(-0.5, abs=1e-6)


def test_clip_high_dapo_differs_from_clip_low():
    # ratio 1.5, A = +1: symmetric 0.2 -> min(1.5, 1.2) = 1.2; clip-higher 0.28 -> min(1.5, 1.28) = 1.28
    assert single_token_loss(1.5, 1.0, LossConfig(clip_low=0.2, clip_high=0.2)) == pytest.approx(-1.2, abs=1e-6)
    assert single_token_loss(1.5, 1.0, LossConfig(clip_low=0.2, clip_high=0.28)) == pytest.approx(-1.28, abs=1e-6)
    # ratio 1.25 is inside [0.8, 1.28] with clip-higher but clipped to 1.2 with 0.2
    assert single_token_loss(1.25, 1.0, LossConfig(clip_high=0.28)) == pytest.approx(-1.25, abs=1e-6)
    assert single_token_loss(1.25, 1.0, LossConfig(clip_high=0.2)) == pytest.approx(-1.2, abs=1e-6)
    # clip_high does not move the low bound: ratio 0.5, A=-1 still clips at 0.8
    assert single_token_loss(0.5, -1.0, LossConfig(clip_low=0.2, clip_high=0.28)) == pytest.approx(0.8, abs=1e-6)


def test_clip_metrics_on_a_hand_example():
    # row 0, A=+1: ratios 1.5 (clipped high), 1.1, 0.9 ; row 1, A=-1: ratios 0.5 (clipped low), 1.0, pad 5.0
    lp, old = logprobs_with_ratios([[1.5, 1.1, 0.9], [0.5, 1.0, 5.0]])
    loss, m = policy_loss(lp, old, torch.tensor([1.0, -1.0]), MASK, LossConfig(), TOTALS)
    # token losses: -1.2, -1.1, -0.9 | 0.8, 1.0 -> sum -1.4 / 5 tokens
    assert loss.item() == pytest.approx(-1.4 / 5, abs=1e-6)
    assert m[keys.CLIP_FRAC] == pytest.approx(2 / 5)
    assert m[keys.CLIP_LOW_FRAC] == pytest.approx(1 / 5)
    assert m[keys.CLIP_HIGH_FRAC] == pytest.approx(1 / 5)
    assert m[keys.RATIO_MEAN] == pytest.approx((1.5 + 1.1 + 0.9 + 0.5 + 1.0) / 5, abs=1e-6)
    logs = [math.log(r) for r in (1.5, 1.1, 0.9, 0.5, 1.0)]
    assert m[keys.APPROX_KL_OLD] == pytest.approx(sum(0.5 * x * x for x in logs) / 5, abs=1e-6)
    assert m["tokens"] == 5
    assert "kl" not in m


def test_clip_frac_counts_only_clips_that_bind():
    # Ratio 0.5 with A=+1 is outside [0.8, 1.2], but min(0.5*A, 0.8*A) keeps the unclipped term: the
    # token still passes gradient, so it is not counted. Ratio 1.5 with A=+1 binds at 1.2.
    lp, old = logprobs_with_ratios([[0.5, 1.0]])
    _, m = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), LossConfig(), BatchTotals(2, 1))
    assert m[keys.CLIP_FRAC] == 0.0 and m[keys.CLIP_LOW_FRAC] == 0.0 and m[keys.CLIP_HIGH_FRAC] == 0.0
    lp, old = logprobs_with_ratios([[1.5, 1.0]])
    _, m = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), LossConfig(), BatchTotals(2, 1))
    assert m[keys.CLIP_FRAC] == pytest.approx(0.5) and m[keys.CLIP_HIGH_FRAC] == pytest.approx(0.5)
    assert m[keys.CLIP_LOW_FRAC] == 0.0


# ---------------------------------------------------------------------------------------------
# Aggregation and micro-batches


def test_aggregate_modes_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]])
    # masked sum 1+2+3+4+5 = 15; per-sequence means 2 and 4.5
    assert aggregate(values, MASK, "token_mean", TOTALS, 1).item() == pytest.approx(15 / 5)
    assert aggregate(values, MASK, "seq_mean", TOTALS, 1).item() == pytest.approx((2 + 4.5) / 2)
    assert aggregate(values, MASK, "seq_sum_norm", TOTALS, 10).item() == pytest.approx(15 / (10 * 2))
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(values, MASK, "mean", TOTALS, 1)


BATCH_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # lengths 3,1,2,3
BATCH_ADV = torch.tensor([1.0, -1.0, 0.5, 2.0])
BATCH_TOTALS = BatchTotals(num_tokens=9, num_sequences=4)


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        # ratio 1 -> token loss -A: sequence sums -3, +1, -1, -6 = -9; sequence means -1, 1, -0.5, -2
        ("token_mean", -9 / 9),
        ("seq_mean", (-1 + 1 - 0.5 - 2) / 4),
        ("seq_sum_norm", -9 / (3 * 4)),  # max_new_tokens 3
    ],
)
def test_full_batch_values_by_hand(agg, expected):
    lp = torch.full((4, 3), -0.7, requires_grad=True)
    cfg = LossConfig(loss_agg=agg, max_new_tokens=3)
    loss, _ = policy_loss(lp, lp.detach().clone(), BATCH_ADV, BATCH_MASK, cfg, BATCH_TOTALS)
    assert loss.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("agg", ["token_mean", "seq_mean", "seq_sum_norm"])
def test_micro_batch_losses_with_batch_totals_sum_to_the_full_batch_loss(agg, level):
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 3, generator=gen) * 3
    lp = (old + torch.randn(4, 3, generator=gen) * 0.3).requires_grad_(True)  # some tokens (rows) clip
    cfg = LossConfig(loss_agg=agg, max_new_tokens=3, clip_high=0.28, ratio_level=level)
    full, _ = policy_loss(lp, old, BATCH_ADV, BATCH_MASK, cfg, BATCH_TOTALS)
    parts = [
        policy_loss(lp[s], old[s], BATCH_ADV[s], BATCH_MASK[s], cfg, BATCH_TOTALS)[0]
        for s in (slice(0, 2), slice(2, 4))
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), abs=1e-6)
    # and so do the gradients
    (g_full,) = torch.autograd.grad(full, lp)
    (g_parts,) = torch.autograd.grad(parts[0] + parts[1], lp)
    torch.testing.assert_close(g_parts, g_full)


def test_micro_batch_totals_matter_for_token_mean():
    # With each micro-batch's own totals, token_mean would weigh tokens unequally:
    # rows 0-1 (4 tokens) sum -2 -> -0.5; rows 2-3 (5 tokens) sum -7 -> -1.4; mean -0.95 != -1
    lp = torch.full((4, 3), -0.7)
    own = [
        policy_loss(lp[s], lp[s], BATCH_ADV[s], BATCH_MASK[s], LossConfig(), BatchTotals(n, 2))[0].item()
        for s, n in ((slice(0, 2), 4), (slice(2, 4), 5))
    ]
    assert own == pytest.approx([-0.5, -1.4], abs=1e-6)
    assert sum(own) / 2 != pytest.approx(-1.0, abs=1e-3)


# ---------------------------------------------------------------------------------------------
# Gradients


@pytest.mark.parametrize(
    ("agg", "expected_grad"),
    [
        # d/d logprob of -A * exp(lp - old) / N at ratio 1 = -A / N
        ("token_mean", [[-1 / 5, -1 / 5, -1 / 5], [2 / 5, 2 / 5, 0.0]]),  # N = 5 tokens
        ("seq_mean", [[-1 / 6, -1 / 6, -1 / 6], [2 / 4, 2 / 4, 0.0]]),  # N = length * 2 sequences
        ("seq_sum_norm", [[-1 / 8, -1 / 8, -1 / 8], [2 / 8, 2 / 8, 0.0]]),  # N = 4 max_new_tokens * 2
    ],
)
def test_gradient_of_an_unclipped_token_is_minus_advantage_over_normaliser(agg, expected_grad):
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -4.0]], requires_grad=True)
    loss, _ = policy_loss(lp, lp.detach().clone(), ADV, MASK, LossConfig(loss_agg=agg, max_new_tokens=4), TOTALS)
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor(expected_grad), atol=1e-6, rtol=0)


def test_binding_clip_has_zero_gradient_and_non_binding_clip_keeps_it():
    # A=-1: ratio 0.5 clips (grad 0), ratio 1.0 does not (grad -A * 1 / 2 = 0.5)
    lp, old = logprobs_with_ratios([[0.5, 1.0]])
    loss, _ = policy_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 2), LossConfig(), BatchTotals(2, 1))
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 0.5]]), atol=1e-6, rtol=0)
    # A=+1: ratio 0.5 is outside the range but the min keeps the unclipped term -> grad -ratio / 2 = -0.25
    lp, old = logprobs_with_ratios([[0.5, 1.0]])
    loss, _ = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), LossConfig(), BatchTotals(2, 1))
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-0.25, -0.5]]), atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------
# KL


def test_kl_k1_and_k3_by_hand():
    lp = torch.tensor([[-1.0, -2.0, -0.7]])
    ref = torch.tensor([[-2.0, -1.0, -0.7]])
    # k1 = lp - ref ; k3 = exp(ref - lp) - (ref - lp) - 1
    # token 0: ref - lp = -1 -> k1 = 1, k3 = e^-1 + 1 - 1 = 0.367879
    # token 1: ref - lp = +1 -> k1 = -1, k3 = e - 1 - 1 = 0.718282
    # token 2: equal -> 0, 0
    assert kl_estimate(lp, ref, "k1")[0].tolist() == pytest.approx([1.0, -1.0, 0.0], abs=1e-6)
    assert kl_estimate(lp, ref, "k3")[0].tolist() == pytest.approx([math.exp(-1), math.e - 2, 0.0], abs=1e-6)


def test_k3_is_non_negative_and_finite_while_k1_can_be_negative():
    gen = torch.Generator().manual_seed(1)
    lp = -torch.rand(8, 16, generator=gen) * 10
    ref = -torch.rand(8, 16, generator=gen) * 10
    ref[0, 0] = lp[0, 0] + 200.0  # far-off token: clamped, not inf
    k3 = kl_estimate(lp, ref, "k3")
    assert (k3 >= 0).all()
    assert torch.isfinite(k3).all()
    assert (kl_estimate(lp, ref, "k1") < 0).any()


def test_unknown_kl_estimator_raises():
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(torch.zeros(1, 1), torch.zeros(1, 1), "k2")


def test_kl_term_is_added_with_kl_coef():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.0]])
    k3_mean = (math.exp(-1) + math.e - 2) / 2  # 0.543081
    cfg = LossConfig(kl_coef=0.1, kl_estimator="k3")
    totals = BatchTotals(2, 1)
    loss, m = policy_loss(lp, lp.detach().clone(), torch.tensor([0.5]), torch.ones(1, 2), cfg, totals, ref)
    # ratio 1: policy term -0.5, plus 0.1 * mean k3
    assert loss.item() == pytest.approx(-0.5 + 0.1 * k3_mean, abs=1e-6)
    assert m[keys.KL] == pytest.approx(k3_mean, abs=1e-6)
    # k1: mean (1 + -1) / 2 = 0 -> only the policy term
    loss_k1, m_k1 = policy_loss(
        lp, lp.detach().clone(), torch.tensor([0.5]), torch.ones(1, 2), LossConfig(kl_coef=0.1, kl_estimator="k1"),
        totals, ref,
    )
    assert loss_k1.item() == pytest.approx(-0.5, abs=1e-6)
    assert m_k1[keys.KL] == pytest.approx(0.0, abs=1e-6)


def test_kl_coef_zero_ignores_the_reference():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, m = policy_loss(
        lp, lp.detach().clone(), torch.tensor([0.5]), torch.ones(1, 2), LossConfig(), BatchTotals(2, 1),
        torch.tensor([[-9.0, -9.0]]),
    )
    assert loss.item() == pytest.approx(-0.5, abs=1e-6)
    assert "kl" not in m


def test_kl_coef_without_reference_raises():
    lp = torch.zeros(1, 2, requires_grad=True)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(lp, lp.detach(), torch.ones(1), torch.ones(1, 2), LossConfig(kl_coef=0.05), BatchTotals(2, 1))


def test_the_rows_with_a_gradient_are_those_of_non_zero_advantage_and_all_under_a_kl_term():
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, 0.0])
    assert rows_with_gradient(advantages, kl_coef=0.0) == [0, 1, 2, 3, 4]
    assert rows_with_gradient(torch.zeros(6), kl_coef=0.0) == []
    assert rows_with_gradient(torch.zeros(6), kl_coef=0.1) == list(range(6))


# ---------------------------------------------------------------------------------------------
# ratio_level=sequence: GSPO (TRL's importance_sampling_level=sequence, examples/scripts/gspo.py)


def test_a_sequence_ratio_is_the_exp_of_its_tokens_mean_log_ratio_clipped_as_one():
    # Row 0's token ratios 2, 0.5, 1 average to a log-ratio of 0: ratio 1, nothing clips. Row 1's are 1.5 (its
    # padding token's 9 does not count): with advantage -2 the unclipped -3 is the min, a token loss of 3 each.
    lp, old = logprobs_with_ratios([[2.0, 0.5, 1.0], [1.5, 1.5, 9.0]])
    cfg = LossConfig(loss_agg="seq_mean", ratio_level="sequence")
    loss, metrics = policy_loss(lp, old, ADV, MASK, cfg, TOTALS)
    assert loss.item() == pytest.approx((-1.0 + 3.0) / 2)
    assert metrics[keys.RATIO_MEAN] == pytest.approx((3 * 1.0 + 2 * 1.5) / 5)
    token, _ = policy_loss(lp, old, ADV, MASK, LossConfig(loss_agg="seq_mean"), TOTALS)
    assert token.item() == pytest.approx((-(1.2 + 0.5 + 1.0) / 3 + 3.0) / 2)  # per token, 2 and 0.5 clip apart


def trl_gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high):
    """TRL 1.16's GRPOTrainer._compute_loss with importance_sampling_level="sequence", loss_type="grpo", beta=0,
    written here from its formula: one log-weight per sequence, clipped, each sequence's mean, then the mean."""
    log_ratio = logprobs - old_logprobs
    log_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_weights)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages.unsqueeze(1), coef_2 * advantages.unsqueeze(1))
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def test_sequence_ratios_give_trl_s_gspo_loss_and_gradient():
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 9, generator=generator) * 3
    new = (old + torch.randn(6, 9, generator=generator) * 3e-3).requires_grad_(True)
    mask = (torch.arange(9) < torch.tensor([9, 7, 3, 8, 1, 5])[:, None]).float()
    advantages = torch.randn(6, generator=generator)
    ours, metrics = policy_loss(new, old, advantages, mask, LossConfig(3e-4, 4e-4, "seq_mean",
                                                                       ratio_level="sequence"),
                                BatchTotals.counting([9, 7, 3, 8, 1, 5]))
    assert 0 < metrics[keys.CLIP_FRAC] < 1  # some sequences clip, some do not
    (grad,) = torch.autograd.grad(ours, new)
    theirs = trl_gspo_loss(new, old, advantages, mask, 3e-4, 4e-4)
    (trl_grad,) = torch.autograd.grad(theirs, new)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-7)
    assert torch.allclose(grad, trl_grad, atol=1e-7)
    assert (grad * (1 - mask)).abs().sum() == 0  # no gradient reaches padding

# GSPO: one ratio per sequence (ratio_level=sequence)

AGGREGATIONS = ["token_mean", "seq_mean", "seq_sum_norm"]


def gspo_reference(lp, old, adv, mask, cfg: LossConfig, totals: BatchTotals, weights=None, ref=None):
    """GSPO's loss written row by row from the paper's formula: s_i = exp(mean_t (lp - old)) over row i's
    completion tokens; each of its tokens' term is -min(s_i A_i, clip(s_i) A_i), times its importance weight,
    plus the KL penalty; then the aggregation."""
    rows = []
    for i in range(len(lp)):
        n = int(mask[i].sum())
        s = torch.exp(sum(lp[i, t] - old[i, t] for t in range(n)) / n)
        surrogate = -torch.minimum(s * adv[i], s.clamp(1 - cfg.clip_low, 1 + cfg.clip_high) * adv[i])
        terms = [surrogate * (weights[i, t] if weights is not None else 1.0) for t in range(n)]
        if cfg.kl_coef > 0:
            terms = [term + cfg.kl_coef * kl_estimate(lp[i, t], ref[i, t], cfg.kl_estimator)
                     for t, term in enumerate(terms)]
        rows.append(terms)
    if cfg.loss_agg == "token_mean":
        return sum(sum(r) for r in rows) / totals.num_tokens
    if cfg.loss_agg == "seq_mean":
        return sum(sum(r) / len(r) for r in rows) / totals.num_sequences
    return sum(sum(r) for r in rows) / (cfg.max_new_tokens * totals.num_sequences)


def gspo_batch(seed: int, spread: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs with grad, old) [4, 3] for BATCH_MASK's rows, `spread` nats apart per token."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 3, generator=gen, dtype=torch.float64) * 3
    lp = (old + torch.randn(4, 3, generator=gen, dtype=torch.float64) * spread).requires_grad_(True)
    return lp, old


def test_the_sequence_ratio_is_the_exp_of_the_rows_mean_log_ratio_on_each_of_its_tokens():
    lp, old = logprobs_with_ratios([[1.5, 1.1, 0.9], [0.5, 1.0, 5.0]])  # row 1's last token is padding
    ratio = importance_ratio(lp - old, MASK, "sequence")
    row0, row1 = (1.5 * 1.1 * 0.9) ** (1 / 3), 0.5 ** (1 / 2)  # geometric means; the padding's 5.0 left out
    assert ratio[0].tolist() == pytest.approx([row0] * 3, abs=1e-6)
    assert ratio[1, :2].tolist() == pytest.approx([row1] * 2, abs=1e-6)
    assert importance_ratio(lp - old, MASK, "token")[0].tolist() == pytest.approx([1.5, 1.1, 0.9], abs=1e-6)
    with pytest.raises(ValueError, match="unknown ratio level 'seq'; valid: token, sequence"):
        importance_ratio(lp - old, MASK, "seq")


def test_the_clip_binds_per_row_and_the_clip_measures_count_the_tokens_of_clipped_rows():
    # Token ratios 1.5 would clip at token level; row 0's s = 1.141 is inside [0.8, 1.2] and passes gradient on
    # every token. Row 1 (A=-1): s = 0.707 < 0.8 binds for both its tokens, even the one whose own ratio is 1.
    lp, old = logprobs_with_ratios([[1.5, 1.1, 0.9], [0.5, 1.0, 5.0]])
    cfg = LossConfig(ratio_level="sequence")
    loss, m = policy_loss(lp, old, torch.tensor([1.0, -1.0]), MASK, cfg, TOTALS)
    s0, s1 = (1.5 * 1.1 * 0.9) ** (1 / 3), 0.5 ** 0.5
    assert loss.item() == pytest.approx((-3 * s0 + 2 * 0.8) / 5, abs=1e-6)  # token_mean
    assert m[keys.CLIP_FRAC] == pytest.approx(2 / 5) and m[keys.CLIP_LOW_FRAC] == pytest.approx(2 / 5)
    assert m[keys.CLIP_HIGH_FRAC] == 0.0
    assert m[keys.RATIO_MEAN] == pytest.approx((3 * s0 + 2 * s1) / 5, abs=1e-6)
    logs = [math.log(r) for r in (1.5, 1.1, 0.9, 0.5, 1.0)]  # per token, at either level
    assert m[keys.APPROX_KL_OLD] == pytest.approx(sum(0.5 * x * x for x in logs) / 5, abs=1e-6)
    (grad,) = torch.autograd.grad(loss, lp)
    # token_mean: loss = (3 (-s0) + ...) / 5 and ds0/dlp_t = s0 / 3: every token of row 0 gets -s0 / 5
    torch.testing.assert_close(grad, torch.tensor([[-s0 / 5] * 3, [0.0] * 3]), atol=1e-6, rtol=0)
    # a clip of 0.1 lets row 0 bind above (s0 > 1.1): then no token of the batch passes gradient
    loss, m = policy_loss(lp, old, torch.tensor([1.0, -1.0]), MASK, LossConfig(0.1, 0.1, ratio_level="sequence"),
                          TOTALS)
    assert m[keys.CLIP_HIGH_FRAC] == pytest.approx(3 / 5) and m[keys.CLIP_FRAC] == pytest.approx(1.0)
    assert torch.autograd.grad(loss, lp)[0].abs().sum() == 0


@pytest.mark.parametrize("weighted", [False, True], ids=["on-policy", "importance-weights"])
@pytest.mark.parametrize(("clip_low", "clip_high"), [(3e-4, 4e-4), (0.1, 0.1)], ids=["gspo-clip", "wide-clip"])
@pytest.mark.parametrize("kl_coef", [0.0, 0.04])
@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_the_sequence_level_loss_and_gradient_are_the_hand_written_formula(agg, kl_coef, clip_low, clip_high,
                                                                           weighted):
    lp, old = gspo_batch(seed=9)  # row ratios 0.88, 0.96, 1.17, 1.05 for advantages 1, -1, 0.5, 2
    gen = torch.Generator().manual_seed(4)
    weights = (0.5 + torch.rand(4, 3, generator=gen, dtype=torch.float64)) if weighted else None
    ref = old - 0.2
    cfg = LossConfig(clip_low, clip_high, agg, kl_coef, "k3", 3, "sequence")
    loss, m = policy_loss(lp, old, BATCH_ADV.double(), BATCH_MASK.double(), cfg, BATCH_TOTALS, ref, weights)
    expected = gspo_reference(lp, old, BATCH_ADV, BATCH_MASK, cfg, BATCH_TOTALS, weights, ref)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    torch.testing.assert_close(torch.autograd.grad(loss, lp)[0], torch.autograd.grad(expected, lp)[0],
                               atol=1e-12, rtol=0)
    assert 0 < m[keys.CLIP_FRAC] < 1  # some rows bind, some pass gradient: both branches are compared


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_the_sequence_level_gradient_passes_a_numerical_check(agg):
    # Row ratios 1.012, 1.090, 0.919, 1.014 for advantages 1, -1, 0.5, 2: rows 0 and 3 bind above 1.01, rows 1
    # and 2 keep the unclipped term. gradcheck perturbs each log-prob by 1e-6, and every ratio is at least 1e-3
    # from the clip's edges 0.95 and 1.01, so neither the min nor the clamp switches inside the difference.
    lp, old = gspo_batch(seed=5, spread=0.15)
    cfg = LossConfig(0.05, 0.01, agg, 0.04, "k3", 3, "sequence")
    ratios = importance_ratio(lp.detach() - old, BATCH_MASK.double(), "sequence")[:, 0]
    assert all(abs(r - 0.95) > 1e-3 and abs(r - 1.01) > 1e-3 for r in ratios.tolist()), ratios
    _, m = policy_loss(lp, old, BATCH_ADV.double(), BATCH_MASK.double(), cfg, BATCH_TOTALS, old - 0.2)
    assert m[keys.CLIP_HIGH_FRAC] == pytest.approx(6 / 9) and m[keys.CLIP_LOW_FRAC] == 0.0
    assert torch.autograd.gradcheck(lambda x: policy_loss(x, old, BATCH_ADV.double(), BATCH_MASK.double(), cfg,
                                                          BATCH_TOTALS, old - 0.2)[0], (lp,))


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_at_ratio_one_sequence_and_token_level_give_the_same_loss_and_gradient(agg):
    """On policy (one update per batch, ratio exactly 1) GSPO's gradient is GRPO's: ds_i/dlp_t = s_i / |y_i| is
    the token ratio's derivative divided by the length the row's loss multiplies by; it differs once the
    policy moves (algo.updates_per_batch > 1, rollout.max_staleness > 0)."""
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -4.0]], requires_grad=True)
    results = []
    for level in ("token", "sequence"):
        loss, _ = policy_loss(lp, lp.detach(), ADV, MASK, LossConfig(loss_agg=agg, max_new_tokens=4,
                                                                     ratio_level=level), TOTALS)
        results.append((loss.item(), torch.autograd.grad(loss, lp)[0]))
    assert results[0][0] == pytest.approx(results[1][0], abs=1e-7)
    torch.testing.assert_close(results[0][1], results[1][1], atol=1e-7, rtol=0)


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_at_sequence_level_a_zero_advantage_row_adds_nothing_so_it_need_not_be_computed(agg):
    """rows_with_gradient leaves a row of advantage 0 out of the update: its term is 0 and so is its gradient,
    and no other row's ratio reads its tokens."""
    lp, old = gspo_batch(seed=6)
    adv = torch.tensor([1.0, 0.0, -0.5, 2.0], dtype=torch.float64)
    cfg = LossConfig(0.1, 0.1, agg, max_new_tokens=3, ratio_level="sequence")
    full, _ = policy_loss(lp, old, adv, BATCH_MASK.double(), cfg, BATCH_TOTALS)
    (full_grad,) = torch.autograd.grad(full, lp)
    kept = rows_with_gradient(adv, kl_coef=0.0)
    assert kept == [0, 2, 3]
    part, _ = policy_loss(lp[kept], old[kept], adv[kept], BATCH_MASK.double()[kept], cfg, BATCH_TOTALS)
    (part_grad,) = torch.autograd.grad(part, lp)
    assert part.item() == pytest.approx(full.item(), abs=1e-12)
    torch.testing.assert_close(part_grad, full_grad, atol=1e-12, rtol=0)
    assert torch.equal(full_grad[1], torch.zeros(3, dtype=torch.float64))


def test_at_sequence_level_under_seq_mean_a_rows_importance_weight_is_the_mean_of_its_tokens_weights():
    """The decoupled objective's weights stay per token (grpo.algo.offpolicy), as TRL's loss applies its own: a
    row's surrogate is one value, so seq_mean weighs it by the mean of its tokens' truncated weights."""
    lp, old = gspo_batch(seed=7)
    weights = torch.tensor([[0.5, 1.0, 3.0], [2.0, 9.0, 9.0], [1.0, 0.2, 9.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    cfg = LossConfig(loss_agg="seq_mean", ratio_level="sequence")
    weighted, _ = policy_loss(lp, old, BATCH_ADV.double(), BATCH_MASK.double(), cfg, BATCH_TOTALS,
                              importance_weights=weights)
    row_weight = (weights * BATCH_MASK).sum(1) / BATCH_MASK.sum(1)  # 1.5, 2, 0.6, 1 (padding's 9s left out)
    assert row_weight.tolist() == pytest.approx([1.5, 2.0, 0.6, 1.0])
    per_row = [policy_loss(lp[i:i + 1], old[i:i + 1], BATCH_ADV.double()[i:i + 1], BATCH_MASK.double()[i:i + 1],
                           cfg, BATCH_TOTALS)[0] for i in range(4)]
    assert weighted.item() == pytest.approx(sum(w * r for w, r in zip(row_weight.tolist(), per_row)).item(),
                                            abs=1e-12)
