"""The held-out split kept apart from training: task.held_out draws it out of data that has none, and held-out
problems that are also training problems are said at load."""

import logging

import pytest

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks import build_task

from .test_files import write_rows

ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(20)]


def one_file(tmp_path, rows=ROWS, **keys):
    write_rows(tmp_path / "all.jsonl", rows)
    return TaskConfig(name="dataset", train_files=[str(tmp_path / "all.jsonl")], **keys)


def training(task) -> list[str]:
    return [task.train_problem(i, seed=0).question for i in range(task.num_train)]


def test_held_out_problems_are_drawn_out_of_the_training_data_the_same_every_time(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="grpo.tasks.dataset")
    task = build_task(one_file(tmp_path, held_out=5))
    held = [p.question for p in task.eval_problems(None)]
    assert len(held) == 5 and task.num_train == 15
    assert not set(held) & set(training(task))  # never trained on
    assert set(held) | set(training(task)) == {r["prompt"] for r in ROWS}
    assert held == sorted(held, key=[r["prompt"] for r in ROWS].index)  # in the data's order
    assert "15 training problems" in caplog.text and "5 more drawn out of them as held-out problems" in caplog.text
    assert "also training problems" not in caplog.text
    # The same draw for every run, whichever splits it reads (an evaluation reads only the held-out one).
    assert [p.question for p in build_task(one_file(tmp_path, held_out=5)).eval_problems(None)] == held
    assert [p.question for p in build_task(one_file(tmp_path, held_out=5), splits=("test",)).eval_problems(None)] == held
    assert training(build_task(one_file(tmp_path, held_out=5), splits=("train",))) == training(task)


def test_max_train_problems_counts_what_is_left_after_the_draw(tmp_path):
    task = build_task(one_file(tmp_path, held_out=5, max_train_problems=4))
    assert task.num_train == 4 and not set(training(task)) & {p.question for p in task.eval_problems(None)}


@pytest.mark.parametrize("keys, says", [
    ({"held_out": 20}, "task.held_out=20 leaves no training problem: "),
    ({"held_out": 2, "test_files": ["x.jsonl"]}, "task.test_files names held-out data too: keep one"),
])
def test_a_held_out_count_that_cannot_be_is_refused_in_one_line(tmp_path, keys, says):
    with pytest.raises(ConfigError, match=says) as refused:
        build_task(one_file(tmp_path, **keys))
    assert "\n" not in str(refused.value)


def test_data_without_a_held_out_split_is_refused_naming_held_out(tmp_path):
    with pytest.raises(ConfigError, match=r"set task.test_files \(or task.held_out=N"):
        build_task(one_file(tmp_path))
    write_rows(tmp_path / "dir" / "train.jsonl", ROWS)
    with pytest.raises(ConfigError, match=r"or task.held_out=N: N problems drawn out of the training data\)"):
        build_task(TaskConfig(name="dataset", path=str(tmp_path / "dir")))


def test_held_out_problems_that_are_also_trained_on_are_said_at_load(tmp_path, caplog):
    write_rows(tmp_path / "test.jsonl", ROWS[:3] + [{"prompt": "Something else", "answer": "0"}])
    cfg = one_file(tmp_path, test_files=[str(tmp_path / "test.jsonl")])
    build_task(cfg)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "3 of the 4 held-out problems are also training problems" in warning.getMessage()
    assert "task.held_out=N" in warning.getMessage()


def test_chat_prompts_compare_as_messages(tmp_path, caplog):
    chat = lambda text: [{"role": "user", "content": text}]  # noqa: E731
    write_rows(tmp_path / "train.jsonl", [{"prompt": chat("a"), "answer": "1"}, {"prompt": chat("b"), "answer": "2"}])
    write_rows(tmp_path / "test.jsonl", [{"prompt": chat("b"), "answer": "2"}, {"prompt": chat("c"), "answer": "3"}])
    build_task(TaskConfig(name="dataset", path=str(tmp_path)))
    assert "1 of the 2 held-out problems are also training problems" in caplog.text


def test_the_python_apis_one_file_is_evaluated_whole_unless_held_out_draws_from_it(tmp_path):
    from grpo import api

    write_rows(tmp_path / "all.jsonl", ROWS)
    whole = api.with_data_and_rewards(api.build_config("tiny"), str(tmp_path / "all.jsonl"), None, None, None)
    assert whole.task.test_files == whole.task.train_files  # said at load (the test above)
    drawn = api.with_data_and_rewards(api.build_config("tiny", ["task.held_out=4"]), str(tmp_path / "all.jsonl"),
                                      None, None, None)
    assert drawn.task.test_files == []
    assert len(build_task(drawn.task).eval_problems(None)) == 4
