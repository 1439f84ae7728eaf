from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from grpo.checks import BREAKERS
from grpo.config import BreakerConfig, GuardConfig
from grpo.guard.breakers import PHASES, Guard, Trip, most_severe

HEALTHY_REWARD = 0.5
HEALTHY_GRAD_NORM = 1.0


def primed_guard(cfg: GuardConfig) -> Guard:
    """A guard with 5 healthy steps of history (rewards 0.5, grad norms 1.0), enough for every baseline."""
    guard = Guard(cfg)
    for _ in range(5):
        guard.observe({"reward/mean": HEALTHY_REWARD, "update/applied": True, "actor/grad_norm": HEALTHY_GRAD_NORM})
    return guard


def guard_for(name: str, cfg: GuardConfig) -> Guard:
    """History only for the breakers that need it (a zero reward would also be a collapse from 0.5)."""
    return primed_guard(cfg) if name in ("reward_collapse", "grad_norm_spike") else Guard(cfg)


# breaker -> (phase, a bad step under the default threshold, a healthy step)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # bad: >= 0.5 of the samples still failed after every retry
    "failed_rollouts": ("rollout", {"rollout/unrecovered_frac": 0.5}, {"rollout/unrecovered_frac": 0.1}),
    "unscorable_rewards": (
        "rollout", {"rollout/unscorable_frac": 0.9, "rollout/unscorable": 58},
        {"rollout/unscorable_frac": 0.1, "rollout/unscorable": 6},
    ),
    "zero_reward": ("rollout", {"reward/mean": 0.0, "reward/max": 0.0}, {"reward/mean": 0.4, "reward/max": 1.0}),
    # baseline 0.5, threshold 0.2 -> bad below 0.1 (0.05 is not zero, so zero_reward stays quiet)
    "reward_collapse": ("rollout", {"reward/mean": 0.05}, {"reward/mean": 0.45}),
    "empty_responses": ("rollout", {"response/empty_frac": 1.0}, {"response/empty_frac": 0.0}),  # bad: >= 1.0
    "truncated_responses": (
        "rollout", {"response/truncated_frac": 1.0, "response/length_mean": 8.0}, {"response/truncated_frac": 0.2}
    ),
    "nonfinite": ("update", {"update/nonfinite": 1, "update/skip_reason": "non-finite loss"}, {"update/nonfinite": 0}),
    "zero_loss": ("update", {"update/applied": True, "actor/loss": 0.0}, {"update/applied": True, "actor/loss": 0.02}),
    # median 1.0, threshold 50 -> bad above 50
    "grad_norm_spike": ("update", {"actor/grad_norm": 60.0}, {"actor/grad_norm": 1.2}),
    "kl_explosion": ("update", {"actor/kl": 11.0}, {"actor/kl": 0.01}),  # bad above 10
    # bad above 0.5 nats per token between the sampler and the policy about to train
    "offpolicy_kl": ("offpolicy", {"offpolicy/kl": 0.8, "rollout/staleness_max": 2}, {"offpolicy/kl": 0.01}),
}


def test_cases_cover_every_breaker():
    assert set(CASES) == set(BREAKERS)
    assert all(CASES[name][0] == phase for phase, names in PHASES.items() for name in names)


def with_breaker(name: str, **changes: Any) -> GuardConfig:
    cfg = GuardConfig()
    return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **changes)})


@pytest.mark.parametrize("name", list(CASES))
def test_breaker_trips_exactly_at_patience_with_its_action(name):
    phase, bad, _ = CASES[name]
    guard = guard_for(name, with_breaker(name, patience=3, action="pause"))
    assert guard.healthy
    for step in (1, 2):
        assert guard.check(phase, step, bad) == []
        assert not guard.healthy  # a streak is building
        assert guard.streaks[name] == step
    trips = guard.check(phase, 3, bad)
    assert [(t.breaker, t.action, t.step) for t in trips] == [(name, "pause", 3)]
    assert trips[0].evidence["consecutive_steps"] == 3
    assert trips[0].message
    # tripping resets the streak: the next bad step starts counting again
    assert guard.healthy
    assert guard.check(phase, 4, bad) == []


@pytest.mark.parametrize("name", list(CASES))
def test_a_healthy_step_resets_the_streak(name):
    phase, bad, good = CASES[name]
    guard = guard_for(name, with_breaker(name, patience=3))
    assert guard.check(phase, 1, bad) == []
    assert guard.check(phase, 2, bad) == []
    assert guard.check(phase, 3, good) == []
    assert guard.healthy
    assert guard.check(phase, 4, bad) == []
    assert guard.check(phase, 5, bad) == []
    assert [t.breaker for t in guard.check(phase, 6, bad)] == [name]


@pytest.mark.parametrize("name", list(CASES))
def test_default_config_trips_at_its_patience_with_its_action(name):
    phase, bad, _ = CASES[name]
    default = getattr(GuardConfig(), name)
    guard = guard_for(name, GuardConfig())
    for step in range(1, default.patience):
        assert guard.check(phase, step, bad) == []
    trips = guard.check(phase, default.patience, bad)
    assert [(t.breaker, t.action, t.step) for t in trips] == [(name, default.action, default.patience)]


def test_breakers_only_run_in_their_phase():
    guard = primed_guard(GuardConfig())
    assert guard.check("rollout", 1, {"update/nonfinite": 1}) == []
    assert guard.check("update", 1, {"rollout/unrecovered_frac": 1.0}) == []
    assert guard.healthy


def test_failed_rollouts_evidence_includes_the_counts():
    guard = Guard(with_breaker("failed_rollouts", patience=1))
    (trip,) = guard.check("rollout", 1, {"rollout/unrecovered_frac": 0.75, "rollout/failed_frac": 0.8,
                                         "rollout/failed": 8, "rollout/attempts": 10, "rollout/unrecovered": 6,
                                         "rollout/recovered": 2})
    assert trip.evidence == {"unrecovered_frac": 0.75, "failed_frac": 0.8, "rollout/failed": 8, "rollout/attempts": 10,
                             "rollout/unrecovered": 6, "rollout/recovered": 2, "consecutive_steps": 1}
    assert trip.message.startswith("75% of samples still failed after every retry")
    assert trip.message.endswith("2 more recovered on a retry")


def recovered_step(samples: int, recovered: int, unrecovered: int) -> dict[str, Any]:
    """A step's rollout metrics: every sample failed once, `recovered` of them came back on a retry."""
    return {"rollout/failed": samples + samples - recovered, "rollout/ok": recovered,
            "rollout/attempts": 2 * samples, "rollout/failed_frac": (2 * samples - recovered) / (2 * samples),
            "rollout/recovered": recovered, "rollout/unrecovered": unrecovered,
            "rollout/unrecovered_frac": unrecovered / samples}


def test_failed_rollouts_judge_the_samples_lost_not_the_attempts_retried():
    """Issue 52: a server killed at one step and hung at the next, every sample recovered on a retry: half
    the attempts failed both times, and nothing was lost. That is no reason to roll back."""
    guard = Guard(GuardConfig())
    for step in (3, 4, 5):
        assert guard.check("rollout", step, recovered_step(16, recovered=16, unrecovered=0)) == []
    assert guard.healthy
    # The same failed attempts, with half the samples never recovered: the default (2 steps, a rollback) trips.
    assert guard.check("rollout", 6, recovered_step(16, recovered=8, unrecovered=8)) == []
    (trip,) = guard.check("rollout", 7, recovered_step(16, recovered=8, unrecovered=8))
    assert (trip.breaker, trip.action, trip.evidence["rollout/unrecovered"]) == ("failed_rollouts", "rollback", 8)


def test_zero_loss_trips_on_no_signal_and_not_on_zero_loss_without_an_update():
    guard = Guard(with_breaker("zero_loss", patience=1))
    assert [t.breaker for t in guard.check("update", 1, {"update/no_signal": 1})] == ["zero_loss"]
    assert guard.check("update", 2, {"update/applied": False, "actor/loss": 0.0}) == []
    assert guard.check("update", 3, {"actor/loss": 0.0}) == []


def test_zero_loss_does_not_read_a_step_whose_every_row_was_masked():
    guard = Guard(with_breaker("zero_loss", patience=2))
    assert guard.check("update", 1, {"update/no_signal": 1}) == []
    # Every completion truncated and masked (algo.mask_truncated): not rewards that agree; the streak stands.
    assert guard.check("update", 2, {"update/applied": 0, "update/masked_truncated_frac": 1.0}) == []
    assert guard.streaks["zero_loss"] == 1
    assert [t.breaker for t in guard.check("update", 3, {"update/no_signal": 1})] == ["zero_loss"]


def test_kl_explosion_falls_back_to_approx_kl_and_treats_nan_as_bad():
    guard = Guard(with_breaker("kl_explosion", patience=1))
    assert [t.breaker for t in guard.check("update", 1, {"actor/approx_kl_old": 12.0})] == ["kl_explosion"]
    assert [t.breaker for t in guard.check("update", 2, {"actor/kl": float("nan")})] == ["kl_explosion"]
    assert guard.check("update", 3, {"actor/kl": 9.0}) == []


def test_response_breakers_are_independent():
    guard = Guard(dataclasses.replace(
        GuardConfig(),
        empty_responses=BreakerConfig(0.5, "rollback", 1),
        truncated_responses=BreakerConfig(0.5, "warn", 1),
    ))
    (trip,) = guard.check("rollout", 1, {"response/empty_frac": 0.6, "response/truncated_frac": 0.1})
    assert (trip.breaker, trip.action) == ("empty_responses", "rollback")
    assert "empty" in trip.message
    (trip,) = guard.check("rollout", 2, {"response/empty_frac": 0.0, "response/truncated_frac": 0.5})
    assert (trip.breaker, trip.action) == ("truncated_responses", "warn")
    assert trip.evidence["truncated_frac"] == 0.5


# ---------------------------------------------------------------------------------------------
# Baselines


def test_reward_collapse_needs_five_steps_of_history():
    guard = Guard(with_breaker("reward_collapse", patience=1))
    for _ in range(4):
        guard.observe({"reward/mean": 0.5})
    assert guard.check("rollout", 1, {"reward/mean": 0.01}) == []
    assert guard.healthy  # not applicable yet: no streak either
    guard.observe({"reward/mean": 0.5})
    (trip,) = guard.check("rollout", 2, {"reward/mean": 0.01})
    assert trip.breaker == "reward_collapse"
    assert trip.evidence["baseline"] == pytest.approx(0.5)


def test_reward_collapse_threshold_is_relative_to_the_mean_baseline():
    guard = Guard(with_breaker("reward_collapse", patience=1))
    for r in (0.2, 0.4, 0.6, 0.8, 0.5):  # mean 0.5 -> bad below 0.2 * 0.5 = 0.1
        guard.observe({"reward/mean": r})
    assert guard.check("rollout", 1, {"reward/mean": 0.11}) == []
    assert [t.breaker for t in guard.check("rollout", 2, {"reward/mean": 0.09})] == ["reward_collapse"]


def test_reward_collapse_ignores_a_baseline_near_zero():
    guard = Guard(with_breaker("reward_collapse", patience=1))
    for _ in range(10):
        guard.observe({"reward/mean": 0.04})
    assert guard.check("rollout", 1, {"reward/mean": 0.001}) == []


def test_grad_norm_spike_needs_history_and_uses_the_median():
    guard = Guard(with_breaker("grad_norm_spike", patience=1, threshold=10.0))
    for norm in (1.0, 1.0, 2.0, 100.0):  # only 4 so far
        guard.observe({"update/applied": True, "actor/grad_norm": norm})
    assert guard.check("update", 1, {"actor/grad_norm": 1000.0}) == []
    guard.observe({"update/applied": True, "actor/grad_norm": 3.0})
    # history 1, 1, 2, 100, 3 -> median 2 (the outlier does not move it) -> bad above 20
    assert guard.check("update", 2, {"actor/grad_norm": 19.0}) == []
    (trip,) = guard.check("update", 3, {"actor/grad_norm": 21.0})
    assert trip.evidence["median"] == 2.0


def test_grad_norm_spike_ignores_non_finite_norms():
    guard = primed_guard(with_breaker("grad_norm_spike", patience=1))
    assert [t.breaker for t in guard.check("update", 1, {"actor/grad_norm": float("inf")})] == []


def test_observe_skips_grad_norms_of_unapplied_updates_and_caps_history():
    guard = Guard(GuardConfig(baseline_steps=3))
    guard.observe({"update/applied": False, "actor/grad_norm": 5.0})
    guard.observe({"update/applied": True, "actor/grad_norm": None})
    assert guard.grad_norm_history == []
    for i in range(5):
        guard.observe({"reward/mean": float(i), "update/applied": True, "actor/grad_norm": float(i)})
    assert guard.reward_history == [2.0, 3.0, 4.0]
    assert guard.grad_norm_history == [2.0, 3.0, 4.0]


# ---------------------------------------------------------------------------------------------
# Severity, state, disabling


def test_most_severe():
    trips = [Trip("a", "warn", 1, ""), Trip("b", "rollback", 1, ""), Trip("c", "pause", 1, "")]
    assert most_severe(trips).breaker == "b"
    assert most_severe(trips + [Trip("d", "stop", 1, "")]).breaker == "d"
    assert most_severe([Trip("a", "warn", 1, "")]).breaker == "a"
    assert most_severe([]) is None


def test_state_dict_round_trip():
    guard = primed_guard(GuardConfig())
    guard.check("rollout", 1, {"reward/mean": 0.0})  # zero_reward streak 1 of 10
    guard.check("update", 1, {"actor/kl": 11.0})  # kl_explosion streak 1 of 2
    guard.rollbacks = 2
    state = guard.state_dict()
    assert state["streaks"]["zero_reward"] == 1 and state["streaks"]["kl_explosion"] == 1
    assert "rollbacks" not in state  # a rollback must not reset the rollback limit

    restored = Guard(GuardConfig())
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    assert not restored.healthy
    assert restored.rollbacks == 0
    # the restored streak carries on: the second bad KL step trips
    assert [t.breaker for t in restored.check("update", 2, {"actor/kl": 11.0})] == ["kl_explosion"]
    # the saved state is a copy, not a view of the live guard
    assert state["streaks"]["kl_explosion"] == 1
    guard.observe({"reward/mean": 0.9})
    assert state["reward_history"] == [HEALTHY_REWARD] * 5


def test_disabled_guard_trips_nothing():
    guard = primed_guard(GuardConfig(enabled=False))
    for step in range(1, 30):
        for name, (phase, bad, _) in CASES.items():
            assert guard.check(phase, step, bad) == []
    assert guard.healthy


def test_disabled_breaker_trips_nothing_but_the_others_still_do():
    guard = primed_guard(with_breaker("nonfinite", enabled=False))
    for step in range(1, 10):
        assert guard.check("update", step, {"update/nonfinite": 1}) == []
    assert guard.streaks["nonfinite"] == 0
    assert [t.breaker for t in guard.check("update", 10, {"actor/kl": 11.0})] == []
    assert [t.breaker for t in guard.check("update", 11, {"actor/kl": 11.0})] == ["kl_explosion"]


def test_a_healthy_run_trips_nothing_with_the_defaults():
    rng = random.Random(0)
    guard = Guard(GuardConfig())
    for step in range(1, 51):
        rewards = [rng.uniform(0.3, 0.6) for _ in range(8)]
        rollout = {
            "rollout/failed_frac": 0.0,
            "rollout/unrecovered_frac": 0.0,
            "rollout/failed": 0,
            "reward/mean": sum(rewards) / len(rewards),
            "reward/max": 1.0,
            "response/empty_frac": 0.0,
            "response/truncated_frac": 0.2,
        }
        assert guard.check("rollout", step, rollout) == [], step
        update = {
            "actor/loss": rng.choice([-1, 1]) * rng.uniform(0.005, 0.05),
            "actor/grad_norm": rng.uniform(0.7, 1.4),
            "actor/approx_kl_old": rng.uniform(0.0, 0.01),
            "update/nonfinite": 0,
            "update/applied": True,
        }
        assert guard.check("update", step, update) == [], step
        assert guard.healthy
        guard.observe({**rollout, **update})
    assert len(guard.reward_history) == GuardConfig().baseline_steps
    assert len(guard.grad_norm_history) == GuardConfig().baseline_steps


def _trip(action: str, breaker: str = "zero_reward") -> Trip:
    return Trip(breaker, action, 4, f"{breaker} tripped")


def test_decide_continues_without_trips_and_passes_warn_pause_stop_through():
    guard = Guard(GuardConfig())
    assert guard.decide([], None).action == "continue"
    for action in ("warn", "pause", "stop"):
        verdict = guard.decide([_trip("warn"), _trip(action, "nonfinite")], None)
        assert verdict.action == action and verdict.trip.breaker == ("nonfinite" if action != "warn" else "zero_reward")
    assert guard.rollbacks == 0


def test_decide_rolls_back_to_the_last_good_checkpoint_until_the_budget_is_spent(tmp_path):
    from grpo.rundir.checkpoints import CheckpointInfo

    good = CheckpointInfo(2, tmp_path / "step_000002", True, None)
    guard = Guard(GuardConfig(max_rollbacks=2))
    assert [guard.decide([_trip("rollback")], good).action for _ in range(3)] == ["rollback", "rollback", "stop"]
    assert guard.decide([_trip("rollback")], good).reason.endswith("2 rollbacks already done")
    first = Guard(GuardConfig()).decide([_trip("rollback")], good)
    assert first.rollback_to == good


def test_decide_stops_when_there_is_no_healthy_checkpoint():
    verdict = Guard(GuardConfig()).decide([_trip("rollback")], None)
    assert verdict.action == "stop" and "no healthy checkpoint" in verdict.reason


def test_offpolicy_kl_is_quiet_on_policy_and_trips_before_the_update_on_nan():
    guard = Guard(GuardConfig())
    assert guard.check("offpolicy", 1, {"rollout/staleness_max": 0}) == []  # no KL measured: nothing ahead
    assert guard.healthy
    guard.check("offpolicy", 2, {"offpolicy/kl": float("nan")})
    (trip,) = guard.check("offpolicy", 3, {"offpolicy/kl": 0.9, "rollout/staleness_max": 2})
    assert trip.breaker == "offpolicy_kl" and trip.action == "rollback"
    assert trip.evidence["staleness"] == 2 and "rollout.max_staleness" in trip.message
    assert guard.check("update", 4, {"offpolicy/kl": 9.0}) == []  # only in its own phase
