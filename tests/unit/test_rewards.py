from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from grpo.errors import ConfigError
from grpo.rewards import (
    ExtraColumns,
    Reward,
    RewardError,
    TrainerState,
    check_golds,
    extract_answer,
    get_reward,
    gsm8k_gold,
    math_batch_reward,
    math_reward,
    parse_number,
    register_reward,
    resolve_rewards,
    score,
    score_completions,
)

GSM8K_TEST = Path("/work/shared/data/gsm8k/test.jsonl")

MATH_CASES: list[tuple[str, str | None, float | None]] = [
    # boxed
    (r"So we get \boxed{18}.", "18", 1.0),
    (r"Thus \boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"Thus \boxed{\dfrac{3}{4}}", "3/4", 1.0),
    (r"First \boxed{3}, wait, actually \boxed{5}", "5", 1.0),
    (r"First \boxed{3}, wait, actually \boxed{5}", "3", 0.0),
    (r"The result is \boxed 5", "5", 1.0),
    (r"$\boxed{1{,}234}$", "1234", 1.0),
    (r"\boxed{\$42}", "42", 1.0),
    (r"\boxed{-\frac{1}{2}}", "-0.5", 1.0),
    (r"\boxed{x = 7}", "7", 1.0),
    (r"\boxed{2\sqrt{3}}", r"2\sqrt{3}", 1.0),
    (r"\boxed{\sqrt{12}}", r"2\sqrt{3}", 1.0),
    (r"\boxed{\frac{\pi}{2}}", r"\frac{\pi}{2}", 1.0),
    (r"\boxed{90^\circ}", "90", 1.0),
    (r"Answer \boxed{5} then truncated \boxed{12", "5", 1.0),
    # phrases
    ("The answer is 18.", "18", 1.0),
    ("the answer is: 18 apples", "18", 1.0),
    ("Final Answer: $1,234.00", "1234", 1.0),
    ("Final answer is 3.5. Done.", "3.5", 1.0),
    ("**Final Answer:** 42", "42", 1.0),
    ("Final answer:\n\n42", "42", 1.0),
    ("The answer is 10. Hmm, no: the answer is 12.", "12", 1.0),
    ("The answer is $3.50 per hour.", "3.5", 1.0),
    ("The answer is 5 dollars", "5", 1.0),
    ("THE ANSWER IS 7", "7", 1.0),
    # #### lines
    ("She has 9 eggs.\n#### 72", "72", 1.0),
    ("#### 1,234", "1,234", 1.0),
    # last number fallback
    ("First 3 then 4 then 72", "72", 1.0),
    ("It costs $1,000 in total", "1000", 1.0),
    # number formats
    ("The answer is 50%", "50", 1.0),
    (r"The answer is 50\%", "50", 1.0),
    ("The answer is 18.00", "18", 1.0),
    ("The answer is -5", "-5", 1.0),
    ("The answer is −5", "-5", 1.0),
    ("The answer is .5", "0.5", 1.0),
    ("The answer is 0.5", ".5", 1.0),
    ("The answer is 3/4", "0.75", 1.0),
    ("The answer is 0.75", r"\frac{3}{4}", 1.0),
    (r"The answer is \$12", "$12", 1.0),
    (r"The answer is 12 \text{ cookies}", "12", 1.0),
    (r"The answer is 1\,000", "1000", 1.0),
    ("The answer is 0.3333333333", "1/3", 1.0),  # within abs_tol 1e-6
    ("The answer is 0.333", "1/3", 0.0),
    # wrong answers
    ("The answer is 17.", "18", 0.0),
    (r"\boxed{-5}", "5", 0.0),
    (r"\boxed{2\sqrt{2}}", r"2\sqrt{3}", 0.0),
    (r"\boxed{7}", r"2\sqrt{3}", 0.0),
    # no answer at all
    ("I have no idea.", "18", 0.0),
    ("", "18", 0.0),
    # textual gold: string comparison
    (r"\boxed{\text{Monday}}", "Monday", 1.0),
    (r"\boxed{\text{Dynamo}}", "Monday", 0.0),
    # unusable gold
    ("The answer is 18", "", None),
    ("The answer is 18", "   ", None),
    ("The answer is 18", None, None),
    ("The answer is 18", "None", None),
    ("The answer is 18", "???", None),
    ("The answer is 18", "@@ --", None),
    ("nothing", "", None),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), MATH_CASES)
def test_math_reward(completion: str, gold: str | None, expected: float | None) -> None:
    assert math_reward(completion, gold) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\frac{\sqrt{3}}{\sqrt{2}}} and \boxed{9}", "9"),
        (r"\boxed 5", "5"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        ("The answer is 18.", "18"),
        ("Final Answer: $1,234.00", "$1,234.00"),
        ("x\n#### 72\n", "72"),
        ("values 3-4 and 8", "8"),
        ("a -3 b", "-3"),
        ("no numbers here", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,234", 1234.0),
        ("$1,234.00", 1234.0),
        ("12 apples", 12.0),
        ("$3.50 per hour", 3.5),
        ("18.", 18.0),
        ("−5", -5.0),
        (r"-\dfrac{3}{4}", -0.75),
        (r"\frac12", 0.5),
        (r"$\$5$", 5.0),
        (r"\text{5}", 5.0),
        ("1{,}000", 1000.0),
        (r"1\!000", 1000.0),
        ("1/0", None),
        ("2x", None),
        ("3 + 4", None),
        ("1,2", None),
        (r"2\sqrt{3}", None),
        ("apples", None),
        ("", None),
    ],
)
def test_parse_number(text: str, expected: float | None) -> None:
    assert parse_number(text) == expected


def test_gsm8k_gold() -> None:
    assert gsm8k_gold("She makes 9 * 2 = $<<9*2=18>>18.\n#### 18") == "18"
    assert gsm8k_gold("a #### b\n#### 1,234 ") == "1,234"
    assert gsm8k_gold("no marker") is None


@pytest.mark.skipif(not GSM8K_TEST.exists(), reason="GSM8K test split not present")
def test_real_gsm8k_golds_score_one() -> None:
    with GSM8K_TEST.open() as f:
        rows = [json.loads(next(f)) for _ in range(20)]
    for row in rows:
        gold = gsm8k_gold(row["answer"])
        assert gold is not None
        assert math_reward(f"The answer is \\boxed{{{gold}}}", gold) == 1.0
        assert math_reward("The answer is \\boxed{-123456789}", gold) == 0.0


def test_register_as_decorator_and_call() -> None:
    @register_reward("test_rewards_decorated")
    def decorated(completions: list[str], **_: object) -> list[float | None]:
        return [1.0] * len(completions)

    assert get_reward("test_rewards_decorated") is decorated

    def called(completions: list[str], **_: object) -> list[float | None]:
        return [0.0] * len(completions)

    assert register_reward("test_rewards_called", called) is called
    assert get_reward("test_rewards_called") is called


def test_register_duplicate_name_raises() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_reward("math", math_batch_reward)
    with pytest.raises(ValueError, match="already registered"):

        @register_reward("math")
        def other(completions: list[str], **_: object) -> list[float | None]:
            return []


def test_unknown_reward_lists_registered_names() -> None:
    with pytest.raises(KeyError, match="math"):
        get_reward("no_such_reward")


def test_reward_from_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_user_rewards.py").write_text(
        "def length_reward(completions, **kw):\n    return [float(len(c)) for c in completions]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = get_reward("my_user_rewards:length_reward")
    assert fn(["ab", "c"]) == [2.0, 1.0]
    with pytest.raises(AttributeError, match="nope"):
        get_reward("my_user_rewards:nope")
    sys.modules.pop("my_user_rewards", None)


def test_builtin_math_reward() -> None:
    fn = get_reward("math")
    out = fn(["The answer is 3", r"\boxed{4}", "nothing"], gold=["3", "5", ""], question=["q"] * 3)
    assert out == [1.0, 0.0, None]


def test_score_completions_falls_back_per_sample() -> None:
    def picky(completions: list[str], gold: list[str]) -> list[float | None]:
        out: list[float | None] = []
        for c, g in zip(completions, gold):
            if c == "bad":
                raise RuntimeError("cannot score this")
            out.append(float(c == g))
        return out

    rewards, errors = score_completions(picky, ["a", "bad", "c"], {"gold": ["a", "b", "x"]})
    assert rewards == [1.0, None, 0.0]
    assert errors == [None, "RuntimeError: cannot score this", None]


def test_trl_s_log_extra_columns_land_at_each_completion_s_place_when_scored_one_by_one() -> None:
    """TRL's log_extra(column, values): one value per completion of the call; a batch that raised is scored one by
    one, and each of those calls writes at its own completion's place."""
    def parsed(completions, gold, log_extra, **kwargs):
        if len(completions) > 1 and "bad" in completions:
            raise RuntimeError("the batch breaks")
        log_extra("seen", [f"{c}/{g}" for c, g in zip(completions, gold)])
        return [float(c == g) for c, g in zip(completions, gold)]

    for completions in (["a", "b", "c"], ["a", "bad", "c"]):
        extra = ExtraColumns(3)
        score([Reward("parsed", parsed)], {"completions": completions, "gold": ["a", "x", "c"],
                                           "trainer_state": TrainerState(0, 1), "log_extra": extra})
        assert [extra.of(i) for i in range(3)] == [{"seen": f"{c}/{g}"} for c, g in zip(completions, "axc")]


def test_a_reward_using_trl_s_log_extra_passes_the_start_s_check_where_nothing_is_logged() -> None:
    def needs_it(completions, log_extra, **kwargs):
        log_extra("length", [len(c) for c in completions])
        return [1.0] * len(completions)

    scores = score([Reward("needs_it", needs_it)], {"completions": ["ab"], "trainer_state": TrainerState(0, 1)})
    assert scores.total == [1.0]


def test_score_completions_wrong_length_raises() -> None:
    def short(completions: list[str], **_: object) -> list[float | None]:
        return [1.0]

    with pytest.raises(RewardError, match=r"short returned 1 rewards for 2 completions"):
        score_completions(short, ["a", "b"], {})


def test_score_completions_wrong_type_raises() -> None:
    def stringy(completions: list[str], **_: object) -> list[object]:
        return ["1.0" for _ in completions]

    with pytest.raises(RewardError, match="stringy returned str '1.0' at index 0"):
        score_completions(stringy, ["a"], {})


def test_score_completions_nan_is_a_missing_value_and_infinity_an_error() -> None:
    def weird(completions: list[str], **_: object) -> list[float | None]:
        return [math.nan, math.inf, 1, True, None]

    rewards, errors = score_completions(weird, ["a"] * 5, {})
    assert rewards == [None, None, 1.0, 1.0, None]
    assert errors == [None, "infinite reward", None, None, None]


def test_a_sample_every_function_gives_nan_is_unscorable() -> None:
    from grpo.rewards import Reward, score

    def nan(completions, **kwargs):
        return [math.nan] * len(completions)

    scores = score([Reward("nan", nan), Reward("nan_2", nan)], {"completions": ["a"]})
    assert scores.total == [None] and scores.errors == [None]


def test_score_completions_with_math() -> None:
    rewards, errors = score_completions(
        get_reward("math"), ["#### 4", "#### 5"], {"gold": ["4", "4"]}
    )
    assert rewards == [1.0, 0.0]
    assert errors == [None, None]


def test_math_format_gives_a_small_bonus_for_a_readable_wrong_answer_only():
    from grpo.rewards import FORMAT_BONUS, get_reward

    fn = get_reward("math_format")
    completions = ["so \\boxed{7}", "the answer is 8", "I think it is seven-ish", "#### 9"]
    assert fn(completions, gold=["7", "7", "7", None]) == [1.0, FORMAT_BONUS, 0.0, None]


# --- TRL's contract: several functions, weights, None, the check at start -----------------------------------

def test_several_rewards_are_summed_with_weights_and_none_means_does_not_apply() -> None:
    from grpo.rewards import Reward, score

    def length(completions, **kwargs):
        return [float(len(c)) for c in completions]

    def only_digits(completions, **kwargs):  # None: does not apply (TRL's nansum)
        return [float(c.isdigit()) if c[0].isdigit() else None for c in completions]

    def never(completions, **kwargs):
        return [None] * len(completions)

    scores = score([Reward("length", length, 0.5), Reward("only_digits", only_digits, 2.0)],
                   {"completions": ["12", "ab", "3x"]})
    assert scores.total == [0.5 * 2 + 2.0, 0.5 * 2, 0.5 * 2 + 0.0]
    assert scores.parts == {"length": [2.0, 2.0, 2.0], "only_digits": [1.0, None, 0.0]}
    assert score([Reward("never", never)], {"completions": ["a"]}).total == [None]  # no function scored it


def test_a_function_that_raises_on_a_sample_makes_it_unscorable_whatever_the_others_say() -> None:
    from grpo.rewards import Reward, score

    def fine(completions, **kwargs):
        return [1.0] * len(completions)

    def picky(completions, **kwargs):
        if "bad" in completions:
            raise ValueError("cannot read it")
        return [1.0] * len(completions)

    scores = score([Reward("fine", fine), Reward("picky", picky)], {"completions": ["ok", "bad"]})
    assert scores.total == [2.0, None]
    assert scores.errors == [None, "picky: ValueError: cannot read it"]


def test_returned_tuples_and_arrays_are_accepted() -> None:
    import numpy as np
    import torch

    for out in ((1, 0.5), np.array([1.0, 0.5]), torch.tensor([1.0, 0.5])):
        assert score_completions(lambda completions, **kw: out, ["a", "b"], {})[0] == [1.0, 0.5]


def test_the_check_at_start_names_the_function_and_how_it_was_called() -> None:
    from grpo.errors import ConfigError
    from grpo.rewards import Reward, check_rewards

    def positional(completions_text, gold):
        return [1.0]

    with pytest.raises(ConfigError, match=r"^reward function .*positional failed on 1 row: TypeError: .*positional\(\) "
                                          r"got an unexpected keyword argument 'completions' \(it is called by keyword "
                                          r"with completions, gold; take \*\*kwargs for those it does not use; completions are "
                                          r"strings, as the prompts are text; .*\)$"):
        check_rewards([Reward("positional", positional)], {"completions": ["4"], "gold": ["4"]}, "1 row")
    with pytest.raises(RewardError, match=r"returned float 1.0: it must return a list .* \(called on 1 row\)$"):
        check_rewards([Reward("scalar", lambda completions, **kw: 1.0)], {"completions": ["4"]}, "1 row")


def test_resolve_rewards_names_each_function_and_checks_the_weights() -> None:
    from grpo.errors import ConfigError
    from grpo.rewards import resolve_rewards

    rewards = resolve_rewards(["math", "digits", "math", lambda completions, **kw: []], [1, 0.5, 2, 3], "task.reward")
    assert [(r.name, r.weight) for r in rewards] == [("math", 1.0), ("digits", 0.5), ("math_2", 2.0), ("lambda", 3.0)]
    assert resolve_rewards("math", None, "task.reward")[0].name == "math"
    with pytest.raises(ConfigError, match=r"^task.reward_weights has 1 weights for 2 reward functions"):
        resolve_rewards(["math", "digits"], [1.0], "task.reward")
    with pytest.raises(ConfigError, match=r"^eval.reward='nope': unknown reward 'nope'; registered rewards: "):
        resolve_rewards("nope", None, "eval.reward")


def test_a_dotted_import_path_is_refused_with_the_colon_written_in():
    """TRL's `trl grpo --reward_funcs my_lib.rewards.custom_reward` style; grpo's import paths put a colon."""
    with pytest.raises(ConfigError, match=r"^task.reward='my_lib.rewards.custom_reward': unknown reward "
                                          r"'my_lib.rewards.custom_reward': an import path puts a colon before the "
                                          r"function: my_lib.rewards:custom_reward$"):
        resolve_rewards(["my_lib.rewards.custom_reward"], None, "task.reward")


def test_a_reward_module_in_the_working_directory_imports_without_pythonpath(tmp_path, monkeypatch) -> None:
    from grpo.errors import ConfigError
    from grpo.rewards import resolve_rewards

    (tmp_path / "cwd_rewards_mod.py").write_text("def fn(completions, **kw):\n    return [1.0] * len(completions)\n")
    (tmp_path / "broken_rewards_mod.py").write_text("import not_installed_anywhere\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert resolve_rewards("cwd_rewards_mod:fn", None, "task.reward")[0].fn(completions=["a"]) == [1.0]
        with pytest.raises(ConfigError, match=r"^task.reward='broken_rewards_mod:fn': importing broken_rewards_mod "
                                              r"failed: ModuleNotFoundError: No module named 'not_installed_anywhere'"):
            resolve_rewards("broken_rewards_mod:fn", None, "task.reward")
    finally:
        sys.modules.pop("cwd_rewards_mod", None)
        sys.modules.pop("broken_rewards_mod", None)


def test_builtin_rewards_read_chat_completions_as_trl_passes_them() -> None:
    chat = [[{"role": "assistant", "content": "so \\boxed{7}"}], [{"role": "assistant", "content": "8"}]]
    assert get_reward("math")(completions=chat, gold=["7", "7"]) == [1.0, 0.0]


def test_gsm8k_gold_text_is_read_after_its_mark_and_a_worked_solution_is_unscorable():
    """Issue 25 item 2: a hub GSM8K `answer` is scored by its `#### N`; prose with several numbers is None."""
    from grpo.rewards.math_score import math_reward

    assert math_reward("\\boxed{14}", "9 plus 5 is 14.\n#### 14") == 1.0
    assert math_reward("\\boxed{13}", "9 plus 5 is 14.\n#### 14") == 0.0
    assert math_reward("\\boxed{14}", "9 plus 5 is 14.") is None
    assert math_reward("\\boxed{1000}", "1,000 apples") == 1.0


def test_async_rewards_are_awaited_together_even_from_a_thread_running_a_loop() -> None:
    import asyncio

    from grpo.rewards import Reward, score

    started: list[str] = []

    async def judge(completions, **kwargs):  # sees the other judge start only if both run together
        started.append("judge")
        for _ in range(100):
            await asyncio.sleep(0)
        return [float("judge_2" in started)] * len(completions)

    async def judge_2(completions, **kwargs):
        started.append("judge_2")
        return [0.5] * len(completions)

    async def in_a_notebook():  # Jupyter's thread runs an event loop while the cell calls grpo
        return score([Reward("judge", judge), Reward("judge_2", judge_2)], {"completions": ["a", "b"]})

    assert asyncio.run(in_a_notebook()).total == [1.5, 1.5]


def test_numpy_and_torch_scalars_are_numbers() -> None:
    import numpy as np
    import torch

    out = [np.bool_(True), np.float32(0.5), np.int64(2), torch.tensor(0.25), np.array(1.0)]
    assert score_completions(lambda completions, **kw: out, ["a"] * 5, {})[0] == [1.0, 0.5, 2.0, 0.25, 1.0]


def test_a_reward_reading_gold_on_problems_without_any_is_refused_at_start() -> None:
    """grpo's `math` reward, or a function naming `gold`, could never score data without gold answers."""
    def own_columns(completions, solution, **kwargs):
        return [0.0] * len(completions)

    def named_gold(completions, gold, **kwargs):
        return [0.0] * len(completions)

    check_golds(resolve_rewards([own_columns], None, "task.reward"), ["", ""], "the training problems")
    check_golds(resolve_rewards("math", None, "task.reward"), ["", "4"], "the training problems")
    for spec in ("math", named_gold):
        with pytest.raises(ConfigError, match=r"^reward (math|named_gold) compares answers with the gold answer \(its "
                                              r"`gold` keyword\), but none of the training problems has one: set "
                                              r"task.answer_column to the column holding the gold answer"):
            check_golds(resolve_rewards(spec, None, "task.reward"), ["", ""], "the training problems")
