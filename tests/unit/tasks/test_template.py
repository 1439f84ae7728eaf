"""task.prompt_template: a text prompt made of several columns, what each kind of value becomes, and the refusals
and notes around prompts that miss a column (Alpaca's input, Countdown's bare numbers)."""

import logging

import pytest

from grpo.errors import ConfigError
from grpo.tasks.template import PromptTemplate

from .test_dataset import dataset

ROW = {"question": "Which?", "options": ["A)1", "B)2"], "nums": [44, 19], "target": 23, "input": None,
       "meta": {"level": "easy"}}


def test_a_template_writes_text_as_it_is_a_list_of_texts_one_per_line_and_other_values_as_json():
    assert PromptTemplate("{question}\\n{options}").render(ROW) == "Which?\nA)1\nB)2"
    assert PromptTemplate("Using {nums}, make {target}.").render(ROW) == "Using [44, 19], make 23."
    assert PromptTemplate("{question} ({meta.level})\n\n{input}").render(ROW) == "Which? (easy)"


def test_a_template_reads_columns_for_the_prompt_and_leaves_every_column_to_the_rewards(tmp_path):
    rows = [{"nums": [3, 5], "target": 8, "prompt": "unused"}]
    [problem] = dataset(tmp_path, rows, prompt_template="Reach {target} from {nums}.", answer_column="target",
                        reward="my_rewards:countdown").eval_problems(None)
    assert problem.question == "Reach 8 from [3, 5]." and problem.messages is None and problem.gold == "8"
    assert dict(problem.columns) == rows[0]


@pytest.mark.parametrize("template,message", [
    ("{question} {choices}", "names {choices}, but"),
    ("Solve it.", "names no column"),
])
def test_a_template_naming_no_column_or_a_missing_one_is_refused_with_the_columns(tmp_path, template, message):
    with pytest.raises(ConfigError) as info:
        dataset(tmp_path, [{"question": "q", "answer": "1"}], prompt_template=template)
    assert message in str(info.value) and ("its columns: question, answer" in str(info.value) or "{COLUMN}" in str(
        info.value))


def test_alpaca_rows_with_an_input_are_refused_with_the_template_that_reads_both(tmp_path):
    rows = [{"instruction": "Add these.", "input": "2 and 3", "output": "5"}, {"instruction": "Say 1.", "input": ""}]
    with pytest.raises(ConfigError) as info:
        dataset(tmp_path, rows, prompt_column="instruction", answer_column="output")
    assert "1 rows hold an 'input'" in str(info.value)
    assert "task.prompt_template='{instruction}\\n\\n{input}'" in str(info.value)
    problems = dataset(tmp_path, rows, prompt_template="{instruction}\\n\\n{input}",
                       answer_column="output").eval_problems(None)
    assert [p.question for p in problems] == ["Add these.\n\n2 and 3", "Say 1."]


def test_prompts_without_a_word_are_said_at_load_with_the_template_that_states_the_task(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="grpo.tasks.dataset"):
        dataset(tmp_path, [{"input": "30,100,93", "output": "23"}], prompt_column="input", answer_column="output")
    assert "no prompt of column 'input' holds a word (e.g. '30,100,93')" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="grpo.tasks.dataset"):
        dataset(tmp_path, [{"prompt": "What is 2 + 3?", "answer": "5"}])
    assert "holds a word" not in caplog.text
