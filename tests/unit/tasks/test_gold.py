"""Reading golds from answer values: GSM8K's '####', MATH's last \\boxed{}, one-element lists, numbers, a pattern."""

import re

import pytest

from grpo.errors import ConfigError
from grpo.tasks.gold import GoldReader


def read(value, pattern=None):
    reader = GoldReader("answer", re.compile(pattern) if pattern else None)
    return reader.read(value, "f:1"), reader.notes()


def test_a_gsm8k_solution_gives_the_number_after_its_mark():
    assert read("so 48+24 = 72\n#### 72") == ("72", ["1 golds read after '####' (GSM8K's format)"])


def test_a_math_solution_gives_its_last_boxed_answer_with_nested_braces():
    solution = r"first \boxed{1}, then $x=\boxed{\frac{1}{4}}$."
    assert read(solution) == (r"\frac{1}{4}", [
        r"1 golds read from the answer's last \boxed{} (MATH's format; task.gold_pattern reads it otherwise)"])
    assert read(r"\boxed{4}")[0] == "4"
    assert read([r"\boxed{4}"]) == ("4", [  # AReaL's solutions: a list of the box alone
        "1 golds read from the answer's last \\boxed{} (MATH's format; task.gold_pattern reads it otherwise)",
        "1 golds read from one-element lists"])


def test_a_plain_answer_is_the_gold_and_nothing_is_said():
    assert read(" 42 ") == ("42", [])
    assert read(r"\frac{1}{4}") == (r"\frac{1}{4}", [])


@pytest.mark.parametrize("value,gold", [("9 (apples)", "9"), ("-2.5 (m/s)", "-2.5"), ("1,200 (dollars)", "1,200")])
def test_a_number_with_its_unit_in_parentheses_gives_the_number_and_says_so(value, gold):
    said = "1 golds read without the unit in parentheses after the number (ASDiv's format, e.g. '9 (apples)' is 9)"
    assert read(value) == (gold, [said])


@pytest.mark.parametrize("value", ["3 (mod 5)", "(1, 2)", "x (apples)", "2 (see 1)"])
def test_parentheses_that_are_not_a_unit_after_a_number_stay(value):
    assert read(value) == (value, [])


@pytest.mark.parametrize("value,gold", [(27.0, "27"), (-1.0, "-1"), (1.5, "1.5"), (14, "14"), (True, "True")])
def test_a_number_is_its_text_and_an_integral_float_has_no_point(value, gold):
    assert read(value)[0] == gold


def test_a_one_element_list_gives_its_item_and_says_so():
    assert read(["72"]) == ("72", ["1 golds read from one-element lists"])
    assert read(["72", 72]) == ("72", ["1 golds read from one-element lists"])  # the same answer twice is one
    assert read([]) == ("", []) and read([None]) == ("", [])


def test_a_list_of_several_answers_is_refused_naming_what_to_set():
    with pytest.raises(ConfigError, match=r"^f:1: column 'answer' holds 2 answers \(\['Paris', 'paris, France'\]\), "
                                          r"and a gold is one answer: set task.answer_column to a column holding one"):
        read(["Paris", "paris, France"])


def test_a_pattern_is_used_instead_of_the_known_formats():
    assert read(r"\boxed{3} ANSWER: 5", r"ANSWER: (\d+)") == ("5", [])
    assert read("no match", r"ANSWER: (\d+)") == ("", [])
