"""The off-policy correction for stale samples (rollout.max_staleness > 0): AReaL's decoupled PPO objective.

Three policies meet in a stale batch: the behaviour policy that sampled it (its log-probs come with the
samples), the proximal policy (the current weights before the update: log-probs recomputed then), and
the policy being optimised. The PPO ratio and its clip are taken against the proximal policy, so the
trust region is around the weights being updated, however old the sampler; each token's loss is then
weighted by proximal/behaviour, the importance weight that turns an expectation over the sampler into
one over the proximal policy. The weight is truncated at `cap` (truncated importance sampling: a few
tokens whose probability rose far since they were sampled would otherwise dominate the gradient's
variance). AReaL drops the tokens above its cap instead; truncating keeps their direction, bounded.

Both are constants of the update (neither depends on the weights being optimised): computed once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo import metric_keys as keys


@dataclass
class OffPolicyStats:
    importance_weight_mean: float  # after the cap
    importance_weight_max: float  # before the cap: how far it had to cut
    importance_capped_frac: float
    kl: float  # KL(behaviour || proximal) per token: the off-policy breaker reads it

    def metrics(self) -> dict[str, float]:
        return {keys.IMPORTANCE_WEIGHT_MEAN: self.importance_weight_mean,
                keys.IMPORTANCE_WEIGHT_MAX: self.importance_weight_max,
                keys.IMPORTANCE_CAPPED_FRAC: self.importance_capped_frac, keys.OFFPOLICY_KL: self.kl}


def importance_weights(proximal: torch.Tensor, behaviour: torch.Tensor,
                       cap: float) -> tuple[torch.Tensor, OffPolicyStats | None]:
    """proximal, behaviour: [N] log-probs of the same sampled tokens -> (weights [N], their stats; None
    for no tokens).

    offpolicy/kl is KL(behaviour || proximal) per token, estimated on the sampler's own tokens with the
    non-negative k3 estimator (r - 1 - log r, r = proximal/behaviour): how far the sampler is from the
    policy about to train on its samples (the off-policy breaker reads it)."""
    log_ratio = (proximal - behaviour).double()
    ratio = log_ratio.exp()
    weights = ratio.clamp(max=cap)
    if not len(ratio):
        return weights.float(), None
    return weights.float(), OffPolicyStats(
        importance_weight_mean=weights.mean().item(),
        importance_weight_max=ratio.max().item(),
        importance_capped_frac=(ratio > cap).double().mean().item(),
        kl=(ratio - 1 - log_ratio).mean().item(),
    )
