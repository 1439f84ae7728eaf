"""Group-relative advantages: each sample's reward against the other answers to the same problem."""

from __future__ import annotations

import torch

EPS = 1e-6


def group_advantages(rewards: torch.Tensor, norm: str = "group", std: str = "population",
                     eps: float = EPS) -> torch.Tensor:
    """rewards [N, G] (N problems, G samples each) -> advantages [N, G].

    group: (r - group mean) / (group std + eps) (GRPO); none: r - group mean (Dr.GRPO, no length/difficulty
    bias from the std); batch: (r - group mean) / (std over the whole batch + eps). std: population, so
    rewards [1, 1, 0, 0] give advantages [1, 1, -1, -1]; or sample (Bessel's), TRL's: with eps 1e-4 these
    are TRL's advantages, sqrt((G-1)/G) of the population's. A zero-variance group gets 0.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, group_size], got shape {tuple(rewards.shape)}")
    if std not in ("population", "sample"):
        raise ValueError(f"unknown advantage std {std!r}; valid: population, sample")
    unbiased = std == "sample"
    centered = rewards - rewards.mean(dim=1, keepdim=True)  # [N, G]
    if norm == "none":
        return centered
    if norm == "group":
        return centered / (rewards.std(dim=1, unbiased=unbiased, keepdim=True) + eps)
    if norm == "batch":
        return centered / (rewards.std(unbiased=unbiased) + eps)
    raise ValueError(f"unknown advantage norm {norm!r}; valid: group, batch, none")


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """rewards [N, G] -> bool [N]: groups where every answer got the same reward (no learning signal)."""
    return (rewards.max(dim=1).values - rewards.min(dim=1).values).abs() < EPS
