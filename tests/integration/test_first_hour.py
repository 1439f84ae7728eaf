"""A user's first hour (issue 13): their own data (gold answers inside a `solution` text), their own reward
module, grpo eval. Each failure they met is now one line with exit status 2, before any work where it can be."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import grpo.cli
from grpo.cli import main
from tests.processes import env_with_src

from .helpers import metric_lines

SRC = Path(grpo.cli.__file__).resolve().parents[1]
TINY = ["--config", "tiny", "train.steps=2", "checkpoint.every_steps=0", "checkpoint.every_minutes=0"]


def user_folder(tmp_path: Path) -> Path:
    """data/{train,test}.jsonl with the gold inside `solution`, and my_rewards.py beside them."""
    (tmp_path / "data").mkdir()
    for split, n in (("train", 16), ("test", 8)):
        rows = [{"prompt": f"What is {i % 7} + {3 * i % 5}?", "solution": f"We add. The answer is {i % 7 + 3 * i % 5}."}
                for i in range(n)]
        (tmp_path / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "my_rewards.py").write_text(
        "def has_digit(completions, **kwargs):\n"
        "    return [float(any(ch.isdigit() for ch in c)) for c in completions]\n")
    return tmp_path


def user_data(folder: Path) -> list[str]:
    return ["task.name=dataset", f"task.path={folder / 'data'}", "task.answer_column=solution"]


def grpo_command(args: list[str], cwd: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`grpo ARGS` as the installed script runs it: `-P` keeps the working directory off sys.path, as the
    script's own path (its bin/ directory) does."""
    env = env_with_src()
    return subprocess.run([*prefix, sys.executable, "-P", "-m", "grpo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if " INFO " not in line]
    assert len(lines) == 1, text
    return lines[0]


# 1. A reward module in the working directory imports as Python would.
def test_a_reward_module_in_the_working_directory_is_found(tmp_path):
    folder = user_folder(tmp_path)
    done = grpo_command(["train", *TINY, *user_data(folder), "run_dir=runs/r", "task.reward=my_rewards:has_digit"],
                        cwd=folder)
    assert done.returncode == 0, done.stderr
    assert all("reward/has_digit/mean" in line for line in metric_lines(folder / "runs" / "r"))


def test_a_missing_reward_module_says_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r'}", "task.reward=my_rewardz:fn"]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"config error: task.reward='my_rewardz:fn': no module named 'my_rewardz' in the working directory "
        f"({tmp_path}) or on the Python path; give the module's name as you would import it (my_rewards:fn for "
        "./my_rewards.py)")


# 2. A reward that returns the wrong length or type stops the start, in one line, naming the function.
def one_too_many(completions, **kwargs):
    return [0.0] * (len(completions) + 1)


def a_string(completions, **kwargs):
    return "1.0"


def strings(completions, **kwargs):
    return ["1.0"] * len(completions)


def wrong_from_step_2(completions, trainer_state, **kwargs):
    return [1.0] * (len(completions) + (trainer_state.global_step >= 2))


@pytest.mark.parametrize("fn,message", [
    ("one_too_many", "reward function one_too_many returned 5 rewards for 4 completions: it must return one float "
                     "(or None) per completion (called on 4 training rows with their gold answers as completions)"),
    ("a_string", "reward function a_string returned str '1.0': it must return a list with one float (or None) per "
                 "completion (called on 4 training rows with their gold answers as completions)"),
    ("strings", "reward function strings returned str '1.0' at index 0: rewards must be float, int, bool or None "
                "(called on 4 training rows with their gold answers as completions)"),
])
def test_a_malformed_reward_is_one_line_at_start(tmp_path, capsys, fn, message):
    run_dir = tmp_path / "r"
    assert main(["train", *TINY, f"run_dir={run_dir}", f"task.reward={__name__}:{fn}"]) == 2
    assert one_line(capsys.readouterr().err) == f"config error: {message}"
    assert not (run_dir / "checkpoints").exists()  # refused before any work


def test_a_reward_that_breaks_mid_run_is_one_line_and_keeps_the_checkpoints(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert main(["train", "--config", "tiny", "train.steps=3", "checkpoint.every_steps=1", f"run_dir={run_dir}",
                 f"task.reward={__name__}:wrong_from_step_2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("config error: reward function wrong_from_step_2 returned 17 rewards for 16 completions: it "
                       "must return one float (or None) per completion")
    assert (run_dir / "checkpoints" / "step_000001").is_dir()
    assert "resume" not in err[-1]  # the same command would fail the same way: fix the function first


# 3. grpo eval with an unknown reward: one line, before the model loads (the model path does not exist).
@pytest.mark.parametrize("override,message", [
    ("task.reward=nosuch", "task.reward='nosuch': unknown reward 'nosuch'; registered rewards: "),
    ("eval.reward=nosuch", "eval.reward='nosuch': unknown reward 'nosuch'; registered rewards: "),
    ("task.reward=nosuch:fn", "task.reward='nosuch:fn': no module named 'nosuch' in the working directory"),
])
def test_eval_with_an_unknown_reward_is_one_line_before_the_model(tmp_path, capsys, override, message):
    assert main(["eval", "--model", str(tmp_path / "no-model"), "--task", "arith", override]) == 2
    assert one_line(capsys.readouterr().err).startswith(f"config error: {message}")


# 4. An unreadable run directory: one line from grpo train and grpo health, nothing changed.
def without_file_permissions() -> tuple[str, ...]:
    """A command prefix under which this process's files obey their modes (root bypasses them)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file modes cannot be enforced")
    return ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search")


def test_an_unreadable_run_directory_is_one_line_from_train_and_health(tmp_path):
    prefix = without_file_permissions()
    run_dir = tmp_path / "r"
    assert main(["train", *TINY, f"run_dir={run_dir}"]) == 0
    before = sorted(p.name for p in run_dir.iterdir())
    run_dir.chmod(0)
    try:
        for command in (["health", str(run_dir)], ["train", "--config", "tiny", f"run_dir={run_dir}"]):
            done = grpo_command(command, tmp_path, prefix)
            assert done.returncode == 2, done.stderr
            assert one_line(done.stderr) == (f"error: permission denied: {run_dir}; give this user read and write "
                                             f"access to it (e.g. chmod -R u+rwX {run_dir}), then run the same "
                                             "command again")
        run_dir.chmod(0o755)
        (run_dir / "metrics.jsonl").chmod(0)
        done = grpo_command(["train", "--config", "tiny", "train.steps=3", f"run_dir={run_dir}"], tmp_path, prefix)
        assert done.returncode == 2, done.stderr
        assert one_line(done.stderr).startswith(f"error: permission denied: {run_dir / 'metrics.jsonl'}; ")
    finally:
        run_dir.chmod(0o755)
        (run_dir / "metrics.jsonl").chmod(0o644)
    assert sorted(p.name for p in run_dir.iterdir()) == before


# 5. grpo eval --output into a folder that does not exist: made, and written.
def test_eval_output_makes_its_folder(tmp_path, capsys):
    out = tmp_path / "new" / "folder" / "x.json"
    assert main(["eval", "--model", "tiny", "--task", "arith", "--max-samples", "2", "--max-new-tokens", "2",
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["n"] == 2


def test_eval_output_that_cannot_be_written_is_refused_before_the_model(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    assert main(["eval", "--model", str(tmp_path / "no-model"), "--task", "arith",
                 "--output", str(tmp_path / "a-file" / "x.json")]) == 2
    assert one_line(capsys.readouterr().err).startswith(f"config error: --output {tmp_path / 'a-file' / 'x.json'}: "
                                                        "cannot make its folder")


# 6. grpo eval needs only the split it evaluates.
def test_eval_reads_only_its_split(tmp_path, capsys):
    folder = user_folder(tmp_path)
    out = tmp_path / "e.json"
    assert main(["eval", "--model", "tiny", "--task", "dataset", "--split", "test", "--max-new-tokens", "2",
                 f"task.test_files=[{folder / 'data' / 'test.jsonl'}]", "task.answer_column=solution",
                 "--output", str(out)]) == 0
    assert json.loads(out.read_text())["n"] == 8


# 7. grpo eval honours eval.max_new_tokens, and refuses keys it does not use.
def test_eval_honours_eval_max_new_tokens(tmp_path):
    out = tmp_path / "e.json"
    assert main(["eval", "--model", "tiny", "--task", "arith", "--max-samples", "2", "eval.max_new_tokens=3",
                 "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["max_new_tokens"] == 3 and result["mean_length"] <= 3


def test_eval_refuses_a_key_it_does_not_use(tmp_path, capsys):
    assert main(["eval", "--model", "tiny", "--task", "arith", "actor.lr=1e-3"]) == 2
    assert one_line(capsys.readouterr().err).startswith("config error: grpo eval does not use actor.lr; it reads ")


# 8. TRL's reward contract: keywords, several functions with weights, a wrong signature found at start.
def needs_x(completions, x):
    return [0.0] * len(completions)


def test_a_wrong_signature_is_one_line_at_start(tmp_path, capsys):
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r'}", f"task.reward={__name__}:needs_x"]) == 2
    assert one_line(capsys.readouterr().err).startswith(
        "config error: reward function needs_x failed on 4 training rows with their gold answers as completions: "
        "TypeError: needs_x() got an unexpected keyword argument 'prompts' (it is called by keyword with prompts, "
        "completions, completion_ids, ")


# 9. A gold pattern that matches no row is refused at load; rows without a gold are reported.
def test_a_gold_pattern_matching_no_row_is_refused_at_load(tmp_path, capsys):
    folder = user_folder(tmp_path)
    assert main(["train", *TINY, *user_data(folder), f"run_dir={tmp_path / 'r'}", "task.gold_pattern=#### (.*)"]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"config error: task.gold_pattern '#### (.*)' matches no answer in {folder / 'data' / 'train.jsonl'} (column "
        f"'solution'); e.g. {folder / 'data' / 'train.jsonl'}:1: 'We add. The answer is 0.'. Fix the pattern (its "
        "first group is the gold), or set task.gold_pattern=null to use the whole answer")
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_the_load_reports_rows_without_a_gold(tmp_path, capsys):
    folder = user_folder(tmp_path)
    with (folder / "data" / "train.jsonl").open("a") as f:
        f.write(json.dumps({"prompt": "What is 1 + 1?", "solution": "two"}) + "\n")
    assert main(["train", *TINY, *user_data(folder), f"run_dir={tmp_path / 'r'}", "task.reward=digits",
                 r"task.gold_pattern=answer is (\d+)"]) == 0
    assert (f"dataset: 17 training problems from {folder / 'data' / 'train.jsonl'} (1 without a gold answer, e.g. "
            f"{folder / 'data' / 'train.jsonl'}:17: unscorable (None, never 0) for rewards that compare with the gold). "
            "Text prompts are sent") in capsys.readouterr().err  # no evaluation: the test split is not read
