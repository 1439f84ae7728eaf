"""The cause, from a record: infrastructure before the model, and the order of events decides."""

from __future__ import annotations

from grpo.tools.doctor import cause, timeline
from grpo.tools.doctor.record import Evidence, Mark, RunRecord


def record(rewards: list[float], **series: list[float]) -> RunRecord:
    run = RunRecord("verl", "x.log")
    for step, value in enumerate(rewards, 1):
        run.put(step, "reward", value)
        for name, values in series.items():
            run.put(step, name, values[step - 1])
    return run


def decide(run: RunRecord) -> tuple[str, int | None]:
    what, step, _, _ = cause.decide(run, timeline.anomalies(run))
    return what, step


def server_death(step: int) -> Mark:
    return Mark(step, "server_failure", "the inference server died", Evidence("llm_server.log", 7, "Killed"))


def test_a_dead_server_at_the_step_the_reward_fell_is_the_cause():
    run = record([0.4, 0.5, 0.45, 0.5, 0.55, 0.5, 0.45, 0.5] + [0.0] * 8)
    run.marks.append(server_death(9))
    assert decide(run) == ("server_failure", 9)


def test_a_server_that_died_long_after_the_reward_fell_is_not_the_cause():
    """The step-940 story: the reward was 0 long before the server crashed. Its abrupt fall to exactly
    0 is still the reward source's doing (the users' own guess: a server unresponsive before it died)."""
    run = record([0.4, 0.5, 0.45, 0.5, 0.55, 0.5, 0.45, 0.5] + [0.0] * 12)
    run.marks.append(server_death(18))
    what, step, explanation, _ = cause.decide(run, timeline.anomalies(run))
    assert (what, step) == ("reward_source_died", 9)
    assert "server failure at step 18 came after" in explanation


HEALTHY = [0.4, 0.5, 0.45, 0.5, 0.55, 0.5, 0.45, 0.5]


def test_an_abrupt_fall_to_exactly_zero_in_every_group_is_the_reward_source_not_the_task():
    run = record(HEALTHY + [0.0] * 6, zero_std_frac=[0.25] * 8 + [1.0] * 6, loss=[0.02] * 8 + [0.0] * 6,
                 grad_norm=[0.3] * 8 + [0.0] * 6)
    what, step, explanation, backing = cause.decide(run, timeline.anomalies(run))
    assert (what, step) == ("reward_source_died", 9)
    assert "reward server" in explanation and "inference server" in explanation
    assert "completions of step 9" in explanation  # the evidence that would confirm it
    assert "partial credit" not in explanation  # no advice about the task
    assert {a.kind for a in backing} >= {"zero_reward", "zero_variance"}


def test_a_reward_that_never_scored_anything_is_not_wired_not_a_task_without_signal():
    run = record([0.0] * 10, zero_std_frac=[1.0] * 10, loss=[0.0] * 10, grad_norm=[0.0] * 10)
    assert decide(run) == ("reward_not_wired", 1)


def test_a_task_that_never_had_variance_gives_no_signal():
    run = record([1.0] * 10, zero_std_frac=[1.0] * 10, loss=[0.0] * 10)
    assert decide(run) == ("no_learning_signal", 1)
    sparse = [0.0625 if s in (4, 9, 15) else 0.0 for s in range(1, 31)]  # a group hits it now and then
    run = record(sparse, zero_std_frac=[0.75 if r else 1.0 for r in sparse], loss=[0.0] * 30)
    assert decide(run) == ("no_learning_signal", 1)


def test_one_group_per_step_scoring_the_same_now_and_then_is_signal():
    """One prompt per step: its group's rewards are identical on a quarter of the steps, by chance."""
    rewards = [0.0 if s % 4 == 0 else 0.4 + 0.01 * (s % 7) for s in range(1, 61)]
    run = record(rewards, reward_std=[0.0 if r == 0 else 0.9 for r in rewards])
    assert decide(run) == ("healthy", None)


def test_a_reward_that_slid_to_zero_is_a_collapse_not_a_death():
    run = record(HEALTHY + [0.3, 0.2, 0.12, 0.06, 0.03] + [0.0] * 6)
    assert decide(run)[0] == "policy_collapse"


def test_a_reward_that_rose_to_exactly_zero_from_penalties_did_not_collapse():
    """A reward whose failures score below 0 (a format penalty): reaching 0 is the model learning to avoid the
    penalty, a rise. Stuck there with every group alike it is no signal; without the groups' spread, a note."""
    penalties = [-0.5, -0.4, -0.3, -0.25, -0.1]
    assert decide(record(penalties + [0.0] * 12, zero_std_frac=[0.5] * 5 + [1.0] * 12)) == ("no_learning_signal", 6)
    what, _, explanation, _ = cause.decide(run := record(penalties + [0.0] * 12), timeline.anomalies(run))
    assert what == "healthy" and "worth a look: zero reward" in explanation


def test_zero_on_average_while_the_groups_still_differ_is_not_a_dead_source():
    """Rewards in [-1, 1] averaging exactly 0: the groups still differ, the reward source answers."""
    run = record(HEALTHY + [0.0] * 6, zero_std_frac=[0.25] * 14, grad_norm=[0.3] * 14)
    assert decide(run)[0] != "reward_source_died"


def test_a_dead_reward_source_with_server_evidence_names_the_server():
    run = record(HEALTHY + [0.0] * 6, zero_std_frac=[0.25] * 8 + [1.0] * 6)
    run.marks.append(server_death(9))
    assert decide(run) == ("server_failure", 9)


def test_identical_rewards_with_the_loss_at_zero_are_no_learning_signal():
    run = record([0.3, 0.4, 0.35, 0.4, 0.45, 1.0, 1.0, 1.0, 1.0],
                 zero_std_frac=[0.1] * 5 + [1.0] * 4, loss=[0.01] * 5 + [0.0] * 4)
    assert decide(run) == ("no_learning_signal", 6)


def test_nan_first_is_nonfinite():
    run = record([0.4] * 5 + [0.0] * 5, loss=[0.1] * 4 + [float("nan")] * 6)
    assert decide(run) == ("nonfinite", 5)


def test_noise_is_healthy():
    run = record([0.3, 0.1, 0.4, 0.2, 0.35, 0.15, 0.45, 0.3, 0.5, 0.25, 0.4, 0.3], loss=[0.01, -0.02] * 6)
    assert decide(run) == ("healthy", None)


def test_the_checkpoint_is_the_newest_saved_before_the_first_bad_step():
    from grpo.tools.doctor.record import Checkpoint

    run = RunRecord("trl", "x", checkpoints=[Checkpoint(10, "c10"), Checkpoint(20, "c20"), Checkpoint(30, "c30")])
    assert cause.last_checkpoint_before(run, 21).path == "c20"
    assert cause.last_checkpoint_before(run, 20).path == "c10"  # checkpoint-20 holds step 20's update
    assert cause.last_checkpoint_before(run, 5) is None
    assert cause.last_checkpoint_before(run, None).path == "c30"


def test_a_stray_connection_error_long_before_does_not_hide_the_outage():
    run = record([0.4, 0.5, 0.45, 0.5, 0.55, 0.5, 0.45, 0.5, 0.5, 0.45, 0.5, 0.5] + [0.0] * 8)
    run.marks.append(Mark(3, "server_unreachable", "Cannot connect to host", Evidence("trainer.log", 30, "x")))
    run.marks.append(Mark(13, "server_unreachable", "Cannot connect to host", Evidence("trainer.log", 130, "y")))
    run.marks.append(Mark(14, "server_unreachable", "Cannot connect to host", Evidence("trainer.log", 140, "z")))
    what, step, _, backing = cause.decide(run, timeline.anomalies(run))
    assert (what, step) == ("server_failure", 13) and backing[0].evidence.line == 130


def test_a_stray_error_alone_is_healthy():
    run = record([0.4, 0.5, 0.45, 0.5, 0.55, 0.5, 0.45, 0.5, 0.5, 0.45])
    run.marks.append(Mark(3, "server_unreachable", "Cannot connect to host", Evidence("trainer.log", 30, "x")))
    run.marks.append(Mark(5, "rollout_error", "request timed out", Evidence("trainer.log", 50, "t")))
    assert decide(run) == ("healthy", None)


def test_rollout_timeouts_as_the_reward_fell_with_the_server_fine_are_a_rollout_failure():
    run = record([0.4, 0.5, 0.45, 0.5, 0.55, 0.5, 0.45, 0.5] + [0.0] * 6)
    run.marks.append(Mark(9, "rollout_error", "Failed after 3 retries", Evidence("trainer.log", 90, "t")))
    assert decide(run) == ("rollout_failure", 9)


def test_a_healthy_run_with_an_anomaly_on_its_timeline_says_so_rather_than_no_anomaly():
    """A rising reward with the entropy falling (the task being learned) is healthy, and the explanation
    points at what the timeline holds instead of contradicting it."""
    rising = [0.1 + 0.04 * i for i in range(20)]
    run = record(rising, entropy=[0.9] * 10 + [0.2] * 10)
    found = timeline.anomalies(run)
    what, _, explanation, _ = cause.decide(run, found)
    assert what == "healthy" and any(a.kind == "entropy_collapse" for a in found)
    assert "no anomaly" not in explanation and "worth a look: entropy collapse" in explanation


def test_no_good_checkpoint_says_why_when_every_checkpoint_is_healthy():
    """Issue 25 item 13: not a bare 'none' when healthy checkpoints exist, all from the bad step on."""
    from grpo.tools.doctor import render
    from grpo.tools.doctor.record import Checkpoint, Diagnosis, RunRecord

    record = RunRecord("grpo", "runs/x", checkpoints=[Checkpoint(3, "runs/x/checkpoints/step_000003", True)])
    diagnosis = Diagnosis(source="grpo", status="problem", cause="reward_collapse", first_bad_step=1,
                          explanation="e", evidence=[], last_good_checkpoint=None, resume=None, timeline=[])
    line = next(l for l in render(diagnosis, record) if "last good checkpoint" in l)
    assert "none before step 1" in line and "step_000003" in line, line


def test_a_kl_never_computed_is_neither_a_blow_up_nor_a_drift():
    """TRL logs kl as NaN at every step when beta is 0 (open-r1#704): the loss stays finite, so the NaN
    never reached the update; a KL that turns NaN after finite values, or a NaN loss, still is one."""
    nan = float("nan")
    assert decide(record([13.4, 6.9, 6.3, 6.4], loss=[-0.28, -0.15, -0.11, -0.01], kl=[nan] * 4,
                         reward_std=[21.8, 14.5, 17.7, 12.0])) == ("healthy", None)
    assert decide(record([0.4] * 6, loss=[0.01] * 3 + [nan] * 3, kl=[0.01] * 3 + [nan] * 3))[0] == "nonfinite"


def test_one_logged_step_with_every_group_identical_and_no_gradient_is_no_learning_signal():
    """trl#3857: the only logged entry has frac_reward_zero_std 1 and grad_norm 0.0: nothing was learned in
    what the log holds. The same entry with a gradient is not enough to say so."""
    assert decide(record([3.0], zero_std_frac=[1.0], grad_norm=[0.0], loss=[0.0])) == ("no_learning_signal", 1)
    assert decide(record([3.0], zero_std_frac=[1.0], grad_norm=[0.3], loss=[0.0]))[0] != "no_learning_signal"


def test_a_loss_and_gradient_exactly_0_at_every_step_are_no_signal_without_a_reward():
    """prime-rl#1117: the trainer's log holds no reward, only Loss 0.0000 and Grad. Norm 0.0000 step after step:
    nothing was learned, which needs no reward to say. One such step, a gradient that moved, or a loss of 0
    without any gradient logged is not enough: without a reward the run stays unknown."""
    def update(loss: list[float], grad_norm: list[float] | None = None) -> RunRecord:
        run = RunRecord("prime-rl", "trainer.log", console=True)
        for step, value in enumerate(loss, 9):
            run.put(step, "loss", value)
            if grad_norm is not None:
                run.put(step, "grad_norm", grad_norm[step - 9])
        return run

    assert decide(update([0.0, 0.0], [0.0, 0.0])) == ("no_learning_signal", 9)
    assert decide(update([0.0], [0.0]))[0] == "unknown"
    assert decide(update([0.0, 0.0], [0.0, 0.2]))[0] == "unknown"
    assert decide(update([0.0, 0.0]))[0] == "unknown"


def test_a_log_whose_every_entry_scores_exactly_0_never_scored_however_short():
    """slime#1527: the one rollout logged scores exactly 0 (raw reward 0 over the batch): the reward scored nothing
    in what the log holds. A live run's first zero is not enough (more steps may come), nor a log with any score."""
    assert decide(record([0.0])) == ("reward_not_wired", 1)
    live = record([0.0])
    live.running = True
    assert decide(live)[0] != "reward_not_wired"
    assert decide(record([0.0, 0.3]))[0] != "reward_not_wired"


def test_no_gradient_and_no_kl_past_the_first_step_while_the_groups_differ_is_no_learning_signal():
    """ms-swift#5571: at step 5 the loss, the gradient norm and the KL are exactly 0 while every group's rewards
    differ: the updates before it moved nothing and this one moves nothing, however short the log; named as a
    gradient that never reaches the weights, not as a task without signal. At step 1 a KL of 0 proves nothing
    (the policy is the reference), and a KL that moved means the weights did."""
    def step(at: int, kl: float) -> RunRecord:
        run = RunRecord("log", "train.log", console=True)
        for name, value in (("reward", 0.34), ("reward_std", 0.44), ("zero_std_frac", 0.0), ("loss", 0.0),
                            ("grad_norm", 0.0), ("kl", kl)):
            run.put(at, name, value)
        return run

    what, first_bad, explanation, _ = cause.decide(step(5, 0.0), timeline.anomalies(step(5, 0.0)))
    assert (what, first_bad) == ("no_learning_signal", 5) and "although the groups' rewards differ" in explanation
    assert decide(step(1, 0.0))[0] != "no_learning_signal"
    assert decide(step(5, 0.002))[0] != "no_learning_signal"


def test_every_completion_cut_at_the_limit_from_the_start_is_the_budget_not_the_task_nor_the_wiring():
    """Answers cut off before they end all score alike: groups without signal and a reward that never scored
    are what a completion budget too small for the task looks like, when nearly every completion ran to it."""
    cut = [0.975] + [1.0] * 9
    alike = record([0.02] + [0.0] * 9, zero_std_frac=[0.97] + [1.0] * 9, truncated_frac=cut, grad_norm=[0.0] * 10)
    assert decide(alike) == ("truncation", 1)
    assert decide(record([0.0] * 10, zero_std_frac=[1.0] * 10, truncated_frac=cut)) == ("truncation", 1)
    # with the completions ending, the same groups are a task without signal, and the same zeros an unwired reward
    ended = [0.1] * 10
    assert decide(record([0.02] + [0.0] * 9, zero_std_frac=[0.97] + [1.0] * 9, truncated_frac=ended,
                         grad_norm=[0.0] * 10)) == ("no_learning_signal", 1)
    assert decide(record([0.0] * 10, zero_std_frac=[1.0] * 10, truncated_frac=ended)) == ("reward_not_wired", 1)


def test_a_kl_already_large_at_the_first_logged_step_says_the_reference_is_not_the_starting_model():
    cut = [1.0] * 10
    far = record([0.0] * 10, zero_std_frac=[1.0] * 10, truncated_frac=cut, kl=[10832.9, 1678.4] + [5.0] * 8)
    explanation = cause.decide(far, timeline.anomalies(far))[2]
    assert "already 1.083e+04 at the first logged step (1)" in explanation and "reference" in explanation
    near = record([0.0] * 10, zero_std_frac=[1.0] * 10, truncated_frac=cut, kl=[0.001] + [5.0] * 9)
    assert "first logged step" not in cause.decide(near, timeline.anomalies(near))[2]
