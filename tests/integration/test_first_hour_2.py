"""A user's first hour, second round (issue 25): no silent wrong result. Each item drives the real CLI or
the Python API as the user met it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo import api
from grpo.errors import ConfigError

from .helpers import metric_lines
from .test_first_hour import TINY, grpo_command, one_line


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def arithmetic(n: int, offset: int = 0) -> list[dict]:
    return [{"prompt": f"What is {i} + {offset}?", "answer": str(i + offset)} for i in range(n)]


# 1. A run directory belongs to one configuration: other data is refused, not silently the old run.
def test_cli_refuses_to_resume_a_run_on_other_data(tmp_path):
    a = write_rows(tmp_path / "a" / "train.jsonl", arithmetic(16))
    write_rows(tmp_path / "b" / "train.jsonl", arithmetic(16, offset=3))
    data = ["task.name=dataset", "task.test_files=[]", "eval.max_samples=4"]
    first = grpo_command(["train", *TINY, *data, f"task.train_files=[{a}]", f"task.test_files=[{a}]",
                          "run_dir=runs/chg"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    steps = len(metric_lines(tmp_path / "runs/chg"))
    config = (tmp_path / "runs/chg/config.yaml").read_text()

    other = tmp_path / "b" / "train.jsonl"
    second = grpo_command(["train", *TINY, *data, f"task.train_files=[{other}]", f"task.test_files=[{other}]",
                           "run_dir=runs/chg"], cwd=tmp_path)
    assert second.returncode == 2, second.stderr
    line = one_line(second.stderr)
    assert "task.train_files" in line and "run_dir=" in line and "resume_with_changes=true" in line
    assert (tmp_path / "runs/chg/config.yaml").read_text() == config  # nothing saved changed

    # The same path, its content rewritten in place: caught by the data's fingerprint.
    write_rows(a, arithmetic(16, offset=5))
    third = grpo_command(["train", *TINY, *data, f"task.train_files=[{a}]", f"task.test_files=[{a}]",
                          "run_dir=runs/chg"], cwd=tmp_path)
    assert third.returncode == 2 and "content changed" in one_line(third.stderr), third.stderr

    # Asked for explicitly, the run goes on with the new data; more steps may always be asked for.
    fourth = grpo_command(["train", *TINY, *data, f"task.train_files=[{a}]", f"task.test_files=[{a}]",
                           "run_dir=runs/chg", "resume_with_changes=true", "train.steps=3"], cwd=tmp_path)
    assert fourth.returncode == 0, fourth.stderr
    assert len(metric_lines(tmp_path / "runs/chg")) == steps + 1
    assert "resume_with_changes: false" in (tmp_path / "runs/chg/config.yaml").read_text()


def test_api_refuses_to_resume_a_run_on_other_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = ["train.steps=1", "checkpoint.every_steps=0", "checkpoint.every_minutes=0"]
    first = api.train("tiny", dataset=arithmetic(12), overrides=overrides)
    assert first.run_dir == Path("runs/tiny")
    with pytest.raises(ConfigError, match=r"task\.path was memory:.*resume_with_changes=true"):
        api.train("tiny", dataset=arithmetic(12, offset=1), overrides=overrides)
    again = api.train("tiny", dataset=arithmetic(12), overrides=["train.steps=2", *overrides[1:]])
    assert len(metric_lines(again.run_dir)) == 2


# 2. GSM8K-style gold text: read after `####` by default and reported at load.
GSM8K_ROWS = [{"prompt": f"What is 9 + {i}?", "answer": f"9 plus {i} is {9 + i}.\n#### {9 + i}"} for i in range(8)]


def test_cli_reads_gsm8k_gold_text_and_reports_it(tmp_path):
    data = write_rows(tmp_path / "gsm" / "train.jsonl", GSM8K_ROWS)
    done = grpo_command(["train", *TINY, "train.steps=1", "task.name=dataset", f"task.train_files=[{data}]",
                         f"task.test_files=[{data}]", "run_dir=runs/gsm"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "8 golds read after '####'" in done.stderr


def test_api_scores_gsm8k_gold_text_by_its_final_number(tmp_path, monkeypatch):
    from grpo.tasks import build_task

    monkeypatch.chdir(tmp_path)
    cfg = api.with_data_and_rewards(api.build_config("tiny"), GSM8K_ROWS, None, ["math"], None)
    task = build_task(cfg.task)
    assert [p.gold for p in task.eval_problems(3)] == ["9", "10", "11"]


# 11, 12. logging.report=false writes no report; summary["after"] is None without evaluation.
def test_report_can_be_turned_off_and_the_summary_always_has_before_and_after(tmp_path, monkeypatch):
    done = grpo_command(["train", *TINY, "train.steps=1", "run_dir=runs/quiet", "logging.report=false"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "runs/quiet/report.html").exists()
    assert "no report (logging.report=false)" in done.stdout + done.stderr

    monkeypatch.chdir(tmp_path)
    result = api.train("tiny", overrides=["train.steps=1", "run_dir=runs/api", "checkpoint.every_minutes=0"])
    assert result.summary["after"] is None and result.summary["before"] is None
    assert api.RunStopped.__module__ == "grpo.errors"


# 5, 6, 7. No test split needed when nothing evaluates; fewer rows than a step's problems said; what is done
# to text prompts said at load.
def test_a_small_train_only_dataset_trains_and_the_load_says_what_it_does(tmp_path):
    write_rows(tmp_path / "data" / "train.jsonl", arithmetic(3))
    done = grpo_command(["train", *TINY, "train.steps=1", "task.name=dataset", f"task.path={tmp_path / 'data'}",
                         "rollout.problems_per_step=4", "task.instruction=Answer in a box.", "run_dir=runs/small"],
                        cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "only 3 training problems, fewer than rollout.problems_per_step=4" in done.stderr
    assert "chat template, with task.instruction 'Answer in a box.' appended" in done.stderr

    evaluated = grpo_command(["train", *TINY, "train.steps=1", "task.name=dataset", f"task.path={tmp_path / 'data'}",
                              "eval.after_training=true", "run_dir=runs/small2"], cwd=tmp_path)
    assert evaluated.returncode == 2 and "no test split" in one_line(evaluated.stderr), evaluated.stderr


# 8. grpo eval: an override after an option is checked like the others; a signal ends it as train's does.
def test_eval_refuses_a_key_it_does_not_use_after_an_option(tmp_path):
    done = grpo_command(["eval", "--model", "tiny", "task.name=arith", "--max-samples", "2", "actor.lr=1"],
                        cwd=tmp_path)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("config error: grpo eval does not use actor.lr")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_eval_exits_4_in_one_line(tmp_path, sig):
    # The reward sends the signal from inside the evaluation (the 4-row reward check before it is smaller).
    (tmp_path / "interrupting.py").write_text(
        "import os, signal\n"
        "def reward(completions, **kwargs):\n"
        f"    if len(completions) > 4:\n        os.kill(os.getpid(), signal.{sig})\n"
        "    return [0.0] * len(completions)\n")
    done = grpo_command(["eval", "--model", "tiny", "--task", "arith", "--max-samples", "8",
                         "task.reward=interrupting:reward"], cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    assert "grpo eval interrupted" in one_line(done.stderr)
