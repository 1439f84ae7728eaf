"""The rollout collector: statuses, retries, whole-group validity, refill and dynamic sampling."""

import json
from collections import deque

from grpo.config import ArithConfig, RolloutConfig, TaskConfig
from grpo.policy.models import build_char_tokenizer
from grpo.rewards import Reward, math_batch_reward
from grpo.rollout.collector import RolloutCollector, rollout_stats
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus
from grpo.tasks import build_task
from grpo.tasks.arith import ArithTask


class ScriptedEngine(RolloutEngine):
    """Answers each prompt with the next scripted (text, status); 'GOLD' is replaced by the right answer."""

    def __init__(self, script):
        self.script = deque(script)
        self.calls = []

    def generate(self, prompts, params, seeds=None):
        self.calls.append(len(prompts))
        out = []
        for _ in prompts:
            text, status = self.script.popleft() if self.script else ("\\boxed{0}", SampleStatus.OK)
            tokens = [] if status in (SampleStatus.FAILED, SampleStatus.EMPTY) else [5, 6]
            out.append(Completion(tokens, [-0.1] * len(tokens), text, "stop", status))
        return out


def collector(engine, record=None, **rollout):
    cfg = RolloutConfig(problems_per_step=2, samples_per_problem=2, retry_backoff_s=0.0, **rollout)
    delays = []
    c = RolloutCollector(engine, build_char_tokenizer(), ArithTask(ArithConfig(min_digits=1, max_digits=1)),
                         TaskConfig(), cfg, [Reward("math", math_batch_reward)], 0, 10, sleep=delays.append, record=record)
    return c, delays


class Events:
    """What the collector records: (kind, step, message, evidence)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str, dict]] = []

    def __call__(self, kind, step, message, **evidence) -> None:
        self.seen.append((kind, step, message, evidence))


OK, FAIL, EMPTY = SampleStatus.OK, SampleStatus.FAILED, SampleStatus.EMPTY


def test_failed_samples_are_retried_with_backoff_and_never_scored():
    engine = ScriptedEngine([("a", OK), ("", FAIL), ("b", OK), ("c", OK), ("d", OK)])
    c, delays = collector(engine, max_retries=2)
    c.cfg.retry_backoff_s = 1.0
    batch = c.collect(step=1, data_index=0)
    assert engine.calls == [4, 1]  # one retry of the one failed sample
    assert len(delays) == 1 and 1.0 <= delays[0] <= 2.0  # backoff with jitter
    assert len(batch.groups) == 2 and batch.retries == 1
    assert batch.attempts["failed"] == 1 and batch.attempts["ok"] == 4
    assert all(s.status == OK and s.reward is not None for g in batch.groups for s in g.samples)


def test_a_group_with_a_sample_that_keeps_failing_is_dropped_whole_and_refilled():
    script = [("", FAIL), ("x", OK), ("y", OK), ("z", OK), ("", FAIL), ("", FAIL)]  # slot 0 fails 3 times
    engine = ScriptedEngine(script)
    c, _ = collector(engine, max_retries=2, max_refill_rounds=2)
    batch = c.collect(step=1, data_index=0)
    assert batch.groups_dropped_invalid == 1
    assert len(batch.groups) == 2 and batch.rounds == 2  # a second round refilled the lost group
    assert batch.next_data_index == 3  # three problems consumed
    stats = rollout_stats(batch)
    assert stats.attempts["failed"] == 3 and stats.groups_dropped_invalid == 1
    m = stats.metrics()
    assert m["rollout/failed"] == 3 and m["groups/dropped_invalid"] == 1
    assert m["rollout/failed_frac"] == 3 / m["rollout/attempts"]


def test_a_sample_a_retry_brings_back_is_recovered_and_the_failed_round_recorded():
    engine = ScriptedEngine([("a", OK), ("", FAIL), ("b", OK), (" ", EMPTY), ("c", OK), ("d", OK)])
    events = Events()
    c, _ = collector(engine, events, max_retries=2)
    m = rollout_stats(c.collect(step=3, data_index=0)).metrics()
    assert m["rollout/failed_frac"] == 2 / 6  # the attempts that failed, as before
    assert (m["rollout/recovered"], m["rollout/unrecovered"], m["rollout/unrecovered_frac"]) == (2, 0, 0.0)
    assert m["groups/trained"] == 2
    assert events.seen == [("rollout_failed", 3, "step 3: retrying 2 samples (1 failed, 1 empty) in 0.0s (attempt 1)",
                            {"samples": 2, "statuses": {"failed": 1, "empty": 1}, "attempt": 1, "retried": True})]


def test_a_sample_still_failed_after_every_retry_is_unrecovered_and_said_so():
    script = [("", FAIL), ("x", OK), ("y", OK), ("z", OK), ("", FAIL), ("", FAIL)]  # slot 0 fails 3 times
    events = Events()
    c, _ = collector(ScriptedEngine(script), events, max_retries=2, max_refill_rounds=2)
    m = rollout_stats(c.collect(step=1, data_index=0)).metrics()
    # 4 samples of the first round (one never recovered), 2 of the round that refilled its group
    assert (m["rollout/recovered"], m["rollout/unrecovered"], m["rollout/unrecovered_frac"]) == (0, 1, 1 / 6)
    assert [(e[3]["retried"], e[3]["statuses"]) for e in events.seen] == [
        (True, {"failed": 1}), (True, {"failed": 1}), (False, {"failed": 1})]
    assert events.seen[-1][2] == "step 1: 1 sample (failed) still failed after 2 retries: their groups are dropped"


def test_refill_is_bounded_when_everything_fails():
    engine = ScriptedEngine([("", FAIL)] * 1000)
    c, _ = collector(engine, max_retries=1, max_refill_rounds=2)
    batch = c.collect(step=1, data_index=0)
    assert batch.groups == [] and batch.rounds == 3
    assert engine.calls == [4, 4, 4, 4, 4, 4]  # 3 rounds x (first try + 1 retry)
    assert rollout_stats(batch).rewards is None and "reward/mean" not in rollout_stats(batch).metrics()
    assert rollout_stats(batch).metrics()["rollout/failed_frac"] == 1.0
    assert rollout_stats(batch).metrics()["rollout/unrecovered_frac"] == 1.0


def test_empty_responses_are_failures_not_zero_rewards():
    engine = ScriptedEngine([("", EMPTY)] * 8)
    c, _ = collector(engine, max_retries=0, max_refill_rounds=0)
    batch = c.collect(step=1, data_index=0)
    assert batch.groups == [] and batch.attempts["empty"] == 4
    assert rollout_stats(batch).metrics()["response/empty_frac"] == 1.0


def test_zero_variance_groups_are_counted_and_filtered_when_asked():
    # Every answer wrong: every group has zero variance.
    wrong = [("\\boxed{-1}", OK)] * 100
    c, _ = collector(ScriptedEngine(wrong))
    batch = c.collect(step=1, data_index=0)
    assert len(batch.groups) == 2 and rollout_stats(batch).metrics()["groups/zero_std_frac"] == 1.0

    c, _ = collector(ScriptedEngine(wrong), filter_zero_variance=True, max_refill_rounds=3)
    batch = c.collect(step=1, data_index=0)
    assert batch.groups == [] and batch.groups_dropped_zero_variance == 8 and batch.rounds == 4


def test_a_raising_reward_makes_samples_unscorable():
    c, _ = collector(ScriptedEngine([]))

    def bad_reward(completions, **columns):
        raise ValueError("boom")

    c.rewards = [Reward("bad", bad_reward)]
    batch = c.collect(step=1, data_index=0)
    assert batch.groups == [] and batch.attempts["unscorable"] == 4 * 3  # 3 rounds, nothing usable
    assert batch.attempts["ok"] == 0
    assert all("boom" in e for e in batch.reward_errors)


def test_reward_functions_get_every_column_of_the_problems_rows(tmp_path):
    rows = [{"chat": [{"role": "user", "content": f"Say {t}"}], "label": t, "target": t} for t in "xy"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[0]) + "\n")
    task_cfg = TaskConfig(name="dataset", path=str(tmp_path), prompt_column="chat", answer_column="label")
    seen = []

    def target_reward(completions, target, **columns):
        seen.append(columns)
        return [float(t == "x") for t in target]

    engine = ScriptedEngine([])
    c = RolloutCollector(engine, build_char_tokenizer(), build_task(task_cfg), task_cfg,
                         RolloutConfig(problems_per_step=2, samples_per_problem=2), [Reward("target", target_reward)], 0, 10)
    batch = c.collect(step=1, data_index=0)
    assert sorted(seen[0]) == ["completion_ids", "gold", "label", "log_extra", "log_metric", "prompts", "question",
                               "trainer_state"]
    by_target = {g.problem.columns["target"]: [s.reward for s in g.samples] for g in batch.groups}
    assert by_target == {"x": [1.0, 1.0], "y": [0.0, 0.0]}
    assert sorted(seen[0]["question"]) == ["Say x", "Say x", "Say y", "Say y"]
    assert seen[0]["gold"] == seen[0]["label"]
    assert [chat[0]["content"] for chat in seen[0]["prompts"]] == seen[0]["question"]


def test_a_retry_is_named_by_what_is_retried():
    """Issue 25 item 13: not '1 failed samples' for one empty answer."""
    from grpo.rollout.collector import retry_note

    assert retry_note(["empty"]) == "1 sample (empty)"
    assert retry_note(["failed", "empty", "failed"]) == "3 samples (2 failed, 1 empty)"
