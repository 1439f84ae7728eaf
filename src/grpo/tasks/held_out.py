"""The held-out split kept apart from training: drawn out of the training data where the data has none of its own
(`task.held_out`), and checked where it has one, since an evaluation over problems that were trained on measures
recall, not what the model learned to do."""

from __future__ import annotations

import json
import random

from grpo.errors import ConfigError
from grpo.tasks.base import Problem

# The draw's seed is fixed, not train.seed: every run over the same data evaluates on the same problems, so runs of
# different seeds compare.
DRAW_SEED = 0


def hold_out(problems: list[Problem], count: int, source: str) -> tuple[list[Problem], list[Problem]]:
    """-> (training, held-out): `count` problems drawn from `problems` (a seeded draw, each kept in its order),
    the rest to train on."""
    if count >= len(problems):
        raise ConfigError(f"task.held_out={count} leaves no training problem: {source} has {len(problems)}; "
                          f"hold out fewer (e.g. task.held_out={max(1, len(problems) // 10)})")
    drawn = set(random.Random(DRAW_SEED).sample(range(len(problems)), count))
    return ([p for i, p in enumerate(problems) if i not in drawn], [p for i, p in enumerate(problems) if i in drawn])


def prompt_key(problem: Problem) -> str:
    """What the model is shown: the messages as given, else the text (ids differ between splits)."""
    if problem.messages is not None:
        return json.dumps([dict(m) for m in problem.messages], sort_keys=True, default=str)
    return problem.question.strip()


def trained_on(train: list[Problem], test: list[Problem]) -> list[Problem]:
    """The held-out problems whose prompt is also a training problem's."""
    seen = {prompt_key(p) for p in train}
    return [p for p in test if prompt_key(p) in seen]
