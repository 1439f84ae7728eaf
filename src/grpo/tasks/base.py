"""The task seam: a source of problems with gold answers, split into train and held-out."""

from __future__ import annotations

import abc
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Keywords a reward function always gets besides the data's own columns; a column may not take these names.
RESERVED_COLUMNS = ("prompts", "completions", "completion_ids", "trainer_state", "gold")
# grpo's keyword for the prompt as text, given only where the data has no column of that name: TRL passes every
# column as it is, and GSM8K-shaped data mapped for TRL keeps its `question` beside the chat `prompt`.
QUESTION = "question"


@dataclass(frozen=True)
class Problem:
    id: str
    question: str  # the prompt as text (for a chat prompt, its last user message)
    gold: str  # the gold answer; "" when there is none (the math reward cannot score it)
    messages: tuple[Mapping[str, Any], ...] | None = None  # a chat prompt, used as given; None: a text prompt
    # The data row for reward functions: TRL's keywords, so without the prompt's column.
    columns: Mapping[str, Any] = field(default_factory=dict, hash=False)


def reward_columns(problems: list[Problem]) -> dict[str, list[Any]]:
    """The keyword lists a reward function gets for `problems`: every column of their rows but the prompt's,
    plus `gold`, and `question` unless the data has its own (TRL's convention: one list per column, one value
    per completion)."""
    names = dict.fromkeys(name for p in problems for name in p.columns)
    columns = {name: [p.columns.get(name) for p in problems] for name in names}
    columns["gold"] = [p.gold for p in problems]
    columns.setdefault(QUESTION, [p.question for p in problems])
    return columns


def reward_inputs(problems: list[Problem], completions: list[str], completion_ids: list[list[int]]
                  ) -> dict[str, list[Any]]:
    """TRL's reward keywords for one completion per problem: `prompts` and `completions` as text, or for a chat
    prompt as message lists (the completion as one assistant message), `completion_ids`, and every column."""
    return {
        "prompts": [[dict(m) for m in p.messages] if p.messages is not None else p.question for p in problems],
        "completions": [[{"role": "assistant", "content": text}] if p.messages is not None else text
                        for p, text in zip(problems, completions)],
        "completion_ids": [list(ids) for ids in completion_ids],
        **reward_columns(problems),
    }


class Task(abc.ABC):
    """Train problems are addressed by a running index; index i of a finite task is epoch i // n,
    position i % n of that epoch's seeded shuffle, so resuming needs only the next index."""

    name: str

    @property
    @abc.abstractmethod
    def num_train(self) -> int | None:
        """Number of distinct training problems; None for an unlimited generator."""

    @abc.abstractmethod
    def train_problem(self, index: int, seed: int) -> Problem: ...

    @abc.abstractmethod
    def eval_problems(self, max_samples: int | None) -> list[Problem]: ...


class ListTask(Task):
    """A task over a fixed list of training problems, reshuffled each epoch."""

    def __init__(self, train: list[Problem], test: list[Problem]) -> None:
        self._train = train
        self._test = test
        self._order_cache: dict[tuple[int, int], list[int]] = {}

    @property
    def num_train(self) -> int | None:
        return len(self._train)

    def train_problem(self, index: int, seed: int) -> Problem:
        epoch, offset = divmod(index, len(self._train))
        key = (seed, epoch)
        if key not in self._order_cache:
            order = list(range(len(self._train)))
            random.Random(seed * 1_000_003 + epoch).shuffle(order)
            self._order_cache = {key: order}
        return self._train[self._order_cache[key][offset]]

    def eval_problems(self, max_samples: int | None) -> list[Problem]:
        return self._test[:max_samples] if max_samples else list(self._test)
