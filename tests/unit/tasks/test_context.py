"""Prompts against their limits: the model's context beside the answer budget, and task.max_prompt_tokens."""

import pytest

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.policy.models import build_char_tokenizer
from grpo.tasks import Problem
from grpo.tasks.context import Context, fit_prompts
from grpo.tasks.prompts import encode_prompt

PROBLEMS = [Problem(f"p-{i}", "x" * n, "") for i, n in enumerate((5, 40, 12))]
LENGTHS = [5, 40, 12]
CONTEXT = Context(100, "max_position_embeddings")


def fit(context=CONTEXT, budget=10, **task):
    return fit_prompts(LENGTHS, PROBLEMS, context, budget, "rollout.max_new_tokens", TaskConfig(**task), "prompts")


def test_a_prompt_longer_than_max_prompt_tokens_is_refused_naming_the_cap_and_the_cut():
    """TRL's max_prompt_length (TRL 0.14 to 0.2x) cut a longer prompt to its last tokens without a word."""
    with pytest.raises(ConfigError, match=r"^1 of 3 prompts are longer than task.max_prompt_tokens=20: the longest, "
                                          r"problem p-1, has 40 tokens; .* set task.truncate_prompts=left to keep "
                                          r"their last 20 tokens \(what TRL's max_prompt_length did without a word\)$"):
        fit(max_prompt_tokens=20)
    for context in (CONTEXT, None):  # with or without a context the model states
        cut = fit(context, max_prompt_tokens=20, truncate_prompts="left")
        assert (cut.limit, cut.cut, cut.longest) == (20, 1, 40)
    assert fit(max_prompt_tokens=40).limit is None  # every prompt within the cap: none cut


def test_the_tighter_of_the_cap_and_the_context_is_the_limit():
    assert fit(budget=70, max_prompt_tokens=35, truncate_prompts="left").limit == 30  # 100 - 70 < 35
    with pytest.raises(ConfigError, match=r"do not fit the model's context of 100 tokens"):
        fit(budget=70, max_prompt_tokens=35)


def test_a_cut_prompt_keeps_its_last_tokens():
    tokenizer = build_char_tokenizer()
    problem = Problem("t-0", "abcdefghij", "")
    whole = encode_prompt(tokenizer, problem, TaskConfig(text_prompts="raw"))
    assert encode_prompt(tokenizer, problem, TaskConfig(text_prompts="raw"), max_tokens=4) == whole[-4:]
