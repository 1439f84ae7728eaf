"""Prompts against the model's context: a prompt and its answer budget (max_new_tokens) must fit in the
positions the model has. Checked at load, for every prompt a run or an evaluation will send: refused in
one line, or with `task.truncate_prompts=left`, cut from the left to fit and counted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.base import Problem, Task

# Where configs keep their context length: max_position_embeddings first, then other families' names.
CONTEXT_KEYS = ("n_positions", "max_seq_len", "max_sequence_length", "seq_length", "n_ctx")
# transformers' model_max_length when the tokenizer never set one is 1e30; a real one is far below this.
SANE_MODEL_MAX_LENGTH = 10_000_000
# An unlimited task (a generator) is checked on the problems a run of this many draws would see.
UNLIMITED_CHECKED = 4096


@dataclass(frozen=True)
class Context:
    positions: int
    source: str  # which config key or tokenizer field said so


def model_context(config: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase | None = None) -> Context | None:
    """The most tokens the model attends over, from its config (a config.json's dict) or tokenizer: None when
    neither says."""
    config = config.get("text_config") or config
    value = config.get("max_position_embeddings")
    if isinstance(value, int) and value > 0:
        return Context(value, "max_position_embeddings")
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < SANE_MODEL_MAX_LENGTH:
        return Context(limit, "the tokenizer's model_max_length")
    for key in CONTEXT_KEYS:
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return Context(value, key)
    return None


def prompt_lengths(tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem], cfg: TaskConfig) -> list[int]:
    """Each problem's prompt length in tokens, as grpo.tasks.prompts.encode_prompt makes it (tokenized in one
    batch: thousands of prompts in a second or two)."""
    from grpo.tasks.prompts import check_not_templated, is_raw, render_prompt, template_markers

    markers = template_markers(tokenizer, cfg)
    for problem in problems:
        check_not_templated(problem, markers)
    lengths = [0] * len(problems)
    for raw in (False, True):  # a raw text prompt gets the tokenizer's special tokens, as encode_prompt gives them
        which = [i for i, p in enumerate(problems) if is_raw(p, cfg) == raw]
        texts = [render_prompt(tokenizer, problems[i], cfg) for i in which]
        for i, ids in zip(which, tokenizer(texts, add_special_tokens=raw)["input_ids"] if texts else []):
            lengths[i] = len(ids)
    return lengths


@dataclass(frozen=True)
class Fit:
    """The prompts of one split against the context: how long a prompt may be, and how many were cut."""

    limit: int | None  # the most tokens a prompt keeps (cut from the left); None: every prompt fits as it is
    cut: int  # prompts longer than the limit
    total: int
    longest: int
    what: str  # "training prompts", "evaluation prompts", ...

    def message(self) -> str:
        return (f"task.truncate_prompts=left: {self.cut} of {self.total} {self.what} cut from the left to "
                f"{self.limit} tokens (the longest had {self.longest})")


def fit_prompts(lengths: Sequence[int], problems: Sequence[Problem], context: Context | None, budget: int,
                budget_key: str, cfg: TaskConfig, what: str) -> Fit:
    """Every prompt plus its answer budget (`budget`, set by `budget_key`) within the context, and within
    task.max_prompt_tokens: refused in one line (ConfigError) naming how many are too long, the longest and the
    fixes, unless task.truncate_prompts is left, when the too long ones are counted and their limit returned."""
    longest = max(lengths, default=0)
    room = None if context is None else context.positions - budget
    if room is not None and room < 1 and longest + budget > context.positions:
        raise ConfigError(f"{budget_key}={budget} leaves no room for a prompt in the model's context of "
                          f"{context.positions} tokens ({context.source}): lower {budget_key}")
    cap = cfg.max_prompt_tokens
    capped = cap is not None and (room is None or cap < room)  # the cap, not the context, is the limit
    limit = cap if capped else room
    if limit is None or longest <= limit:
        return Fit(None, 0, len(lengths), longest, what)
    too_long = [i for i, n in enumerate(lengths) if n > limit]
    if cfg.truncate_prompts == "left":
        return Fit(limit, len(too_long), len(lengths), longest, what)
    worst = max(too_long, key=lambda i: lengths[i])
    longest_one = f"the longest, problem {problems[worst].id}, has {lengths[worst]} tokens"
    if capped:
        raise ConfigError(
            f"{len(too_long)} of {len(lengths)} {what} are longer than task.max_prompt_tokens={cap}: {longest_one}; "
            "shorten or drop them, raise task.max_prompt_tokens, or set task.truncate_prompts=left to keep their "
            f"last {cap} tokens (what TRL's max_prompt_length did without a word)")
    raise ConfigError(
        f"{len(too_long)} of {len(lengths)} {what} do not fit the model's context of {context.positions} tokens "
        f"({context.source}) with {budget_key}={budget}: {longest_one}, and a prompt may have {room}; shorten or "
        f"drop them, lower {budget_key}, or set task.truncate_prompts=left to cut them from the left")


def problems_to_check(task: Task, seed: int, draws: int) -> list[Problem]:
    """The training problems a run draws: all of a finite task's; the first `draws` (at most
    UNLIMITED_CHECKED) of a generator's."""
    count = task.num_train if task.num_train is not None else min(draws, UNLIMITED_CHECKED)
    return [task.train_problem(i, seed) for i in range(count)]
