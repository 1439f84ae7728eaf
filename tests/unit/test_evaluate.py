"""Evaluation's accuracy is the fraction of answers judged correct (reward >= task.correct_threshold), never a
mean reward: a shaped reward above 1 cannot make it pass 100%."""

from grpo.config import ArithConfig, TaskConfig
from grpo.evaluate import evaluate, merge_evaluations
from grpo.policy.models import build_char_tokenizer
from grpo.rewards import Reward, extract_answer
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus
from grpo.tasks.arith import ArithTask


class AnswerEngine(RolloutEngine):
    """Answers every prompt with the next of `texts`, in turn."""

    def __init__(self, texts):
        self.texts, self.i = texts, 0

    def generate(self, prompts, params, seeds=None):
        out = []
        for _ in prompts:
            text = self.texts[self.i % len(self.texts)]
            self.i += 1
            out.append(Completion([5, 6], [-0.1, -0.1], text, "stop", SampleStatus.OK))
        return out


def shaped(completions, **kwargs):
    """1.125 for a right answer (1 plus a bonus), 0.1 for any other."""
    return [1.125 if c == "right" else 0.1 for c in completions]


def test_accuracy_is_the_fraction_judged_correct_not_the_mean_reward():
    problems = ArithTask(ArithConfig()).eval_problems(4)
    engine = AnswerEngine(["right", "wrong", "right", "wrong"])
    result = evaluate(engine, build_char_tokenizer(), problems, TaskConfig(), [Reward("shaped", shaped)],
                      max_new_tokens=4)
    assert result["accuracy"] == 0.5
    assert abs(result["mean_reward"] - (1.125 + 0.1) / 2) < 1e-9
    high = evaluate(AnswerEngine(["right"]), build_char_tokenizer(), problems, TaskConfig(correct_threshold=2.0),
                    [Reward("shaped", shaped)], max_new_tokens=4)
    assert high["accuracy"] == 0.0  # the threshold says what counts as correct


def test_pass_at_k_counts_answers_over_the_threshold():
    problems = ArithTask(ArithConfig()).eval_problems(2)
    # greedy: 2 answers; then 3 samples per problem: problem 0 gets one right, problem 1 none
    engine = AnswerEngine(["wrong", "wrong", "wrong", "right", "wrong", "wrong", "wrong", "wrong"])
    result = evaluate(engine, build_char_tokenizer(), problems, TaskConfig(), [Reward("shaped", shaped)],
                      max_new_tokens=4, samples=3)
    assert result["pass@3"] == 0.5 and abs(result["sample_accuracy"] - 1 / 6) < 1e-9


def test_ranks_shares_merge_over_the_scored_rows():
    # Rank 0: 2 rows, both scored, 1 right; rank 1: 2 rows, 1 scored and right. Over the 3 scored rows: 2/3.
    parts = [{"n": 2, "scored": 2, "unscorable": 0, "accuracy": 0.5, "mean_reward": 0.5, "empty": 0, "retried": 0,
              "mean_length": 4.0, "pass@2": 0.5, "maj@2": 0.5, "sample_accuracy": 0.25, "unscorable_samples": 0},
             {"n": 2, "scored": 1, "unscorable": 1, "accuracy": 1.0, "mean_reward": 1.0, "empty": 0, "retried": 1,
              "mean_length": 2.0, "pass@2": 1.0, "maj@2": 1.0, "sample_accuracy": 1.0, "unscorable_samples": 1}]
    merged = merge_evaluations(parts)
    assert (merged["n"], merged["scored"], merged["unscorable"], merged["retried"]) == (4, 3, 1, 1)
    for key in ("accuracy", "mean_reward", "pass@2", "maj@2"):
        assert abs(merged[key] - 2 / 3) < 1e-9, key
    assert abs(merged["sample_accuracy"] - 0.5) < 1e-9 and merged["unscorable_samples"] == 1
    assert merged["mean_length"] == 3.0  # over every greedy answer


def test_several_rewards_report_each_one_s_own_mean_over_the_answers_it_scored():
    """As TRL's eval_rewards/NAME/mean: a reward's None (it does not apply) is left out of its own mean."""
    def some(completions, **kwargs):
        return [None if c == "wrong" else 2.0 for c in completions]

    problems = ArithTask(ArithConfig()).eval_problems(4)
    result = evaluate(AnswerEngine(["right", "wrong", "right", "wrong"]), build_char_tokenizer(), problems,
                      TaskConfig(), [Reward("shaped", shaped), Reward("some", some)], max_new_tokens=4)
    assert abs(result["reward/shaped/mean"] - (1.125 + 0.1) / 2) < 1e-9 and result["reward/shaped/scored"] == 4
    assert result["reward/some/mean"] == 2.0 and result["reward/some/scored"] == 2
    alone = evaluate(AnswerEngine(["right"]), build_char_tokenizer(), problems, TaskConfig(),
                     [Reward("shaped", shaped)], max_new_tokens=4)
    assert not any(key.startswith("reward/") for key in alone)  # one reward's mean is mean_reward


def test_ranks_shares_of_a_reward_s_own_mean_merge_over_the_answers_it_scored():
    base = {"n": 2, "scored": 2, "unscorable": 0, "accuracy": 0.0, "mean_reward": 0.0, "empty": 0, "retried": 0,
            "mean_length": 1.0}
    merged = merge_evaluations([{**base, "reward/fmt/mean": 1.0, "reward/fmt/scored": 1},
                                {**base, "reward/fmt/mean": 4.0, "reward/fmt/scored": 2}])
    assert merged["reward/fmt/scored"] == 3 and abs(merged["reward/fmt/mean"] - 3.0) < 1e-9


def boxed_five(completions, **kwargs):
    """A reward of one's own that reads the boxed answer."""
    return [float("\\boxed{5}" in c) for c in completions]


def test_maj_at_k_votes_on_the_answer_a_completion_states_with_a_reward_of_ones_own():
    problems = ArithTask(ArithConfig()).eval_problems(1)
    # Four different texts: voting on the text, the first (wrong) would win; three of them state 5.
    engine = AnswerEngine(["\\boxed{5}", "\\boxed{6}", "2 + 3 is \\boxed{5}", "so \\boxed{5}", "Adding: \\boxed{5}"])
    result = evaluate(engine, build_char_tokenizer(), problems, TaskConfig(), [Reward("boxed_five", boxed_five)],
                      max_new_tokens=4, samples=4, keep_answers=True)
    assert result["maj@4"] == 1.0 and result["answers"][0]["majority"] == {"vote": "5", "votes": 3, "correct": True}


def test_a_bare_last_number_is_read_as_the_answer_unless_told_not_to():
    assert extract_answer("Lyon, 2 hours away") == "2"
    assert extract_answer("Lyon, 2 hours away", last_number=False) is None
    assert extract_answer("Lyon, \\boxed{2}", last_number=False) == "2"  # a stated answer still is one
