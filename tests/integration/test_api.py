"""The Python API: the tiny model trains on rows in memory with a lambda reward, then is evaluated."""

import pytest

from grpo import api
from grpo.errors import ConfigError

from .helpers import metric_lines

ROWS = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(4) for b in range(4)]


def test_the_api_trains_the_tiny_model_on_rows_in_memory_with_a_lambda_reward(tmp_path):
    result = api.train("tiny", dataset=ROWS, eval_dataset=ROWS[:4],
                       rewards=[lambda completions, **kwargs: [float(c.strip() != "") for c in completions]],
                       overrides=[f"run_dir={tmp_path / 'r'}", "train.steps=3", "eval.after_training=true"])
    assert result.run_dir == tmp_path / "r"
    lines = metric_lines(result.run_dir)
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert all(0.0 <= line["reward/lambda/mean"] <= 1.0 for line in lines)
    assert result.summary["after"]["n"] == 4  # eval_dataset is the held-out split
    assert result.final_model == tmp_path / "r" / "checkpoints" / "step_000003" / "model"

    evaluation = api.evaluate(result.final_model, "tiny", dataset=ROWS[:6], rewards=["math"], max_new_tokens=4)
    assert evaluation["n"] == 6 and evaluation["max_new_tokens"] == 4 and 0.0 <= evaluation["accuracy"] <= 1.0


def test_the_api_raises_config_errors_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="dataset has no rows"):
        api.train("tiny", dataset=[], overrides=[f"run_dir={tmp_path / 'r'}"])
    with pytest.raises(ConfigError, match=r"dataset row 1: each row must be a dict of columns, got str"):
        api.train("tiny", dataset=[ROWS[0], "nope"], overrides=[f"run_dir={tmp_path / 'r'}"])
    with pytest.raises(ConfigError, match="task.reward_weights needs one weight per task.reward entry"):
        api.train("tiny", dataset=ROWS, rewards=["math"], reward_weights=[1.0, 2.0],
                  overrides=[f"run_dir={tmp_path / 'r'}"])
    assert not (tmp_path / "r").exists()


def test_the_api_enters_a_run_as_grpo_train_does(tmp_path):
    """One way in (grpo.entry): the memory check, the cleanup of a refused first start and the hooks the
    config asks for are the command line's, with errors raised instead of exit statuses."""
    run_dir = tmp_path / "r"
    with pytest.raises(ConfigError, match=r"GiB of (GPU )?memory at its peak .* is available \(memory.limit_gib\)"):
        api.train("tiny", dataset=ROWS, overrides=[f"run_dir={run_dir}", "memory.limit_gib=0.01"])
    assert not run_dir.exists()  # refused before the run directory was made
    with pytest.raises(ConfigError, match="unknown reward 'nosuch'"):
        api.train("tiny", dataset=ROWS, overrides=[f"run_dir={run_dir}", "task.reward=nosuch"])
    assert not run_dir.exists()  # made, then removed: a refused first start leaves no skeleton
    with pytest.raises(RuntimeError, match="injected crash after step 1"):
        api.train("tiny", dataset=ROWS, overrides=[f"run_dir={run_dir}", "train.steps=2",
                                                   "testing.faults.crash_at_step=1"])
    assert "the run crashed" in (run_dir / "train.log").read_text()  # the traceback, as grpo train keeps it


@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_rewards_that_all_agree_skip_the_update_unless_a_kl_term_still_pulls(tmp_path, kl_coef):
    result = api.train("tiny", dataset=ROWS, rewards=[lambda completions, **kwargs: [1.0] * len(completions)],
                       overrides=[f"run_dir={tmp_path / 'r'}", "train.steps=2", f"algo.kl_coef={kl_coef}",
                                  "eval.before_training=false", "eval.after_training=false"])
    lines = metric_lines(result.run_dir)
    if kl_coef:  # every row has a gradient: the KL term's
        assert [(line["update/applied"], line["actor/rows_computed"]) for line in lines] == [(1, 16), (1, 16)]
    else:
        assert [(line["update/applied"], line["update/skip_reason"]) for line in lines] == [(0, "no learning signal")] * 2
