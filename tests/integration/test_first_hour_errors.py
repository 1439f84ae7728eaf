"""A TRL user's first hour (issue 46), the errors: what the console says when nothing trains, the model's
context, run directories and models refused in one line before any work, Ctrl-C while starting, exports,
the API's stop messages and `save_to_disk` folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo import api
from grpo.cli import main
from tests.processes import env_with_src

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


# 11. A run directory that cannot be made is one line, exit 2, and leaves nothing behind.
def only_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if " INFO " not in line]
    assert len(lines) == 1, text
    return lines[0]


def test_a_run_dir_naming_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    for run_dir in (afile, afile / "run"):
        assert main(["train", *TINY, f"run_dir={run_dir}"]) == 2
        assert only_line(capsys.readouterr().err) == (
            f"config error: run_dir={run_dir}: {afile} is a file, not a directory; set run_dir to a new directory "
            "or a run's")
        assert afile.read_text() == "mine\n" and sorted(tmp_path.iterdir()) == [afile]
    try:
        api.train("tiny", overrides=["train.steps=1", f"run_dir={afile}"])
    except api.ConfigError as exc:
        assert f"{afile} is a file, not a directory" in str(exc)
    else:
        raise AssertionError("api.train accepted a file as its run directory")


def read_only_below(monkeypatch, top: Path) -> None:
    """Path `top` as a read-only filesystem mounted there: it exists, and nothing can be made inside it."""
    import errno
    import os

    make, open_ = os.mkdir, os.open

    def mkdir(path, *args, **kwargs):
        if Path(path).is_relative_to(top) and Path(path) != top:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return make(path, *args, **kwargs)

    def open_file(path, flags, *args, **kwargs):
        if Path(path).is_relative_to(top) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return open_(path, flags, *args, **kwargs)

    top.mkdir(parents=True)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_file)


def test_a_run_dir_on_a_read_only_filesystem_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    read_only_below(monkeypatch, tmp_path / "new" / "ro")
    before = sorted(tmp_path.rglob("*"))
    for run_dir in (tmp_path / "new" / "ro" / "runs" / "r", tmp_path / "new" / "ro"):
        assert main(["train", *TINY, f"run_dir={run_dir}"]) == 2
        assert only_line(capsys.readouterr().err) == (
            f"config error: run_dir={run_dir} is on a read-only filesystem; set run_dir to a directory on a "
            "writable one")
        assert sorted(tmp_path.rglob("*")) == before


# 11, 12. A model directory grpo cannot train is refused before a run directory or checkpoint exists.
def model_dir(path: Path, *, kind: str = "causal", tokenizer: bool = True, chat_template: bool = True) -> Path:
    """A tiny model saved offline: a causal LM (Llama), or `kind="t5"`, a sequence-to-sequence model's config."""
    import torch
    from transformers import T5Config

    from grpo.config import TinyModelConfig
    from grpo.policy.models import build_char_tokenizer, build_tiny_model

    chars = build_char_tokenizer()
    if kind == "t5":
        T5Config(vocab_size=len(chars), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=2).save_pretrained(path)
    else:
        torch.manual_seed(0)
        build_tiny_model(TinyModelConfig(), chars, torch.float32).save_pretrained(path)
    if tokenizer:
        if not chat_template:
            chars.chat_template = None
        chars.save_pretrained(path)
    return path


def refused_before_any_run_dir(tmp_path: Path, capsys, model: Path, expected: str) -> None:
    run_dir = tmp_path / "r"
    capsys.readouterr()  # saving the model may print transformers' progress bar: not the run's output
    assert main(["train", *TINY, f"run_dir={run_dir}", f"model.name={model}"]) == 2
    err = capsys.readouterr().err
    assert only_line(err) == expected and "crashed" not in err and "resume" not in err
    assert not run_dir.exists()
    try:
        api.train("tiny", overrides=["train.steps=1", f"run_dir={run_dir}", f"model.name={model}"])
    except api.ConfigError as exc:
        assert f"config error: {exc}" == expected
    else:
        raise AssertionError("api.train accepted the model")
    assert not run_dir.exists()


def test_a_seq2seq_model_is_refused_in_one_line_before_any_run_dir(tmp_path, capsys):
    model = model_dir(tmp_path / "t5", kind="t5")
    refused_before_any_run_dir(tmp_path, capsys, model, (
        f"config error: model.name={model} is not a causal language model (model_type 't5', an encoder-decoder): "
        "grpo trains what AutoModelForCausalLM loads (Llama, Qwen2, GPT-2, SmolLM2, ...); point model.name at one"))
    assert main(["eval", "--model", str(model), "--task", "arith", "--max-samples", "2"]) == 2
    assert "is not a causal language model" in only_line(capsys.readouterr().err)


def test_a_model_without_a_tokenizer_is_refused_in_one_line_before_any_run_dir(tmp_path, capsys):
    model = model_dir(tmp_path / "bare", tokenizer=False)
    refused_before_any_run_dir(tmp_path, capsys, model, (
        f"config error: model.name={model} has no tokenizer (no tokenizer.json or tokenizer_config.json): save "
        "the model's tokenizer beside it (tokenizer.save_pretrained(DIR))"))


def test_a_model_without_a_chat_template_is_refused_before_any_run_dir_and_the_fix_then_trains(tmp_path, capsys):
    model = model_dir(tmp_path / "plain", chat_template=False)
    refused_before_any_run_dir(tmp_path, capsys, model, (
        "config error: the model's tokenizer has no chat template: set task.chat_template to a Jinja template "
        "or a file holding one, or task.text_prompts=raw to send text prompts as they are"))
    template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r'}", f"model.name={model}",
                 f"task.chat_template={template}"]) == 0
    assert (tmp_path / "r" / "summary.json").is_file()
    # A base model's way, and TRL's: text prompts as they are, no template needed.
    assert main(["train", *TINY, f"run_dir={tmp_path / 'raw'}", f"model.name={model}", "task.text_prompts=raw"]) == 0
    assert (tmp_path / "raw" / "summary.json").is_file()


# 4. Prompts longer than the model's context: refused at load, or cut from the left when asked, and counted.
def long_prompt_rows() -> list[dict]:
    """Four rows for the tiny model (1,024 positions, a token a character): one prompt of 1,100 characters."""
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)]
    return [*rows, {"prompt": "x" * 1090 + " 2 + 2?", "answer": "4"}]


def write_rows(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_prompts_longer_than_the_context_are_refused_at_load(tmp_path, capsys):
    data = write_rows(tmp_path / "data", long_prompt_rows())
    run_dir = tmp_path / "r"
    args = ["train", *TINY, f"run_dir={run_dir}", "task.name=dataset", f"task.path={data}", "task.instruction="]
    assert main(args) == 2
    line = only_line(capsys.readouterr().err)
    assert line.startswith("config error: 1 of 4 training prompts do not fit the model's context of 1024 tokens "
                           "(max_position_embeddings) with rollout.max_new_tokens=8: the longest, problem ")
    assert line.endswith("tokens, and a prompt may have 1016; shorten or drop them, lower rollout.max_new_tokens, "
                         "or set task.truncate_prompts=left to cut them from the left")
    assert not run_dir.exists()
    try:
        api.train("tiny", dataset=long_prompt_rows(), overrides=["train.steps=1", f"run_dir={run_dir}",
                                                                 "task.instruction="])
    except api.ConfigError as exc:
        assert "1 of 4 training prompts do not fit the model's context of 1024 tokens" in str(exc)
    else:
        raise AssertionError("api.train trained on prompts longer than the model's context")
    assert not run_dir.exists()
    assert main(["eval", "--model", "tiny", "--task", "dataset", "--max-new-tokens", "8", f"task.path={data}",
                 "task.instruction="]) == 2
    assert "1 of 4 test prompts do not fit the model's context of 1024 tokens (max_position_embeddings) with " \
           "max_new_tokens=8" in only_line(capsys.readouterr().err)

    # grpo plan says so too, not only memory.
    assert main(["plan", "--config", "tiny", "task.name=dataset", f"task.path={data}", "task.instruction=",
                 "memory.limit_gib=64"]) == 1
    plan = capsys.readouterr().out
    assert "warning: grpo train will refuse this run: 1 of 4 training prompts do not fit the model's context" in plan


def test_prompts_cut_from_the_left_when_asked_and_counted(tmp_path, capsys):
    data = write_rows(tmp_path / "data", long_prompt_rows())
    run_dir = tmp_path / "r"
    assert main(["train", *TINY, f"run_dir={run_dir}", "task.name=dataset", f"task.path={data}", "task.instruction=",
                 "task.truncate_prompts=left", "logging.samples_per_step=16", "eval.after_training=true"]) == 0
    err = capsys.readouterr().err
    assert "task.truncate_prompts=left: 1 of 4 training prompts cut from the left to 1016 tokens" in err
    assert "task.truncate_prompts=left: 1 of 4 held-out prompts cut from the left to 1016 tokens" in err
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    cut = [e["evidence"] for e in events if e["kind"] == "prompts_truncated"]
    assert [(e["what"], e["cut"], e["total"], e["limit"]) for e in cut] == [
        ("training prompts", 1, 4, 1016), ("held-out prompts", 1, 4, 1016)]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    (long,) = {s["prompt"] for s in samples if "2 + 2?" in s["prompt"]}
    assert not long.startswith("<|im_start|>") and long.endswith("2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    assert main(["plan", "--config", "tiny", "task.name=dataset", f"task.path={data}", "task.instruction=",
                 "task.truncate_prompts=left", "memory.limit_gib=64"]) == 0
    assert "note: task.truncate_prompts=left: 1 of 4 training prompts cut from the left" in capsys.readouterr().out

    result = api.train("tiny", dataset=long_prompt_rows(), overrides=[
        "train.steps=1", f"run_dir={tmp_path / 'api'}", "task.instruction=", "task.truncate_prompts=left"])
    assert result.final_model is not None


# 14. Ctrl-C in the first seconds: while Python imports torch and transformers, or while the model loads.
INTERRUPT_AT_IMPORT = """
import importlib.abc, runpy, signal, sys

AT = sys.argv[1]

class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == AT:
            sys.meta_path.remove(self)
            signal.raise_signal(signal.SIGINT)  # as a terminal's Ctrl-C reaches the process
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["grpo", *sys.argv[2:]]
runpy.run_module("grpo", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module, more", [("grpo.config", []), ("torch", []), ("transformers", []),
                                          ("grpo.tasks.arith", []), ("grpo.tasks.arith", ["memory.check=false"])])
def test_ctrl_c_while_starting_is_one_line_and_leaves_nothing(tmp_path, module, more):
    """grpo.config: the command line's own imports; torch, transformers: the entry point's; grpo.tasks.arith:
    the start's memory check, or without it the loop's build, in a run directory just made."""
    run_dir = tmp_path / "r"
    done = subprocess.run([sys.executable, "-c", INTERRUPT_AT_IMPORT, module, "train", *TINY, f"run_dir={run_dir}",
                           *more], env=env_with_src(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stderr
    assert only_line(done.stderr) == ("interrupted while starting: nothing was trained or saved; run the same "
                                      "command again")
    assert not run_dir.exists()


# 14. The API's stop messages say how to resume through the API when its data and rewards live in Python.
class InterruptOnCall:
    """A reward function that is Ctrl-C'd (SIGINT) on its `at`-th call (the first is the start's check)."""

    __name__ = "interrupted"

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def __call__(self, completions, **kwargs):
        import signal

        self.calls += 1
        if self.calls == self.at:
            signal.raise_signal(signal.SIGINT)
        return [float(len(c) % 2) for c in completions]


def zero(completions, **kwargs):
    return [0.0] * len(completions)


ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]


def test_api_stop_messages_say_the_api_call_that_resumes(tmp_path):
    run_dir = tmp_path / "r"
    overrides = ["train.steps=3", "checkpoint.every_steps=0", "checkpoint.every_minutes=0", f"run_dir={run_dir}"]
    reward = InterruptOnCall(at=3)  # during step 2's scoring
    try:
        api.train("tiny", dataset=ROWS, rewards=[reward], overrides=overrides)
    except api.RunInterrupted as exc:
        message = str(exc)
    else:
        raise AssertionError("the run was not interrupted")
    assert "grpo train" not in message and "grpo.api.train(...) again in Python" in message
    assert f"run_dir={run_dir}" in message and "task.path=memory:" in message and "python:interrupted" in message
    result = api.train("tiny", dataset=ROWS, rewards=[reward], overrides=overrides)  # as it said: it resumes
    assert json.loads((result.run_dir / "summary.json").read_text())["steps"] == 3

    try:
        api.train("tiny", dataset=ROWS, rewards=[zero], overrides=[
            "train.steps=3", f"run_dir={tmp_path / 'stopped'}", "guard.zero_reward.action=stop",
            "guard.zero_reward.patience=1"])
    except api.RunStopped as exc:
        assert "grpo train" not in str(exc) and "grpo.api.train(...) again in Python" in str(exc)
        stopped = json.loads((tmp_path / "stopped" / "STOPPED.json").read_text())
        assert stopped["resume_command"].startswith("grpo.api.train(...) again in Python")
    else:
        raise AssertionError("the guard did not stop a run whose every reward was 0")


def test_cli_runs_and_api_runs_on_files_keep_the_command(tmp_path):
    from grpo.rundir.resume import resume_command

    data = write_rows(tmp_path / "data", ROWS)
    run_dir = tmp_path / "r"
    api.train("tiny", dataset=data, rewards=["digits"], overrides=["train.steps=1", f"run_dir={run_dir}"])
    assert resume_command(run_dir, None) == f"grpo train --config {run_dir / 'config.yaml'}"


# 14. A folder written by datasets' save_to_disk: a DatasetDict's splits and a plain Dataset are read; a
# missing split is named with the splits there are.
def save_to_disk(folder: Path, rows: list[dict]) -> None:
    """What `datasets.Dataset.save_to_disk(folder)` writes (datasets is not a dependency of the tests): an
    Arrow stream shard, state.json naming it, dataset_info.json."""
    import pyarrow as pa

    folder.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink, \
            pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}],
                                                   "_fingerprint": "0", "_split": None}))
    (folder / "dataset_info.json").write_text("{}")


def save_dict_to_disk(folder: Path, splits: dict[str, list[dict]]) -> None:
    """What `datasets.DatasetDict(splits).save_to_disk(folder)` writes."""
    for name, rows in splits.items():
        save_to_disk(folder / name, rows)
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": list(splits)}))


def test_save_to_disk_folders_are_read_and_a_missing_split_is_named(tmp_path, capsys):
    train = [{"prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "answer": str(i + 1)} for i in range(6)]
    save_dict_to_disk(tmp_path / "dict", {"train": train, "test": train[:2]})
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r1'}", "task.name=dataset", f"task.path={tmp_path / 'dict'}",
                 "eval.after_training=true"]) == 0
    err = capsys.readouterr().err
    assert f"6 training problems from {tmp_path / 'dict' / 'train' / 'data-00000-of-00001.arrow'}" in err
    assert "2 held-out problems from" in err

    save_dict_to_disk(tmp_path / "noval", {"validation": train})
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r2'}", "task.name=dataset",
                 f"task.path={tmp_path / 'noval'}"]) == 2
    assert only_line(capsys.readouterr().err) == (
        f"config error: task.path={tmp_path / 'noval'} is a datasets DatasetDict (save_to_disk) with the splits "
        "'validation' and no 'train': set task.train_split to one of them, or give task.train_files")
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r2'}", "task.name=dataset", f"task.path={tmp_path / 'noval'}",
                 "task.train_split=validation"]) == 0
    capsys.readouterr()

    save_to_disk(tmp_path / "plain", train)
    result = api.train("tiny", dataset=tmp_path / "plain", overrides=["train.steps=1", f"run_dir={tmp_path / 'r3'}"])
    assert result.final_model is not None
    assert main(["train", *TINY, f"run_dir={tmp_path / 'r4'}", "task.name=dataset", f"task.path={tmp_path / 'plain'}",
                 "eval.after_training=true"]) == 2
    assert only_line(capsys.readouterr().err) == (
        f"config error: task.path={tmp_path / 'plain'} is a datasets Dataset (save_to_disk), which has no splits: "
        "it is read as the training split, and has no held-out 'test' split; save a DatasetDict with one, or give "
        "task.test_files")
