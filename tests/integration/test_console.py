"""What a user sees: the step table and evaluations in train.log too, progress that moves inside
phases, sample completions per step, a skipped update explained once, evaluation answers saved,
and every evaluation on TensorBoard."""

from __future__ import annotations

import json

from grpo.cli import main


def test_samples_train_log_progress_and_the_skip_notice(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", "train.steps=4", "logging.progress=true",
                 "logging.tensorboard=true", "logging.progress_interval_s=0", "logging.samples_per_step=3",
                 "testing.faults.zero_reward_at_steps=[2,3]", "testing.faults.fail_rollouts_at_steps=[1]",
                 "testing.faults.fail_fraction=0.3", "rollout.max_retries=0",
                 "rollout.max_refill_rounds=0", "guard.failed_rollouts.action=warn",
                 "guard.zero_reward.patience=5", "eval.before_training=true", "eval.after_training=true",
                 "model.device=cpu"]) == 0  # the CPU's samples: none empty at steps 2-3 (a GPU's may be)
    out, err = capsys.readouterr()
    log = (run_dir / "train.log").read_text()

    header = next(line for line in out.splitlines() if line.split()[:3] == ["step", "reward", "acc"])
    assert header in log  # the step table...
    messages = [line.split("grpo.console: ", 1)[1] for line in log.splitlines() if "grpo.console: " in line]
    rows = [m for m in messages if m.split() and m.split()[0] in ("1", "2", "3", "4")]
    assert len(rows) == 4 and all(row in out for row in rows)  # ...every row of it
    assert "held-out evaluation (before, step 0)" in log and "held-out evaluation (after, step 4)" in log

    # progress inside the phases (interval 0: every tick is a line), with an ETA
    assert "step 2/4 rollout: " in log and "decode steps" in log and " left)" in log
    assert "step 4/4 update: " in log and "micro-batches" in log and "run eta" in log
    assert "evaluate (before): " in log

    # the zero-reward steps skipped their update: said once, with what to change
    assert log.count("NO UPDATE") == 1 and "step 2: NO UPDATE: every answer was wrong" in log
    assert "rollout.samples_per_problem" in log and "rollout.filter_zero_variance=true" in log
    assert "NO UPDATE" in err

    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    for s in samples:
        assert {"prompt", "completion", "reward", "status", "problem", "tokens"} <= s.keys()
        assert "<|im_start|>" in s["prompt"] and s["tokens"] >= len(s["completion"])  # specials are not text
    assert any(s["status"] == "failed" and s["reward"] is None for s in samples if s["step"] == 1)
    assert all(s["reward"] == 0.0 for s in samples if s["step"] in (2, 3))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0}).Reload()
    assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 4]  # before and after
    assert "samples/text_summary" in events.Tags()["tensors"]


def test_eval_output_keeps_every_answer(tmp_path, capsys):
    out_file = tmp_path / "answers.json"
    assert main(["eval", "--model", "tiny", "--task", "arith", "--max-samples", "5", "--max-new-tokens", "4",
                 "--dtype", "float32", "--output", str(out_file)]) == 0
    saved = json.loads(out_file.read_text())
    assert saved["n"] == 5 and len(saved["answers"]) == 5
    assert {"question", "gold", "completion", "reward", "status"} <= saved["answers"][0].keys()
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "answers" not in line and line["n"] == 5  # the console keeps the one-line summary


def test_version_and_config_show(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("grpo ")
    assert main(["config", "show", "--config", "tiny", "rollout.temperature=0.7"]) == 0
    shown = capsys.readouterr().out
    assert "  temperature: 0.7  # [default 1.0] sampling temperature" in shown
    saved = tmp_path / "shown.yaml"
    saved.write_text(shown)
    assert main(["config", "show", "--config", str(saved)]) == 0
    assert capsys.readouterr().out == shown  # it is itself a valid --config
