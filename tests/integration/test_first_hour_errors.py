"""A TRL user's first hour (issue 46), the errors: what the console says when nothing trains, the model's
context, run directories and models refused in one line before any work, Ctrl-C while starting, exports,
the API's stop messages and `save_to_disk` folders."""

from __future__ import annotations

import json
from pathlib import Path

from grpo import api
from grpo.cli import main

TINY = ["--config", "tiny", "train.steps=1", "checkpoint.every_steps=0", "checkpoint.every_minutes=0"]


def half(completions, **kwargs):
    return [0.5] * len(completions)


# 7. A constant reward of 0.5 at accuracy 0 is not "every answer was right".
def test_a_constant_reward_is_named_as_such_not_as_every_answer_right(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_rewards.py").write_text("def half(completions, **kwargs):\n    return [0.5] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r'}", "task.reward=my_rewards:half"]) == 0
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "NO UPDATE" in line]
    assert "every answer was right" not in line
    assert "every answer got the same reward, 0.5, and none reached task.correct_threshold" in line

    api.train("tiny", rewards=[half], overrides=["train.steps=1", f"run_dir={tmp_path / 'api'}"])
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "NO UPDATE" in line]
    assert "every answer got the same reward, 0.5, and none reached task.correct_threshold" in line
