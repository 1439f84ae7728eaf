"""The keys of a step's line in metrics.jsonl, named once. The writers (the rollout's and the update's
stats, the step record, the phase timer) and the readers (the guard's breakers, the console table, the
advice, `grpo doctor`) import them from here, so renaming one is a change in one place. Old runs are
read with the same names: a key's text never changes.

Imports nothing: the doctor reads runs without loading torch."""

# --- rollout phase: read before the update, so a bad batch is never trained on --------------------
ROLLOUT_PREFIX = "rollout/"  # rollout/<status>: attempts per status (a failed_rollouts trip's evidence)
FAILED = "rollout/failed"
UNSCORABLE = "rollout/unscorable"
ATTEMPTS = "rollout/attempts"
FAILED_FRAC = "rollout/failed_frac"  # of every attempt, those failed, timed out or empty: retried or not
RECOVERED = "rollout/recovered"  # samples that failed, then came back on a retry: trained on, not failures
UNRECOVERED = "rollout/unrecovered"  # samples still failed (failed, timeout, empty) after every retry
UNRECOVERED_FRAC = "rollout/unrecovered_frac"  # of the step's samples: what the failed_rollouts breaker judges
UNSCORABLE_FRAC = "rollout/unscorable_frac"
RETRIES = "rollout/retries"
ROUNDS = "rollout/rounds"
REWARD_ERRORS = "rollout/reward_errors"
SOURCES = "rollout/sources"  # the server incarnations whose samples are trained on
STALENESS_MAX = "rollout/staleness_max"  # versions between the weights that generated the batch and the policy
STALENESS_MEAN = "rollout/staleness_mean"
GROUPS_TRAINED = "groups/trained"
GROUPS_DROPPED_INVALID = "groups/dropped_invalid"
# Zero-variance groups: every answer got the same reward, so every advantage is 0 (rollout.filter_zero_variance
# drops them). Their keys keep the text they were first written with, zero_std, so older runs read the same.
GROUPS_DROPPED_ZERO_VARIANCE = "groups/dropped_zero_std"
ZERO_VARIANCE_FRAC = "groups/zero_std_frac"  # of complete groups
EMPTY_FRAC = "response/empty_frac"
TRUNCATED_FRAC = "response/truncated_frac"
LENGTH_MEAN = "response/length_mean"
LENGTH_MAX = "response/length_max"
REWARD_MEAN = "reward/mean"
REWARD_STD = "reward/std"
REWARD_MIN = "reward/min"
REWARD_MAX = "reward/max"
ACCURACY = "reward/accuracy"  # reward >= task.correct_threshold
GENERATED_TOKENS = "perf/generated_tokens"
GENERATE_TOKENS_PER_S = "perf/generate_tokens_per_s"
GENERATE_S = "time/generate_s"
REWARD_S = "time/reward_s"


def status_count(status: str) -> str:
    """rollout/<status>: how many attempts ended with that status (grpo.rollout.engines.SampleStatus)."""
    return ROLLOUT_PREFIX + status


def reward_metric(name: str) -> str:
    """reward_log/<name>: the step's mean of what reward functions gave TRL's `log_metric` under `name`."""
    return f"reward_log/{name}"


def reward_part(name: str, statistic: str) -> str:
    """reward/<name>/<mean|std>: one reward function's own statistic."""
    return f"reward/{name}/{statistic}"


# --- before the update: the trainer's log-probs against the sampler's ---------------------------
LOGPROB_MISMATCH = "rollout/logprob_mismatch"
LOGPROB_MISMATCH_MAX = "rollout/logprob_mismatch_max"
# with rollout.max_staleness > 0 (grpo.algo.offpolicy)
IMPORTANCE_WEIGHT_MEAN = "offpolicy/importance_weight_mean"
IMPORTANCE_WEIGHT_MAX = "offpolicy/importance_weight_max"
IMPORTANCE_CAPPED_FRAC = "offpolicy/importance_capped_frac"
OFFPOLICY_KL = "offpolicy/kl"

# --- update phase: read after the update -----------------------------------------------------------
# The update's own measures (grpo.policy.update; the loss's from grpo.algo.loss.measure_names).
LOSS = "actor/loss"
GRAD_NORM = "actor/grad_norm"
KL = "actor/kl"  # to the reference, with algo.kl_coef > 0
ENTROPY = "actor/entropy"
CLIP_FRAC = "actor/clip_frac"  # tokens whose ratio the clip bound: they pass no gradient
CLIP_LOW_FRAC = "actor/clip_low_frac"  # ... bound below (negative advantage)
CLIP_HIGH_FRAC = "actor/clip_high_frac"  # ... bound above (positive advantage)
RATIO_MEAN = "actor/ratio_mean"
# The rows (and their completion tokens) the update computed: those with a gradient (grpo.policy.update).
ROWS_COMPUTED = "actor/rows_computed"
TOKENS_COMPUTED = "actor/tokens_computed"
APPROX_KL_OLD = "actor/approx_kl_old"
APPLIED = "update/applied"
NONFINITE = "update/nonfinite"
NO_SIGNAL = "update/no_signal"
# with algo.mask_truncated: of the rows to train on, the truncated ones left out of the loss (1: no update)
MASKED_TRUNCATED_FRAC = "update/masked_truncated_frac"
SKIP_REASON = "update/skip_reason"
# a server engine's weight sync after the update, and its log-prob probe (grpo.rollout.server.weights)
SYNC_S = "sync/seconds"
SYNC_PROBE_DIFF = "sync/probe_diff"
SYNC_PROBE_MAX_DIFF = "sync/probe_max_diff"
SYNC_TOLERANCE = "sync/tolerance"

# --- the step ------------------------------------------------------------------------------------
STEP = "step"  # every line's stamp: the step, and when it was written (time.time())
TIME = "time"
EVAL_PREFIX = "eval/"  # eval/<name>: a held-out evaluation due this step
LR = "actor/lr"
DATA_INDEX = "data/index"
POLICY_VERSION = "policy/version"
ROLLBACKS = "guard/rollbacks"
TRIPS = "guard/trips"
STEP_S = "time/step_s"
TOKENS_PER_S = "perf/tokens_per_s"
TIME_PREFIX = "time/"
MEMORY_PREFIX = "memory/"


def phase_time(phase: str) -> str:
    """time/<phase>_s: a phase's wall time (grpo.train.timing)."""
    return f"{TIME_PREFIX}{phase}_s"


def phase_peak_memory(phase: str) -> str:
    """memory/<phase>_peak_gib: a phase's peak memory."""
    return f"{MEMORY_PREFIX}{phase}_peak_gib"
