"""The step metrics the breakers read, named once: the step record (grpo.train.step) writes these keys and
the breakers (grpo.guard.breakers) read them, so renaming one is a change in one place."""

# rollout phase: read before the update, so a bad batch is never trained on
ROLLOUT_PREFIX = "rollout/"  # every rollout/ count is evidence of a failed_rollouts trip
FAILED_FRAC = "rollout/failed_frac"
UNSCORABLE_FRAC = "rollout/unscorable_frac"
UNSCORABLE = "rollout/unscorable"
REWARD_ERRORS = "rollout/reward_errors"
REWARD_MEAN = "reward/mean"
REWARD_MAX = "reward/max"
EMPTY_FRAC = "response/empty_frac"
TRUNCATED_FRAC = "response/truncated_frac"
LENGTH_MEAN = "response/length_mean"
ZERO_STD_FRAC = "groups/zero_std_frac"
STALENESS_MAX = "rollout/staleness_max"  # versions between the weights that generated the batch and the policy

# before the update, with rollout.max_staleness > 0 (grpo.algo.offpolicy)
OFFPOLICY_KL = "offpolicy/kl"

# update phase: read after the update
APPLIED = "update/applied"
NONFINITE = "update/nonfinite"
NO_SIGNAL = "update/no_signal"
SKIP_REASON = "update/skip_reason"
LOSS = "actor/loss"
GRAD_NORM = "actor/grad_norm"
KL = "actor/kl"
APPROX_KL_OLD = "actor/approx_kl_old"
