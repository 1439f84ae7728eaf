"""Columns by name or by a dotted path into nested fields, and naming the fields a dict column has."""

from grpo.tasks.fields import describe, found, lookup, name_a_field

VERL = {"prompt": [{"content": "q", "role": "user"}], "reward_model": {"ground_truth": "4", "style": "rule"}}


def test_a_dotted_path_reaches_a_field_inside_dicts_and_list_items():
    assert lookup(VERL, "reward_model.ground_truth") == "4"
    assert lookup(VERL, "prompt.0.content") == "q"
    assert lookup(VERL, "reward_model.missing") is None and lookup(VERL, "prompt.3.content") is None
    assert lookup(VERL, "prompt.-1.content") == "q" and lookup(VERL, "prompt.-2.content") is None


def test_a_column_whose_name_has_a_dot_is_found_by_its_name_first():
    row = {"extra_info.index": 7, "extra_info": {"index": 1}}
    assert lookup(row, "extra_info.index") == 7


def test_a_path_is_found_if_any_row_has_it():
    assert found([{"a": None}, {"a": {"b": 1}}], "a.b")
    assert not found([{"a": None}, {"a": "text"}], "a.b")


def test_dict_columns_are_described_with_their_fields():
    rows = [{"data_source": "x", "reward_model": None}, VERL]
    assert describe(["data_source", "prompt", "reward_model"], rows) == (
        "data_source, prompt, reward_model (reward_model.ground_truth, reward_model.style)")
    nested = {"1": {"from": "assistant", "ground_truth": {"value": "1008"}}}
    assert describe(["1"], [nested]) == "1 (1.from, 1.ground_truth.value)"


def test_a_dict_where_text_was_needed_names_what_to_set():
    assert name_a_field("f:1", "reward_model", VERL["reward_model"], "task.answer_column", "the answer") == (
        "f:1: column 'reward_model' holds a dict, not the answer: name one of its fields, "
        "task.answer_column=reward_model.ground_truth or reward_model.style")
    assert name_a_field("f:1", "x", {}, "task.answer_column", "the answer") == (
        "f:1: column 'x' holds a dict, not the answer")
