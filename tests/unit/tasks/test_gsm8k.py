from pathlib import Path

import pytest

from grpo.config import ConfigError, TaskConfig
from grpo.tasks import build_task
from grpo.tasks.gsm8k import GSM8KTask, read_gsm8k_jsonl

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data" / "gsm8k"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_reads_question_and_gold_after_the_hashes(tmp_path):
    write(tmp_path / "train.jsonl", ['{"question": "q1", "answer": "work\\n#### 1,234"}', ""])
    write(tmp_path / "test.jsonl", ['{"question": "q2", "answer": "#### -5"}'])
    task = GSM8KTask(str(tmp_path))
    assert task.num_train == 1
    assert task.train_problem(0, seed=0).gold == "1,234"
    assert [p.gold for p in task.eval_problems(None)] == ["-5"]


def test_an_answer_without_hashes_keeps_an_empty_gold_that_is_unscorable(tmp_path):
    from grpo.rewards import math_reward

    [problem] = read_gsm8k_jsonl(write(tmp_path / "x.jsonl", ['{"question": "q", "answer": "no marker"}']), "x")
    assert problem.gold == "" and math_reward("\\boxed{3}", problem.gold) is None


def test_a_bad_line_names_the_file_and_line(tmp_path):
    path = write(tmp_path / "train.jsonl", ['{"question": "q", "answer": "#### 1"}', '{"question": "q"}'])
    with pytest.raises(ConfigError, match=r"train.jsonl:2: .*'question' and 'answer'"):
        read_gsm8k_jsonl(path, "train")


def test_a_missing_directory_says_what_to_set(tmp_path):
    with pytest.raises(ConfigError, match="set task.path"):
        build_task(TaskConfig(name="gsm8k", path=str(tmp_path / "nope")))


def test_epochs_reshuffle_and_cover_every_problem(tmp_path):
    rows = [f'{{"question": "q{i}", "answer": "#### {i}"}}' for i in range(10)]
    write(tmp_path / "train.jsonl", rows)
    write(tmp_path / "test.jsonl", rows[:2])
    task = GSM8KTask(str(tmp_path), max_train_problems=8)
    epoch0 = [task.train_problem(i, seed=0).id for i in range(8)]
    epoch1 = [task.train_problem(i, seed=0).id for i in range(8, 16)]
    assert sorted(epoch0) == sorted(epoch1) and len(set(epoch0)) == 8
    assert epoch0 != epoch1


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared GSM8K data not present")
def test_the_real_gsm8k_files_load_with_every_gold_parsed():
    task = GSM8KTask(str(SHARED))
    assert task.num_train == 7473 and len(task.eval_problems(None)) == 1319
    assert all(p.gold for p in task.eval_problems(None))
