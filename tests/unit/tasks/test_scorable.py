"""Golds the `math` reward would score wrongly or not at all are refused at load, each rule for data of its shape;
the real rows behind each are in tests/data/user_datasets (mbpp_code_tests, aqua_rat_options, mmlu_pro_answer_index,
deepscaler_solution_boxes, alpaca_math_answer_list, sharegpt_gsm8k_conversations, sat_math_options_text,
mmlu_stem_answer_index). Here: what each rule leaves be."""

import logging

import pytest

from grpo.errors import ConfigError

from .test_dataset import dataset

PROGRAM = "def f(x):\n    return x + 1"
CONVERSATION = [{"from": "human", "value": "What is 2 + 3?"}, {"from": "gpt", "value": "2 + 3 = 5\n#### 5"}]
OPTIONS = ["1", "2", "3"]


def test_rules_apply_only_to_the_math_reward(tmp_path):
    rows = [{"prompt": "Write f.", "answer": PROGRAM}, {"prompt": "Which is two?", "answer": 1, "options": OPTIONS}]
    with pytest.raises(ConfigError, match="task.reward=module:function"):
        dataset(tmp_path, rows[:1])
    assert dataset(tmp_path, rows[:1], reward="my_rewards:run_tests").eval_problems(None)[0].gold == PROGRAM
    assert dataset(tmp_path, rows[1:], reward=["my_rewards:choice"]).eval_problems(None)[0].gold == "1"


def test_a_few_golds_it_cannot_use_are_said_at_load_not_refused(tmp_path, caplog):
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)] + [
        {"prompt": "Write f.", "answer": PROGRAM}]
    with caplog.at_level(logging.INFO, logger="grpo.tasks.dataset"):
        dataset(tmp_path, rows)
    assert "1 of the first 4 golds the math reward cannot use" in caplog.text


def test_a_gold_pattern_says_how_to_read_the_gold_so_the_reading_rules_leave_it_be(tmp_path):
    rows = [{"prompt": "Which is two?", "answer": 1, "options": OPTIONS}]
    with pytest.raises(ConfigError, match="positions among the options"):
        dataset(tmp_path, rows)
    assert dataset(tmp_path, rows, gold_pattern="(.+)").eval_problems(None)[0].gold == "1"


def test_option_letters_load_once_a_prompt_shows_the_options(tmp_path):
    rows = [{"question": "Which is two?", "options": ["A)1", "B)2"], "correct": "B"}]
    with pytest.raises(ConfigError, match="no prompt shows the options of column 'options'"):
        dataset(tmp_path, rows, prompt_column="question", answer_column="correct")
    with pytest.raises(ConfigError, match=r"\{options\} in task.prompt_template"):
        dataset(tmp_path, rows, prompt_template="{question}", answer_column="correct")
    [problem] = dataset(tmp_path, rows, prompt_template="{question}\\n{options}",
                        answer_column="correct").eval_problems(None)
    assert problem.question == "Which is two?\nA)1\nB)2" and problem.gold == "B"


def test_options_labelled_in_one_text_are_options_and_an_option_in_the_stem_does_not_show_them(tmp_path):
    rows = [{"question": "$|x-10| = 0$: x?", "options": "A) -10 B) 0 C) 10 D) -10 and 10", "Answer": "C"},
            {"question": "Which is two?", "options": "(A) 1 (B) 2", "Answer": "B"}]
    with pytest.raises(ConfigError, match="no prompt shows the options of column 'options'"):
        dataset(tmp_path, rows, prompt_column="question", answer_column="Answer")
    problems = dataset(tmp_path, rows, prompt_template="{question}\\n{options}",
                       answer_column="Answer").eval_problems(None)
    assert [p.gold for p in problems] == ["C", "B"]
    with pytest.raises(ConfigError, match=r": 2 of 4\): positions among the options"):
        dataset(tmp_path, [dict(rows[0], Answer=2)], prompt_column="question", answer_column="Answer")


def test_text_that_only_begins_like_options_is_no_options_column(tmp_path):
    rows = [{"question": "Which is two?", "note": "B) see above A) first", "Answer": "B"}]
    assert dataset(tmp_path, rows, prompt_column="question", answer_column="Answer").eval_problems(None)[0].gold == "B"


def test_boxed_golds_that_agree_with_the_datas_own_answer_load(tmp_path):
    rows = [{"problem": "What is 2 + 3?", "solution": "So $\\boxed{5}$.", "answer": "5"}]
    assert dataset(tmp_path, rows, prompt_column="problem", answer_column="solution").eval_problems(None)[0].gold == "5"
    rows[0]["answer"] = "6"
    with pytest.raises(ConfigError, match="differ from the data's own 'answer' column in 1 of 1 rows"):
        dataset(tmp_path, rows, prompt_column="problem", answer_column="solution")


def test_a_gold_read_from_a_message_leaves_it_and_those_after_it_out_of_the_prompt(tmp_path):
    rows = [{"conversations": CONVERSATION}]
    with pytest.raises(ConfigError, match="task.answer_column=conversations.-1.value"):
        dataset(tmp_path, rows, prompt_column="conversations")
    [problem] = dataset(tmp_path, rows, prompt_column="conversations",
                        answer_column="conversations.-1.value").eval_problems(None)
    assert problem.messages == ({"role": "user", "content": "What is 2 + 3?"},) and problem.gold == "5"
    chat = [{"role": "user", "content": "Begin:"}, {"role": "assistant", "content": "The answer"}]
    [begun] = dataset(tmp_path, [{"prompt": chat, "answer": "7"}]).eval_problems(None)
    assert begun.messages[-1]["role"] == "assistant" and begun.gold == "7"
