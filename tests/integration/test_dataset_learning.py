"""Acceptance: the tiny model learns from a user's own JSONL, with custom column names, chat-message prompts and a
user reward function (named by import path) that reads an extra column of each row."""

import json
import random
import statistics

from .helpers import metric_lines, run_tiny


def target_char_reward(completions: list[list[dict]], target: list[str], gold: list[str], **columns
                       ) -> list[float | None]:
    """The fraction of a completion's characters that are the row's target character. Chat data: as in TRL,
    each completion is a list of one assistant message."""
    assert gold == target  # the answer column's gold arrives too, beside the data's own columns
    texts = [completion[0]["content"] for completion in completions]
    return [sum(ch == t for ch in text) / len(text) if text else 0.0 for text, t in zip(texts, target)]


def write_rows(path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        letter = rng.choice("ab")
        rows.append({
            "conversation": [{"role": "system", "content": "Answer with one letter, repeated."},
                             {"role": "user", "content": f"Write the letter {letter}."}],
            "reference": letter,
            "target": letter,
            "source": f"row-{i}",
        })
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_the_tiny_model_learns_a_users_chat_dataset_with_a_users_reward(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_rows(data / "mine-train.jsonl", 64, seed=0)
    write_rows(data / "mine-test.jsonl", 4, seed=1)
    run_dir = tmp_path / "r"
    run_tiny([f"run_dir={run_dir}", "task.name=dataset", f"task.train_files=[{data / 'mine-train.jsonl'}]",
              f"task.test_files=[{data / 'mine-test.jsonl'}]", "task.prompt_column=conversation",
              "task.answer_column=reference", f"task.reward={__name__}:target_char_reward", "train.steps=30",
              "actor.lr=5e-3", "checkpoint.every_steps=0", "checkpoint.every_minutes=0",
              "eval.before_training=true", "eval.after_training=true"])
    lines = metric_lines(run_dir)
    assert all(line["rollout/unscorable"] == 0 for line in lines)  # every row's columns reached the reward
    rewards = [line["reward/mean"] for line in lines]
    first, last = statistics.fmean(rewards[:5]), statistics.fmean(rewards[-5:])
    assert last > first + 0.2, (first, last)
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert [(e["label"], e["n"], e["unscorable"]) for e in evals] == [("before", 4, 0), ("after", 4, 0)]
