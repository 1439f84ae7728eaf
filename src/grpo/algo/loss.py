"""The GRPO policy loss: a pure function of log-probs, advantages and masks, returning (loss, metrics)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from grpo import metric_keys as keys
from grpo.algo.kl import kl_estimate


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.2
    loss_agg: str = "token_mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    max_new_tokens: int = 1  # the Dr.GRPO constant normaliser
    ratio_level: str = "token"  # sequence: GSPO's one ratio per completion (`importance_ratio`)


@dataclass(frozen=True)
class BatchTotals:
    """Sizes of the whole optimizer batch, so micro-batch losses add up to the batch loss."""

    num_tokens: int
    num_sequences: int

    @classmethod
    def counting(cls, lengths: Sequence[int], masked: Collection[int] = ()) -> BatchTotals:
        """lengths [B] (completion tokens per row) -> the totals the loss is normalised over: every row but the
        `masked` ones (truncated completions under algo.mask_truncated). A masked row is out of the
        normaliser as it is out of the gradient, so the loss is that of the batch without it, in every
        aggregation: its tokens leave token_mean's count, the row seq_mean's and seq_sum_norm's."""
        kept = [n for row, n in enumerate(lengths) if row not in masked]
        return cls(num_tokens=sum(kept), num_sequences=len(kept))


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, totals: BatchTotals, max_new_tokens: int) -> torch.Tensor:
    """values, mask [B, T] -> this micro-batch's share of the batch-level aggregate (a scalar).

    token_mean: sum over tokens / tokens in the batch (every token weighs the same, DAPO).
    seq_mean: mean over each sequence's tokens, then / sequences in the batch (GRPO paper).
    seq_sum_norm: sum over tokens / (max_new_tokens * sequences in the batch) (Dr.GRPO).
    """
    masked = values * mask
    if mode == "token_mean":
        return masked.sum() / max(totals.num_tokens, 1)
    if mode == "seq_mean":
        per_sequence = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [B]
        return per_sequence.sum() / max(totals.num_sequences, 1)
    if mode == "seq_sum_norm":
        return masked.sum() / (max_new_tokens * max(totals.num_sequences, 1))
    raise ValueError(f"unknown loss aggregation {mode!r}; valid: token_mean, seq_mean, seq_sum_norm")


def measure_names(cfg: LossConfig) -> tuple[str, ...]:
    """The measures `policy_loss` returns (besides its token count), by their metrics-line keys: each a mean
    over the tokens it saw."""
    return (keys.CLIP_FRAC, keys.CLIP_LOW_FRAC, keys.CLIP_HIGH_FRAC, keys.RATIO_MEAN, keys.APPROX_KL_OLD) + (
        (keys.KL,) if cfg.kl_coef > 0 else ())


def rows_with_gradient(advantages: torch.Tensor, kl_coef: float, masked: Collection[int] = ()) -> list[int]:
    """advantages [B] -> the rows the update must compute: all of them under a KL term, else those of non-zero
    advantage; never a `masked` row (left out of the loss: `BatchTotals.counting`). A row of advantage 0 adds
    exactly 0 to the clipped surrogate and to its gradient, whatever its log-probs and importance weight,
    and the loss is normalised over the whole batch's tokens and rows (`BatchTotals`): leaving it out
    changes neither, at either ratio level (GSPO's sequence ratio reads only its own row's tokens). A group
    whose rewards all agree is such rows (about 40% of the quickstart's); their forward and backward passes
    were most of the update's products."""
    rows = range(len(advantages)) if kl_coef > 0 else (advantages != 0).nonzero().flatten().tolist()
    return [row for row in rows if row not in masked]


def importance_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """log_ratio = log pi - log pi_old, mask [B, T] -> the clipped surrogate's ratio [B, T].

    token: each token's own pi/pi_old (PPO, GRPO, DAPO).
    sequence: GSPO's s_i = exp(mean of row i's log-ratios over its completion tokens), the same on each of its
    tokens: the length-normalised sequence likelihood ratio, so one clip decision per completion, as the
    reward is one per completion. Its gradient reaches every token of the row through the mean. A row's
    ratio reads only its own tokens, so which rows share a micro-batch, and which rows are left out of the
    update (zero advantage, algo.mask_truncated), changes no other row's ratio."""
    if level == "token":
        return log_ratio.exp()
    if level == "sequence":
        row = (log_ratio * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)  # [B, 1]
        return row.exp().expand_as(log_ratio)
    raise ValueError(f"unknown ratio level {level!r}; valid: token, sequence")


def policy_loss(
    logprobs: torch.Tensor,  # [B, T] current policy, with grad
    old_logprobs: torch.Tensor,  # [B, T] the policy that sampled the tokens
    advantages: torch.Tensor,  # [B]
    mask: torch.Tensor,  # [B, T] 1 on completion tokens
    cfg: LossConfig,
    totals: BatchTotals,
    ref_logprobs: torch.Tensor | None = None,  # [B, T] frozen reference, when kl_coef > 0
    importance_weights: torch.Tensor | None = None,  # [B, T] proximal/behaviour, truncated (grpo.algo.offpolicy)
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate with separate low/high clip (DAPO clip-higher), plus an optional KL penalty; the
    ratio per token or per sequence (GSPO: `importance_ratio`).
    Off policy, `old_logprobs` are the proximal policy's and each token's surrogate is weighted by its
    importance weight (AReaL's decoupled objective); the KL penalty is not. At sequence level the weights
    stay per token, as TRL's loss applies its own (token-level) sampler correction: a row's surrogate is
    one value, so under seq_mean it is weighted by the mean of its tokens' truncated weights, a
    length-normalised sequence weight as s_i is a length-normalised ratio, bounded by the cap as each is."""
    mask = mask.to(logprobs.dtype)
    log_ratio = logprobs - old_logprobs
    ratio = importance_ratio(log_ratio, mask, cfg.ratio_level)  # [B, T]
    adv = advantages[:, None]  # [B, 1]
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * adv
    token_loss = -torch.minimum(unclipped, clipped)  # [B, T]
    if importance_weights is not None:
        token_loss = token_loss * importance_weights
    kl_token = None
    if cfg.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        kl_token = kl_estimate(logprobs, ref_logprobs, cfg.kl_estimator)
        token_loss = token_loss + cfg.kl_coef * kl_token
    loss = aggregate(token_loss, mask, cfg.loss_agg, totals, cfg.max_new_tokens)

    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        # A clip "binds" when the min picks the clipped term: that token passes no gradient. At sequence level
        # every token of a row carries the row's ratio and clip decision, so the fractions are of the tokens
        # in clipped rows (the measure GSPO's paper compares with GRPO's: fractions of clipped tokens) and
        # ratio_mean the token-weighted mean of s_i; approx_kl_old stays per token at either level: it measures
        # how far the policy moved, not the objective.
        binds = clipped < unclipped
        metrics = {
            keys.CLIP_FRAC: ((binds.to(mask.dtype) * mask).sum() / n).item(),
            keys.CLIP_LOW_FRAC: (((binds & (adv < 0)).to(mask.dtype) * mask).sum() / n).item(),
            keys.CLIP_HIGH_FRAC: (((binds & (adv > 0)).to(mask.dtype) * mask).sum() / n).item(),
            keys.RATIO_MEAN: ((ratio * mask).sum() / n).item(),
            keys.APPROX_KL_OLD: ((0.5 * log_ratio.pow(2) * mask).sum() / n).item(),
            "tokens": n.item(),
        }
        if kl_token is not None:
            metrics[keys.KL] = ((kl_token * mask).sum() / n).item()
    return loss, metrics
