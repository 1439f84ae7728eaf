"""Advice on a step that trained on nothing (grpo.train.advice): said once per reason, naming the cause
and the knobs; silent on applied steps and on breakers (the guard speaks for those)."""

import pytest

from grpo.train.advice import ALL_MASKED, SkipAdvice


@pytest.fixture
def alerts(monkeypatch):
    said = []
    monkeypatch.setattr("grpo.train.advice.alert", said.append)
    return said


def test_no_signal_names_why_and_the_remedies_once(alerts):
    advice = SkipAdvice()
    wrong = {"reward/mean": 0.0, "reward/min": 0.0, "reward/max": 0.0, "reward/accuracy": 0.0,
             "response/truncated_frac": 0.0}
    advice.after_step(1, False, "no learning signal", wrong)
    advice.after_step(2, False, "no learning signal", wrong)
    assert len(alerts) == 1
    assert alerts[0].startswith("step 1: NO UPDATE: every answer was wrong")
    assert "rollout.samples_per_problem" in alerts[0] and "rollout.filter_zero_variance=true" in alerts[0]
    assert "rollout.max_new_tokens" not in alerts[0]


def test_every_answer_right_and_cut_off_answers_are_told_apart(alerts):
    SkipAdvice().after_step(4, False, "no learning signal",
                            {"reward/mean": 1.0, "reward/min": 1.0, "reward/max": 1.0, "reward/accuracy": 1.0,
                             "response/truncated_frac": 0.5})
    assert "every answer was right" in alerts[0]
    assert "longer answers (rollout.max_new_tokens: 50% were cut off)" in alerts[0]
    SkipAdvice().after_step(4, False, "no learning signal",
                            {"reward/mean": 0.5, "reward/min": 0.0, "reward/max": 1.0, "reward/accuracy": 0.5})
    assert "in every group all answers got the same reward" in alerts[1]


def test_a_constant_reward_below_the_threshold_is_named_and_not_called_right_or_wrong(alerts):
    SkipAdvice().after_step(1, False, "no learning signal", {"reward/mean": 0.5, "reward/min": 0.5, "reward/max": 0.5,
                                                            "reward/accuracy": 0.0, "response/truncated_frac": 1.0})
    assert alerts[0].startswith("step 1: NO UPDATE: every answer got the same reward, 0.5, and none reached "
                                "task.correct_threshold (mean reward 0.5)")
    assert "a reward that tells answers apart" in alerts[0] and "rollout.max_new_tokens" not in alerts[0]
    # Partial credit below the threshold that differs between groups: every answer was wrong.
    SkipAdvice().after_step(1, False, "no learning signal", {"reward/mean": 0.3, "reward/min": 0.2, "reward/max": 0.4,
                                                            "reward/accuracy": 0.0})
    assert alerts[1].startswith("step 1: NO UPDATE: every answer was wrong")


def test_no_trainable_groups_counts_the_failures(alerts):
    SkipAdvice().after_step(7, False, "no trainable groups", {"rollout/failed": 6, "rollout/unscorable": 2})
    assert alerts == [alerts[0]] and "(6 failed, 2 unscorable)" in alerts[0] and "grpo doctor" in alerts[0]


def test_applied_steps_and_breakers_are_left_to_others(alerts):
    advice = SkipAdvice()
    advice.after_step(1, True, None, {})
    advice.after_step(2, False, "breaker zero_reward tripped", {})
    advice.after_step(3, False, None, {})
    assert alerts == [] and advice.explained == set()


def test_a_step_whose_every_completion_was_masked_is_told_as_truncation_not_as_agreeing_rewards(alerts):
    advice = SkipAdvice()
    m = {"reward/mean": 0.25, "reward/min": 0.0, "reward/max": 1.0, "response/truncated_frac": 1.0,
         "response/length_max": 16, "update/masked_truncated_frac": 1.0}
    advice.after_step(3, False, ALL_MASKED, m)
    advice.after_step(4, False, ALL_MASKED, m)
    assert alerts == [alerts[0]] and alerts[0].startswith("step 3: NO UPDATE: every completion ran to "
                                                          "rollout.max_new_tokens (16 tokens) without ending")
    assert "algo.mask_truncated=false" in alerts[0] and "same reward" not in alerts[0]
