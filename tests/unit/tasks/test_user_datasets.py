"""Real datasets in other RL frameworks' formats (tests/data/user_datasets): each command a user would write after
reading docs/own-data.md reads every row as the case's truth says (the prompt the model sees, and a gold that a
completion boxing the true answer scores 1 against under grpo's `math` reward), or is refused in one line that
names the command that works, which then does. A command whose case says `refused_naming` must be refused in one line
naming those words (data grpo cannot read right as asked: code for the `math` reward, a gold that is a position)."""

import json
import logging
from pathlib import Path

import pytest

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.rewards import math_reward
from grpo.tasks import build_task

DATA = Path(__file__).resolve().parents[2] / "data" / "user_datasets"
# (case, command) refused, and what the one-line refusal must name for the user to write instead.
REFUSED = {
    ("orz_math_sharegpt_array", "defaults"): ["0.value", "1.ground_truth.value", "read item i as column i"],
    ("verl_reward_model", "task.prompt_column=prompt task.answer_column=reward_model"):
        ["task.answer_column=reward_model.ground_truth"],
    ("aqua_rat_options", "task.prompt_column=question task.answer_column=correct"):
        ["'options'", "task.prompt_template='{question}\\n{options}'"],
    ("sharegpt_gsm8k_conversations", "task.prompt_column=conversations (docs/own-data.md's ShareGPT row)"):
        ["task.answer_column=conversations.-1.value"],
}
# (case, command) that loads with rows grpo cannot know to be wrong, and what the load must say to set instead.
EXPLAINED = {
    ("countdown_input_output", "task.prompt_column=input task.answer_column=output"):
        ["holds a word", "task.prompt_template"],
}


def commands():
    for folder in sorted(p for p in DATA.iterdir() if p.is_dir()):
        case = json.loads((folder / "case.json").read_text())
        for command in case["commands"] + case.get("follow_up", []):
            yield pytest.param(folder, case, command, id=f"{folder.name}: {command['name']}")


def test_every_case_has_its_source_and_rows():
    folders = [p for p in DATA.iterdir() if p.is_dir()]
    assert len(folders) >= 24
    for folder in folders:
        case = json.loads((folder / "case.json").read_text())
        assert (folder / "SOURCE").read_text().startswith("url: ") and (folder / case["files"]).is_file()


@pytest.mark.parametrize("folder,case,command", commands())
def test_a_users_command_reads_each_row_right_or_says_what_to_write(folder, case, command, caplog):
    data = str(folder / case["files"])
    cfg = TaskConfig(name="dataset", train_files=[data], test_files=[data], **command["keys"])
    named = REFUSED.get((folder.name, command["name"]), command.get("refused_naming"))
    if named is not None:
        with pytest.raises(ConfigError) as info:
            build_task(cfg)
        assert "\n" not in str(info.value) and all(text in str(info.value) for text in named), str(info.value)
        return
    explained = EXPLAINED.get((folder.name, command["name"]))
    if explained is not None:
        with caplog.at_level(logging.INFO, logger="grpo.tasks.dataset"):
            build_task(cfg)
        assert all(text in caplog.text for text in explained), caplog.text
        return
    problems = build_task(cfg).eval_problems(None)
    assert len(problems) == len(case["truth"])
    for problem, truth in zip(problems, case["truth"]):
        assert problem.question.startswith(truth["prompt_starts"])
        shown = problem.question if problem.messages is None else "\n".join(m["content"] for m in problem.messages)
        assert all(text in shown for text in truth.get("prompt_contains", [])), shown
        if truth["chat"] is not None:
            assert (problem.messages is not None) == truth["chat"]
        if "last_role" in truth:
            assert problem.messages[-1]["role"] == truth["last_role"]
        if truth["gold"] is not None:  # None: no gold a math reward could use (code, a position among options)
            assert math_reward("\\boxed{" + truth["gold"] + "}", problem.gold) == 1.0, (problem.gold, truth["gold"])
