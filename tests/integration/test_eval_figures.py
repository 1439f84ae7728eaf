"""`grpo eval` and `api.evaluate` through their front doors, with the answers scripted: every figure over the
same rows, maj@k voting on answers as the reward sees them, and --output holding every sampled answer."""

from __future__ import annotations

import json

import pytest

from grpo import api
from grpo.cli import main
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus


class ScriptedEngine(RolloutEngine):
    """Stands in for the model's generation: the first call (greedy) answers `greedy[i]` to problem i, the
    second (k samples a problem, in problem order) answers `sampled[i][j]`."""

    greedy: list[str] = []
    sampled: list[list[str]] = []

    def __init__(self, model, tokenizer, batch_size=64) -> None:
        self.calls = 0

    def generate(self, prompts, params, seeds=None):
        texts = self.greedy if self.calls == 0 else [t for row in self.sampled for t in row]
        self.calls += 1
        assert len(texts) == len(prompts)
        return [Completion([5, 6], [-0.1, -0.1], t, "stop", SampleStatus.OK) for t in texts]


@pytest.fixture
def scripted(monkeypatch):
    def script(greedy: list[str], sampled: list[list[str]]) -> None:
        monkeypatch.setattr(ScriptedEngine, "greedy", greedy)
        monkeypatch.setattr(ScriptedEngine, "sampled", sampled)
        monkeypatch.setattr("grpo.rollout.engines.embedded.EmbeddedEngine", ScriptedEngine)
    return script


def write_rows(path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def run_eval(tmp_path, rows: list[dict], *extra: str) -> dict:
    data = write_rows(tmp_path / "test.jsonl", rows)
    out = tmp_path / "eval.json"
    assert main(["eval", "--model", "tiny", "--task", "dataset", f"task.test_files=[{data}]", "--samples", "4",
                 "--max-new-tokens", "4", "--output", str(out), *extra]) == 0
    return json.loads(out.read_text())


# Item 2: half the rows have no gold; every answer to the others is right.
HALF_WITHOUT_GOLD = [{"prompt": "2 + 3?", "answer": "5"}, {"prompt": "Say hi", "answer": ""},
                     {"prompt": "3 + 4?", "answer": "7"}, {"prompt": "Say bye", "answer": ""},
                     {"prompt": "1 + 1?", "answer": "2"}, {"prompt": "Say yes", "answer": ""},
                     {"prompt": "2 + 2?", "answer": "4"}, {"prompt": "Say no", "answer": ""}]
RIGHT = ["The answer is \\boxed{5}.", "hi", "\\boxed{7}", "bye", "\\boxed{2}", "yes", "\\boxed{4}", "no"]


def test_every_figure_is_over_the_same_scored_rows(tmp_path, scripted, capsys):
    scripted(RIGHT, [[a] * 4 for a in RIGHT])
    result = run_eval(tmp_path, HALF_WITHOUT_GOLD)
    assert (result["n"], result["scored"], result["unscorable"]) == (8, 4, 4)
    assert result["accuracy"] == result["pass@4"] == result["maj@4"] == result["sample_accuracy"] == 1.0
    assert result["unscorable_samples"] == 0
    out = capsys.readouterr().out
    assert "every figure is over the 4 scored rows of 8 (4 unscorable: the reward gave them no score)" in out
    assert "sample_accuracy over their 16 sampled answers" in out


def test_the_api_reports_the_same_denominators(tmp_path, scripted):
    scripted(RIGHT, [[RIGHT[i]] * 3 + ["\\boxed{0}"] for i in range(8)])
    result = api.evaluate("tiny", "tiny", dataset=HALF_WITHOUT_GOLD, rewards=["math"], samples=4,
                          max_new_tokens=4)
    assert (result["n"], result["scored"], result["unscorable"]) == (8, 4, 4)
    assert result["accuracy"] == result["pass@4"] == result["maj@4"] == 1.0
    assert result["sample_accuracy"] == 0.75


def test_a_runs_evaluations_say_the_same_rows_in_eval_jsonl_the_console_and_the_doctor(tmp_path, capsys):
    train = write_rows(tmp_path / "train.jsonl", [{"prompt": f"{i} + 1?", "answer": str(i + 1)} for i in range(8)])
    test = write_rows(tmp_path / "test.jsonl", HALF_WITHOUT_GOLD)
    run_dir = tmp_path / "r"
    assert main(["train", "--config", "tiny", "--run-dir", str(run_dir), "task.name=dataset",
                 f"task.train_files=[{train}]", f"task.test_files=[{test}]", "train.steps=1",
                 "eval.before_training=true", "eval.after_training=true", "eval.reward=math"]) == 0
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert [(e["label"], e["n"], e["scored"], e["unscorable"]) for e in evals] == [("before", 8, 4, 4),
                                                                                   ("after", 8, 4, 4)]
    out = capsys.readouterr().out
    assert out.count("every figure is over the 4 scored rows of 8 (4 unscorable") == 2
    assert "held-out greedy accuracy on the 4 scored problems of 8: " in out
    main(["doctor", str(run_dir)])
    assert f"step 1 (after): {evals[1]['accuracy']:.1%} of 4 scored rows (4 unscorable)" in capsys.readouterr().out


# Item 3: maj@k with rewards that are not math.
def exact_label(completions, gold, **kwargs):
    """1 when the completion is the label (case and spacing aside), else 0; None for a row without one."""
    return [None if not g else float(c.strip().rstrip(".").lower() == g.lower()) for c, g in zip(completions, gold)]


def names_the_gold(completions, gold, **kwargs):
    """Free text: 1 when the completion mentions the gold word."""
    return [float(g.lower() in c.lower()) for c, g in zip(completions, gold)]


LABELS = [{"prompt": "Great film!", "answer": "positive"}, {"prompt": "Dull.", "answer": "negative"}]


def test_maj_at_k_votes_on_labels_with_a_label_reward(tmp_path, scripted):
    scripted(["positive", "positive"],
             [["negative", "positive", "Positive.", "positive"],     # the label wins: right
              ["positive", "Positive", "negative", "neutral"]])      # a wrong label wins: wrong
    result = run_eval(tmp_path, LABELS, f"task.reward={__name__}:exact_label")
    assert result["pass@4"] == 1.0 and result["maj@4"] == 0.5
    assert [a["majority"] for a in result["answers"]] == [{"vote": "positive", "votes": 3, "correct": True},
                                                          {"vote": "positive", "votes": 2, "correct": False}]


def test_maj_at_k_votes_on_the_text_with_a_free_text_reward(tmp_path, scripted):
    rows = [{"prompt": "Capital of France?", "answer": "Paris"}, {"prompt": "Colour of the sky?", "answer": "blue"}]
    scripted(["Paris", "blue"],
             [["It is Paris.", "Lyon, 2 hours away", "it is  paris", "Marseille, 2 hours away"],
              ["The sky is green.", "the sky is green", "The sky is blue.", "Blue"]])
    result = run_eval(tmp_path, rows, f"task.reward={__name__}:names_the_gold")
    # Not the last number: "2" (two wrong answers) would win the first row.
    assert result["pass@4"] == 1.0 and result["maj@4"] == 0.5
    assert [a["majority"]["vote"] for a in result["answers"]] == ["it is paris", "the sky is green"]


def test_answers_vote_together_only_when_the_reward_judged_them_alike(tmp_path, scripted):
    # "The answer is positive" states the label, but the exact-label reward scores it wrong: such answers are
    # a vote of their own, apart from the bare "positive" it scores right.
    rows = [LABELS[0], {"prompt": "Loved it.", "answer": "positive"}]
    scripted(["positive", "positive"],
             [["The answer is positive", "positive", "The answer is positive", "negative"],
              ["The answer is positive", "positive", "positive", "The answer is negative"]])
    result = run_eval(tmp_path, rows, f"task.reward={__name__}:exact_label")
    assert result["pass@4"] == 1.0 and result["maj@4"] == 0.5
    assert [a["majority"] for a in result["answers"]] == [{"vote": "positive", "votes": 2, "correct": False},
                                                          {"vote": "positive", "votes": 2, "correct": True}]


def test_the_api_votes_with_a_callable_label_reward(tmp_path, scripted):
    scripted(["positive", "negative"], [["positive"] * 3 + ["negative"], ["negative"] * 2 + ["positive"] * 2])
    result = api.evaluate("tiny", "tiny", dataset=LABELS, rewards=[exact_label], samples=4, max_new_tokens=4)
    assert result["pass@4"] == 1.0 and result["maj@4"] == 1.0  # a tie goes to the answer sampled first


# Item 14: --output holds every sampled answer.
def test_output_holds_every_sampled_answer_under_its_problem(tmp_path, scripted):
    scripted(RIGHT[:2], [["\\boxed{5}", "\\boxed{6}", "\\boxed{5}", "\\boxed{ 5 }"], ["a", "b", "c", "d"]])
    result = run_eval(tmp_path, HALF_WITHOUT_GOLD[:2])
    first, second = result["answers"]
    assert first["completion"] == RIGHT[0] and first["reward"] == 1.0 and first["scored"] is True
    assert [s["completion"] for s in first["samples"]] == ["\\boxed{5}", "\\boxed{6}", "\\boxed{5}", "\\boxed{ 5 }"]
    assert [(s["reward"], s["correct"], s["vote"]) for s in first["samples"]] == [
        (1.0, True, "5"), (0.0, False, "6"), (1.0, True, "5"), (1.0, True, "5")]
    assert first["majority"] == {"vote": "5", "votes": 3, "correct": True}
    assert second["scored"] is False and [s["reward"] for s in second["samples"]] == [None] * 4
    assert second["majority"] is None


def test_the_api_keeps_every_sampled_answer(tmp_path, scripted):
    scripted(RIGHT[:1], [["\\boxed{5}", "\\boxed{6}", "\\boxed{6}", "x"]])
    result = api.evaluate("tiny", "tiny", dataset=HALF_WITHOUT_GOLD[:1], rewards=["math"], samples=4,
                          max_new_tokens=4, keep_answers=True)
    (answer,) = result["answers"]
    assert [s["completion"] for s in answer["samples"]] == ["\\boxed{5}", "\\boxed{6}", "\\boxed{6}", "x"]
    assert answer["majority"] == {"vote": "6", "votes": 2, "correct": False} and result["maj@4"] == 0.0
