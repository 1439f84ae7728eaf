"""The step record (grpo.train.step): which trip blocks the update, why a step trained on nothing, and
the metrics line it makes: the same keys, in the same order, that old runs hold (the doctor reads them)."""

from grpo import metric_keys as keys
from grpo.guard.breakers import Trip
from grpo.policy.update import PrepareStats, UpdateResult
from grpo.rollout.collector import RewardStats, RolloutStats
from grpo.train.step import StepRecord, StepState


def rollout(**changes) -> RolloutStats:
    stats = RolloutStats(
        attempts={"ok": 6, "truncated": 1, "failed": 1, "timeout": 0, "empty": 0, "unscorable": 0},
        failed_frac=0.125, recovered=1, unrecovered=0, unrecovered_frac=0.0, unscorable_frac=0.0, retries=1,
        rounds=1, reward_errors=0, groups_trained=2, groups_dropped_invalid=0, groups_dropped_zero_variance=0,
        zero_variance_frac=0.5, empty_frac=0.0,
        truncated_frac=1 / 7, rewards=RewardStats(0.5, 0.5, 0.0, 1.0, 0.5, {"correct": (0.5, 0.5)}), sources=[],
        length_mean=12.0, length_max=20, staleness=1, generated_tokens=100, generate_s=2.0, reward_s=0.1)
    for name, value in changes.items():
        setattr(stats, name, value)
    return stats


def trip(action: str, breaker: str = "zero_reward") -> Trip:
    return Trip(breaker, action, 3, f"{breaker} tripped")


def done(record: StepRecord) -> StepRecord:
    record.state, record.step_s = StepState(1e-5, 8, 3, 0), 4.0
    return record


# The order of a line's keys as metrics.jsonl has always written them (a run from before the stats were typed),
# with the recovered and unrecovered samples beside the failed attempts since.
APPLIED_LINE = [
    "rollout/ok", "rollout/truncated", "rollout/failed", "rollout/timeout", "rollout/empty", "rollout/unscorable",
    "rollout/attempts", "rollout/failed_frac", "rollout/recovered", "rollout/unrecovered", "rollout/unrecovered_frac",
    "rollout/unscorable_frac", "rollout/retries", "rollout/rounds",
    "rollout/reward_errors", "groups/trained", "groups/dropped_invalid", "groups/dropped_zero_std",
    "groups/zero_std_frac", "response/empty_frac", "response/truncated_frac", "reward/mean", "reward/std",
    "reward/min", "reward/max", "reward/accuracy", "reward/correct/mean", "reward/correct/std",
    "response/length_mean", "response/length_max", "rollout/staleness_max", "rollout/staleness_mean",
    "perf/generated_tokens", "perf/generate_tokens_per_s", "time/generate_s", "time/reward_s",
    "rollout/logprob_mismatch", "rollout/logprob_mismatch_max", "update/no_signal", "actor/loss",
    "actor/grad_norm", "update/applied", "update/nonfinite", "weights/version", "time/rollout_s",
    "update/skip_reason", "actor/lr", "data/index", "policy/version", "guard/rollbacks", "guard/trips",
    "time/step_s", "perf/tokens_per_s",
]


def test_an_applied_steps_line_has_the_keys_old_runs_have_in_their_order():
    record = StepRecord(3, rollout=rollout(), prepared=PrepareStats(0.01, 0.2),
                        update=UpdateResult(True, {keys.LOSS: 0.5, keys.GRAD_NORM: 1.5}, optimizer_steps=1))
    record.sync, record.timings = {"weights/version": 3}, {"time/rollout_s": 2.5}
    line = done(record).metrics()
    assert list(line) == APPLIED_LINE
    assert line["update/applied"] == 1 and line["update/nonfinite"] == 0 and line["update/skip_reason"] is None
    assert line["actor/loss"] == 0.5 and line["rollout/staleness_max"] == line["rollout/staleness_mean"] == 1
    assert line["perf/tokens_per_s"] == 100 / 4.0 and line["perf/generate_tokens_per_s"] == 100 / 2.0
    assert line["reward/correct/mean"] == 0.5 and line["guard/trips"] == [] and line["policy/version"] == 3


def test_optional_parts_are_left_out_not_written_as_zero():
    line = done(StepRecord(1, rollout=rollout(rewards=None, length_mean=None, length_max=None, empty_frac=None,
                                              truncated_frac=None, sources=["s-0#1", "s-1#2"]))).metrics()
    assert not any(k.startswith("reward/") or k.startswith("response/") for k in line)
    assert line["rollout/sources"] == ["s-0#1", "s-1#2"]
    assert "rollout/logprob_mismatch" not in line  # old log-probs not recomputed


def test_a_blocking_trip_is_the_first_that_does_more_than_warn_and_names_the_skip():
    record = StepRecord(3, rollout=rollout(), trips=[trip("warn", "truncated_responses"), trip("rollback"),
                                                     trip("stop", "nonfinite")])
    assert record.blocking_trip.breaker == "zero_reward"
    assert record.skip_reason == "breaker zero_reward tripped" and not record.applied
    line = done(record).metrics()
    assert line["update/applied"] == 0 and "update/nonfinite" not in line  # no update ran
    assert line["guard/trips"] == ["truncated_responses", "zero_reward", "nonfinite"]
    assert StepRecord(3, trips=[trip("warn")]).blocking_trip is None


def test_the_nonfinite_flag_comes_from_the_update_not_from_its_reasons_text():
    nan = UpdateResult(False, {keys.LOSS: float("nan")}, "loss was NaN at update 0", nonfinite=True)
    worded = UpdateResult(False, {}, "no learning signal: nothing non-finite here")
    assert done(StepRecord(1, rollout=rollout(), update=nan)).update_metrics()["update/nonfinite"] == 1
    assert done(StepRecord(1, rollout=rollout(), update=worded)).update_metrics()["update/nonfinite"] == 0


def test_what_the_update_breakers_read_carries_the_off_policy_check_and_no_signal():
    from grpo.algo.offpolicy import OffPolicyStats

    record = StepRecord(2, rollout=rollout(), prepared=PrepareStats(0.1, 0.5, OffPolicyStats(1.0, 3.0, 0.1, 0.02)),
                        no_signal=True)
    m = record.update_metrics()
    assert m["offpolicy/kl"] == 0.02 and m["update/no_signal"] == 1 and "update/applied" not in m
    assert record.skip_reason is None  # neither blocked nor updated yet
