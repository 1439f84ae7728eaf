"""Reward functions in the shapes public TRL GRPO code writes them (tests/data/trl_reward_shapes/: written here,
each modelled on a named public source), run through grpo as docs/coming-from-trl.md tells a TRL user: the data as
JSONL in the shape the source maps it to, `task.reward=MODULE:FUNCTION`, checked at start as a run checks it, then
scoring a fixed batch. grpo's rewards must be those of the function called TRL's way on the same batch: that call
is the contract."""

from __future__ import annotations

import asyncio
import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grpo.config import load_config
from grpo.errors import ConfigError
from grpo.rewards import Scores, TrainerState, check_rewards, get_reward, resolve_rewards, score
from grpo.tasks import build_task, reward_inputs

from .tasks.test_files import write_rows

FIXTURES = Path(__file__).parents[1] / "data" / "trl_reward_shapes"
STATE = TrainerState(global_step=3, max_steps=10)

# Data shaped as each modelled source maps it (see each module's docstring in FIXTURES): GSM8K's first three train
# questions verbatim; the completions are made up to reach each function's branches.
WILLCB_SYSTEM = "\nRespond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
GSM8K = [(("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How "
           "many clips did Natalia sell altogether in April and May?"), "72"),
         (("Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did "
           "she earn?"), "10"),
         (("Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. Her "
           "parents decided to give her $15 for that purpose, and her grandparents twice as much as her parents. How "
           "much more money does Betty need to buy the wallet?"), "5")]
R1_SYSTEM = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it.")
R1 = [("What is $\\frac{1}{3}+\\frac{1}{3}$?", "$\\frac{2}{3}$"), ("Compute $2^{10}$.", "$1024$"),
      ("Name a prime.", "any prime")]  # the last gold does not parse: TRL's accuracy shape says None, open-r1's 1


@dataclass(frozen=True)
class Shape:
    rows: list[dict[str, Any]]
    completions: list[str]
    overrides: tuple[str, ...] = ()
    completion_ids: list[list[int]] = field(default_factory=list)

    def ids(self) -> list[list[int]]:
        return self.completion_ids or [[7] * (len(c) // 4 + 1) for c in self.completions]


WILLCB = Shape(
    [{"question": q, "answer": a, "prompt": [{"role": "system", "content": WILLCB_SYSTEM},
                                             {"role": "user", "content": q}]} for q, a in GSM8K],
    ["<reasoning>\n48/2 = 24, 48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>\n",
     "<reasoning>12 * 50 / 60</reasoning> <answer>$10</answer>",
     "<answer>6</answer> because <reasoning>100 / 2 - 15 - 30</reasoning>"])
OPEN_R1 = Shape(
    [{"problem": p, "solution": s, "prompt": [{"role": "system", "content": R1_SYSTEM},
                                              {"role": "user", "content": p}]} for p, s in R1],
    ["<think>\nFirst, add. Next, simplify. Finally, done.\n</think>\n<answer>\n$\\boxed{\\frac{2}{3}}$\n</answer>",
     "<think>\nStep 1: 2^10\n</think>\n<answer>\n\\boxed{1000}\n</answer>",
     "<think>a</think><think>b</think><answer>b</answer>"],
    ("task.answer_column=null",))
TEXT = Shape(  # TRL's docs' standard-format example: a text prompt and a ground_truth column
    [{"prompt": "Problem: Solve the equation $2x + 3 = 7$. Solution:", "ground_truth": "2"},
     {"prompt": "Problem: Solve the equation $3x - 5 = 10$.", "ground_truth": "5"}],
    [r" The solution is \boxed{2}.", ""], ("task.answer_column=null",))
TLDR = Shape(  # trl-lib/tldr's columns: prompt and completion (TRL leaves `completion` out of the keywords)
    [{"prompt": "SUBREDDIT: r/relationships\nTITLE: ...\nPOST: ...\nTL;DR:", "completion": " a reference summary"}],
    ["  a summary of twenty-six "], ("task.answer_column=null",))
OVERLONG = Shape(OPEN_R1.rows, OPEN_R1.completions, OPEN_R1.overrides, [[1] * 70, [1] * 90, [1] * 120])

CASES = [
    *(("gsm8k_tags", name, WILLCB) for name in ("answer_reward", "integer_answer_reward", "strict_layout_reward",
                                                "loose_layout_reward", "tag_tally_reward")),
    *(("r1_math", name, OPEN_R1) for name in ("math_answer_reward", "think_answer_layout_reward", "tag_once_reward",
                                              "step_marker_reward", "length_vs_correct_reward")),
    ("trl_builtin", "think_first_reward", OPEN_R1),
    ("trl_builtin", "verified_accuracy_reward", OPEN_R1),
    ("trl_docs", "compact_format_reward", OPEN_R1),
    ("trl_docs", "boxed_ground_truth_reward", TEXT),
    ("trl_docs", "nonblank_async_reward", TEXT),
    ("tldr_length", "near_twenty_chars_reward", TLDR),
]


def trl_rewards(fn: Any, shape: Shape) -> list[float | None]:
    """`fn` called as TRL's GRPOTrainer calls it: prompts and completions as text, or for chat prompts as
    message lists (the completion one assistant message), completion_ids, trainer_state, and every column but
    `prompt` and `completion`; its NaN and None both a missing value."""
    chat = isinstance(shape.rows[0]["prompt"], list)
    columns = {key: [row[key] for row in shape.rows] for key in shape.rows[0] if key not in ("prompt", "completion")}
    out = fn(prompts=[row["prompt"] for row in shape.rows],
             completions=[[{"role": "assistant", "content": c}] if chat else c for c in shape.completions],
             completion_ids=shape.ids(), trainer_state=STATE, **columns)
    if inspect.isawaitable(out):
        out = asyncio.run(out)
    return [None if value is None or math.isnan(value) else float(value) for value in out]


def grpo_scores(tmp_path: Path, spec: str, shape: Shape, fn: Any = None) -> tuple[str, Scores]:
    """The reward's name and grpo's scores of `shape`'s completions, the data read and the reward named as a user
    does (`fn`: a callable given to the Python API instead of the import path), after the start's check."""
    train = write_rows(tmp_path / "train.jsonl", shape.rows)
    test = write_rows(tmp_path / "test.jsonl", shape.rows)
    cfg = load_config("tiny", ["task.name=dataset", f"task.train_files=[{train}]", f"task.test_files=[{test}]",
                               f"task.reward={spec}", *shape.overrides])
    problems = build_task(cfg.task).eval_problems(None)
    rewards = resolve_rewards(fn or cfg.task.reward, cfg.task.reward_weights, "task.reward")
    golds = [p.gold for p in problems]
    check_rewards(rewards, {**reward_inputs(problems, golds, [[1] * len(g) for g in golds]),
                            "trainer_state": TrainerState(0, STATE.max_steps)}, "the start's check")
    return rewards[0].name, score(rewards, {**reward_inputs(problems, shape.completions, shape.ids()),
                                            "trainer_state": STATE})


@pytest.fixture
def fixtures_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


@pytest.mark.parametrize("module,name,shape", CASES, ids=[f"{m}:{n}" for m, n, _ in CASES])
def test_a_trl_shaped_reward_scores_in_grpo_as_in_trl(tmp_path, fixtures_importable, module, name, shape):
    spec = f"{module}:{name}"
    expected = trl_rewards(get_reward(spec), shape)
    reward_name, scores = grpo_scores(tmp_path, spec, shape)
    assert scores.parts[reward_name] == expected
    assert scores.errors == [None] * len(expected)


def test_an_accuracy_reward_saying_none_for_a_gold_it_cannot_read_stays_none(tmp_path, fixtures_importable):
    reward_name, scores = grpo_scores(tmp_path, "trl_builtin:verified_accuracy_reward", OPEN_R1)
    assert scores.parts[reward_name][2] is None and scores.total[2] is None  # unscorable, not 0
    assert scores.parts[reward_name][:2] == [1.0, 0.0]


def test_a_reward_object_scoring_completion_ids_given_to_the_python_api(tmp_path, fixtures_importable):
    overlong = get_reward("trl_builtin:overlong_penalty")(max_len=100, margin=20)
    expected = trl_rewards(overlong, OVERLONG)
    assert expected == [0.0, -0.5, -1.0]  # the token counts, not the text, decide
    reward_name, scores = grpo_scores(tmp_path, "math", OVERLONG, fn=overlong)
    assert reward_name == "overlong_penalty"
    assert scores.parts[reward_name] == expected


def test_weighted_trl_rewards_sum_as_trl_sums_them(tmp_path, fixtures_importable):
    specs = ["gsm8k_tags:tag_tally_reward", "gsm8k_tags:answer_reward"]
    _, scores = grpo_scores(tmp_path, f"[{','.join(specs)}]", Shape(WILLCB.rows, WILLCB.completions,
                                                                  ("task.reward_weights=[0.5,2.0]",)))
    parts = [trl_rewards(get_reward(spec), WILLCB) for spec in specs]
    assert scores.total == [0.5 * x + 2.0 * c for x, c in zip(*parts)]


def test_the_data_s_own_question_column_reaches_the_reward_not_grpo_s(tmp_path, fixtures_importable):
    """GSM8K mapped for TRL keeps its `question` beside the chat `prompt`; TRL passes that column as it is."""
    seen: dict[str, Any] = {}

    def spy(completions, question, **kwargs):
        seen["question"] = question
        return [0.0] * len(completions)

    rows = [{**row, "question": f"data's own {i}"} for i, row in enumerate(WILLCB.rows)]
    grpo_scores(tmp_path, "math", Shape(rows, WILLCB.completions), fn=spy)
    assert seen["question"] == [f"data's own {i}" for i in range(len(rows))]


def test_a_trl_doc_s_misspelt_keyword_fails_at_start_in_one_line_as_it_fails_in_trl(tmp_path, fixtures_importable):
    """TRL's docs name the keyword `completions_ids`; TRL passes `completion_ids`, so the function fails there too."""
    spec = "trl_docs:token_count_reward"
    with pytest.raises(TypeError, match="completions_ids"):
        trl_rewards(get_reward(spec), TEXT)
    with pytest.raises(ConfigError, match=r"^reward function token_count_reward failed on the start's check: "
                                          r"TypeError: .*'completions_ids' \(it is called by keyword with prompts, "
                                          r"completions, completion_ids, .*; completions are strings, as the prompts "
                                          r"are text;"):
        grpo_scores(tmp_path, spec, TEXT)


def test_chat_completions_on_text_prompts_fail_at_start_saying_how_completions_were_given(tmp_path,
                                                                                          fixtures_importable):
    """Rewards reading completion[0]["content"] (willccbb's shape) fail on a text prompt column, in TRL as here."""
    text = Shape([{"prompt": q, "answer": a} for q, a in GSM8K], WILLCB.completions)
    with pytest.raises(ConfigError, match=r"TypeError: string indices must be integers.*; completions are strings, as "
                                          r"the prompts are text; give the prompt column as \[\{\"role\", "
                                          r"\"content\"\}\] messages"):
        grpo_scores(tmp_path, "gsm8k_tags:integer_answer_reward", text)
