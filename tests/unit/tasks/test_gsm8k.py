import json
from pathlib import Path

import pytest

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.rewards import gsm8k_gold, math_reward
from grpo.tasks import build_task
from grpo.tasks.gsm8k import GSM8KTask, checkout_dir

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data" / "gsm8k"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def gsm8k(path, **keys) -> GSM8KTask:
    return GSM8KTask(TaskConfig(name="gsm8k", path=str(path), **keys))


def test_reads_question_and_gold_after_the_hashes(tmp_path):
    write(tmp_path / "train.jsonl", ['{"question": "q1", "answer": "work\\n#### 1,234"}', ""])
    write(tmp_path / "test.jsonl", ['{"question": "q2", "answer": "#### -5"}'])
    task = gsm8k(tmp_path)
    assert task.num_train == 1
    assert task.train_problem(0, seed=0).gold == "1,234"
    assert task.train_problem(0, seed=0).columns == {"answer": "work\n#### 1,234"}  # the prompt is `question`
    assert [p.gold for p in task.eval_problems(None)] == ["-5"]


def test_an_answer_without_hashes_keeps_an_empty_gold_that_is_unscorable(tmp_path, caplog):
    write(tmp_path / "train.jsonl", ['{"question": "q", "answer": "no marker"}', '{"question": "r", "answer": "#### 2"}'])
    write(tmp_path / "test.jsonl", ['{"question": "q", "answer": "#### 1"}'])
    with caplog.at_level("INFO"):
        task = gsm8k(tmp_path)
    problem = next(p for p in (task.train_problem(i, seed=0) for i in range(2)) if p.question == "q")
    assert problem.gold == "" and math_reward("\\boxed{3}", problem.gold) is None
    assert f"2 training problems from {tmp_path / 'train.jsonl'} (1 without a gold answer, e.g. " in caplog.text


def test_answers_without_hashes_in_every_row_are_refused_at_load(tmp_path):
    write(tmp_path / "train.jsonl", ['{"question": "q", "answer": "The answer is 4."}'])
    write(tmp_path / "test.jsonl", ['{"question": "q", "answer": "#### 1"}'])
    with pytest.raises(ConfigError) as info:
        gsm8k(tmp_path)
    assert str(info.value).startswith("GSM8K's gold pattern '####\\s*(.*)' matches no answer in ")
    assert f"{tmp_path / 'train.jsonl'}:1: 'The answer is 4.'. For data in another format use task.name=dataset" in (
        str(info.value))


def test_a_line_without_a_question_names_the_file_and_line(tmp_path):
    write(tmp_path / "train.jsonl", ['{"question": "q", "answer": "#### 1"}', '{"answer": "#### 2"}'])
    write(tmp_path / "test.jsonl", ['{"question": "q", "answer": "#### 1"}'])
    with pytest.raises(ConfigError, match=r"train.jsonl:2: no prompt \(column 'question' is empty\)"):
        gsm8k(tmp_path)


def test_a_file_without_the_question_column_names_the_columns_it_has(tmp_path):
    write(tmp_path / "train.jsonl", ['{"problem": "q", "answer": "#### 1"}'])
    write(tmp_path / "test.jsonl", ['{"question": "q", "answer": "#### 1"}'])
    with pytest.raises(ConfigError, match=r"train.jsonl has no column 'question' \(GSM8K's question\); "
                                          r"its columns: problem, answer$"):
        gsm8k(tmp_path)


def test_a_missing_directory_says_what_to_set(tmp_path):
    with pytest.raises(ConfigError, match="no directory .*nope; set it to a directory with train.jsonl"):
        build_task(TaskConfig(name="gsm8k", path=str(tmp_path / "nope")))


@pytest.mark.parametrize("key,value", [("prompt_column", "problem"), ("train_files", ["x.jsonl"]),
                                       ("gold_pattern", "(.*)")])
def test_keys_for_other_data_are_refused_rather_than_ignored(tmp_path, key, value):
    with pytest.raises(ConfigError, match=f"task.{key} is for task.name=dataset"):
        gsm8k(tmp_path, **{key: value})


def test_epochs_reshuffle_and_cover_every_problem(tmp_path):
    rows = [f'{{"question": "q{i}", "answer": "#### {i}"}}' for i in range(10)]
    write(tmp_path / "train.jsonl", rows)
    write(tmp_path / "test.jsonl", rows[:2])
    task = gsm8k(tmp_path, max_train_problems=8)
    epoch0 = [task.train_problem(i, seed=0).id for i in range(8)]
    epoch1 = [task.train_problem(i, seed=0).id for i in range(8, 16)]
    assert sorted(epoch0) == sorted(epoch1) and len(set(epoch0)) == 8
    assert epoch0 != epoch1


# --- finding the data without task.path --------------------------------------------------------


def gsm8k_dir(root: Path) -> Path:
    data = root / "gsm8k"
    data.mkdir(parents=True)
    write(data / "train.jsonl", ['{"question": "from ' + str(root) + '", "answer": "#### 1"}'])
    write(data / "test.jsonl", ['{"question": "q", "answer": "#### 1"}'])
    return data


def test_grpo_data_names_where_gsm8k_is(tmp_path, monkeypatch):
    gsm8k_dir(tmp_path / "mine")
    monkeypatch.setenv("GRPO_DATA", str(tmp_path / "mine"))
    task = build_task(TaskConfig(name="gsm8k"))
    assert task.train_problem(0, 0).question == f"from {tmp_path / 'mine'}"


def test_a_wrong_grpo_data_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_DATA", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=f"GSM8K not found; looked in \\$GRPO_DATA/gsm8k: {tmp_path}/empty/gsm8k\\. "
                                          "Set task.path"):
        build_task(TaskConfig(name="gsm8k"))


def test_without_grpo_data_the_working_directory_comes_first(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPO_DATA", raising=False)
    gsm8k_dir(tmp_path / "shared" / "data")
    (tmp_path / "checkout").mkdir()
    monkeypatch.chdir(tmp_path / "checkout")
    assert build_task(TaskConfig(name="gsm8k")).train_problem(0, 0).question == f"from {tmp_path / 'shared/data'}"


@pytest.mark.skipif(checkout_dir() is None or not (checkout_dir().parent / "shared" / "data" / "gsm8k").is_dir(),
                    reason="grpo not run from a checkout next to shared/data/gsm8k")
def test_from_any_directory_gsm8k_is_found_next_to_the_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPO_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    assert build_task(TaskConfig(name="gsm8k", max_train_problems=3)).num_train == 3


def test_the_error_names_every_place_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("GRPO_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("grpo.tasks.gsm8k.checkout_dir", lambda: tmp_path / "checkout")
    with pytest.raises(ConfigError) as info:
        build_task(TaskConfig(name="gsm8k"))
    message = str(info.value)
    assert f"../shared/data/gsm8k from the working directory: {tmp_path.parent}/shared/data/gsm8k" in message
    assert f"../shared/data/gsm8k from the checkout: {tmp_path}/shared/data/gsm8k" in message
    assert "GRPO_DATA to a directory holding gsm8k/" in message and "\n" not in message


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared GSM8K data not present")
def test_the_real_gsm8k_files_load_with_every_gold_as_before():
    task = gsm8k(SHARED)
    assert task.num_train == 7473 and len(task.eval_problems(None)) == 1319
    rows = [json.loads(line) for line in (SHARED / "test.jsonl").read_text().splitlines()]
    assert [p.gold for p in task.eval_problems(None)] == [gsm8k_gold(r["answer"]) for r in rows]
    assert all(p.gold for p in task.eval_problems(None))
