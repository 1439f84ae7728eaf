"""Per-token KL estimators between the policy and a frozen reference (Schulman's k1 and k3)."""

from __future__ import annotations

import torch


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """[B, T] log-probs of the sampled tokens -> [B, T] per-token estimate of KL(policy || reference).

    k1 = log p - log q: unbiased, high variance, can be negative per token.
    k3 = q/p - log(q/p) - 1: unbiased, always >= 0, lower variance (used by GRPO/DeepSeekMath).
    """
    log_ratio = ref_logprobs - logprobs  # log q/p
    if estimator == "k1":
        return -log_ratio
    if estimator == "k3":
        # clamp so a far-off token cannot overflow exp() into inf and poison the loss
        log_ratio = log_ratio.clamp(-20.0, 20.0)
        return log_ratio.exp() - log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; valid: k1, k3")
