"""TRL's reward functions train unchanged: the examples below are copied as they are from TRL's documentation
(docs/source/grpo_trainer.md: the quick start, and "Using a custom reward function", examples 2 and 3)."""

import json
import re

import pytest

from grpo.cli import main

from .helpers import metric_lines


# Dummy reward function: count the number of unique characters in the completions
def reward_num_unique_chars(completions, **kwargs):
    return [len(set(c)) for c in completions]


def format_reward_func(completions, **kwargs):
    """Reward function that checks if the completion has a specific format."""
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def reward_func(completions, ground_truth, **kwargs):
    # Regular expression to capture content inside \boxed{}
    matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
    contents = [match.group(1) if match else "" for match in matches]
    # Reward 1 if the content is the same as the ground truth, 0 otherwise
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]
# (end of TRL's examples)


SEEN: list[dict] = []


def sees_every_keyword(prompts, completions, completion_ids, trainer_state, **kwargs):
    SEEN.append({"prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                 "step": trainer_state.global_step, "columns": sorted(kwargs)})
    return [0.0] * len(completions)


def write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_trl_reward_functions_train_unchanged_with_weights_each_logged(tmp_path):
    rows = [{"prompt": f"What is {i % 5} + {i % 3}?", "ground_truth": str(i % 5 + i % 3)} for i in range(16)]
    write(tmp_path / "train.jsonl", rows)
    write(tmp_path / "test.jsonl", rows[:4])
    run_dir = tmp_path / "r"
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", "train.steps=3", "task.name=dataset",
                 f"task.path={tmp_path}", "task.answer_column=ground_truth",
                 f"task.reward=[{__name__}:reward_num_unique_chars,{__name__}:reward_func]",
                 "task.reward_weights=[0.1,1.0]"]) == 0
    lines = metric_lines(run_dir)
    assert len(lines) == 3
    for line in lines:
        unique, boxed = line["reward/reward_num_unique_chars/mean"], line["reward/reward_func/mean"]
        assert unique > 0 and boxed == 0.0  # a random tiny model writes no \boxed{}
        assert line["reward/mean"] == pytest.approx(0.1 * unique + 1.0 * boxed, rel=1e-5)


def test_chat_data_gets_prompts_and_completions_as_messages_as_in_trl(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": f"Say {i}."}], "answer": str(i)} for i in range(8)]
    write(tmp_path / "train.jsonl", rows)
    write(tmp_path / "test.jsonl", rows[:2])
    SEEN.clear()
    assert main(["train", "--config", "tiny", f"run_dir={tmp_path / 'r'}", "train.steps=1", "task.name=dataset",
                 f"task.path={tmp_path}", f"task.reward=[{__name__}:format_reward_func,{__name__}:sees_every_keyword]",
                 "eval.after_training=false"]) == 0
    check, step = SEEN[0], SEEN[-1]  # the check at start (gold answers as completions), then step 1
    assert check["step"] == 0 and check["completions"] == [[{"role": "assistant", "content": p[0]["content"][4:-1]}]
                                                           for p in check["prompts"]]  # "Say 3." -> gold "3"
    assert step["step"] == 0  # TRL's global_step while step 1 is scored: no step completed
    # The prompt column is `prompts` only, as in TRL; TRL's log_extra and log_metric beside the columns.
    assert check["columns"] == ["answer", "gold", "log_extra", "log_metric", "question"]
    assert all(isinstance(p, list) and p[-1]["role"] == "user" for p in step["prompts"])
    assert all(c[0]["role"] == "assistant" and isinstance(c[0]["content"], str) for c in step["completions"])
    assert all(all(isinstance(t, int) for t in ids) for ids in step["completion_ids"])
    assert "reward/format_reward_func/mean" in metric_lines(tmp_path / "r")[0]
