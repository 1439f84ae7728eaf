"""Rows left out of the loss (truncated completions under algo.mask_truncated): no gradient, and out of the
normaliser, so that the loss is the one of the batch without them, in every aggregation, at either ratio level
(GSPO's sequence ratio reads only its own row's tokens)."""

from __future__ import annotations

import math

import pytest
import torch

from grpo.algo.loss import BatchTotals, LossConfig, policy_loss, rows_with_gradient

AGGREGATIONS = ["token_mean", "seq_mean", "seq_sum_norm"]
LEVELS = ["token", "sequence"]
# B=4, T=3, lengths 3, 1, 2, 3; rows 1 and 3 are truncated, the others ended.
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
LENGTHS = [3, 1, 2, 3]
MASKED = frozenset({1, 3})
KEPT = [0, 2]
ADV = torch.tensor([1.0, -1.0, 0.5, 2.0])


def off_policy_logprobs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logprobs with grad, old, reference) [4, 3], far enough apart that some tokens clip."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(4, 3, generator=gen) * 3
    lp = (old + torch.randn(4, 3, generator=gen) * 0.3).requires_grad_(True)
    return lp, old, old - 0.1


def loss_mask(mask: torch.Tensor, masked: frozenset[int]) -> torch.Tensor:
    """What TRL does to a masked row: its completion mask zeroed."""
    keep = torch.tensor([row not in masked for row in range(len(mask))], dtype=mask.dtype)
    return mask * keep[:, None]


def test_the_totals_count_only_the_rows_in_the_loss():
    assert BatchTotals.counting(LENGTHS) == BatchTotals(num_tokens=9, num_sequences=4)
    assert BatchTotals.counting(LENGTHS, MASKED) == BatchTotals(num_tokens=5, num_sequences=2)
    assert BatchTotals.counting(LENGTHS, frozenset(range(4))) == BatchTotals(num_tokens=0, num_sequences=0)


def test_a_masked_row_is_never_computed_not_even_under_a_kl_term():
    assert rows_with_gradient(ADV, kl_coef=0.0, masked=MASKED) == KEPT
    assert rows_with_gradient(ADV, kl_coef=0.1, masked=MASKED) == KEPT
    assert rows_with_gradient(torch.tensor([0.0, 1.0, 0.0, -1.0]), kl_coef=0.0, masked=MASKED) == []
    assert rows_with_gradient(ADV, kl_coef=0.0, masked=frozenset(range(4))) == []


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_masked_rows_get_no_gradient_and_the_others_the_gradient_of_the_batch_without_them(agg, kl_coef, level):
    lp, old, ref = off_policy_logprobs()
    cfg = LossConfig(loss_agg=agg, max_new_tokens=3, clip_high=0.28, kl_coef=kl_coef, ratio_level=level)
    masked_loss, _ = policy_loss(lp, old, ADV, loss_mask(MASK, MASKED), cfg, BatchTotals.counting(LENGTHS, MASKED),
                                 ref)
    (grad,) = torch.autograd.grad(masked_loss, lp)
    assert torch.equal(grad[sorted(MASKED)], torch.zeros(2, 3))  # exactly zero, not small

    kept_lp = lp.detach()[KEPT].requires_grad_(True)
    kept_loss, _ = policy_loss(kept_lp, old[KEPT], ADV[KEPT], MASK[KEPT], cfg,
                               BatchTotals.counting([LENGTHS[r] for r in KEPT]), ref[KEPT])
    (kept_grad,) = torch.autograd.grad(kept_loss, kept_lp)
    assert masked_loss.item() == pytest.approx(kept_loss.item(), abs=3e-7)  # float32 sums of other lengths: ulps
    torch.testing.assert_close(grad[KEPT], kept_grad, rtol=0, atol=1e-7)
    assert kept_grad.abs().sum() > 0  # the kept rows do learn


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_the_normaliser_leaves_the_masked_rows_out_as_the_aggregation_counts(agg):
    # ratio 1: token loss -A. Kept rows 0 (3 tokens, A 1) and 2 (2 tokens, A 0.5): sums -3 and -1.
    expected = {"token_mean": -4 / 5, "seq_mean": (-1 - 0.5) / 2, "seq_sum_norm": -4 / (3 * 2)}[agg]
    lp = torch.full((4, 3), -0.7, requires_grad=True)
    loss, _ = policy_loss(lp, lp.detach(), ADV, loss_mask(MASK, MASKED), LossConfig(loss_agg=agg, max_new_tokens=3),
                          BatchTotals.counting(LENGTHS, MASKED))
    assert loss.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_micro_batches_of_the_masked_batch_add_up_to_its_loss_and_gradient(agg, level):
    lp, old, _ = off_policy_logprobs(seed=1)
    cfg = LossConfig(loss_agg=agg, max_new_tokens=3, clip_high=0.28, ratio_level=level)
    mask, totals = loss_mask(MASK, MASKED), BatchTotals.counting(LENGTHS, MASKED)
    full, _ = policy_loss(lp, old, ADV, mask, cfg, totals)
    # rows 0-1 (one masked) and rows 2-3 (one masked): each normalised by the whole batch's kept totals
    parts = [policy_loss(lp[s], old[s], ADV[s], mask[s], cfg, totals)[0] for s in (slice(0, 2), slice(2, 4))]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), abs=1e-7)
    torch.testing.assert_close(torch.autograd.grad(parts[0] + parts[1], lp)[0], torch.autograd.grad(full, lp)[0])


@pytest.mark.parametrize("totals", [BatchTotals(0, 0), BatchTotals.counting(LENGTHS, MASKED)],
                         ids=["a-step-all-masked", "a-micro-batch-all-masked"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_every_row_masked_gives_zero_loss_and_zero_gradient_not_nan(agg, totals, level):
    lp, old, ref = off_policy_logprobs(seed=2)
    cfg = LossConfig(loss_agg=agg, max_new_tokens=3, kl_coef=0.05, ratio_level=level)
    rows = sorted(MASKED)
    loss, metrics = policy_loss(lp[rows], old[rows], ADV[rows], torch.zeros(2, 3), cfg, totals, ref[rows])
    (grad,) = torch.autograd.grad(loss, lp)
    assert loss.item() == 0.0 and torch.equal(grad, torch.zeros(4, 3))
    assert metrics["tokens"] == 1  # clamped: the measures' means stay finite
    assert all(math.isfinite(value) for value in metrics.values())
