"""Scoring a batch of completions with reward functions, and checking what each one returned.

Reward functions take TRL's contract as is: they are called by keyword with ``prompts``,
``completions``, ``completion_ids``, ``trainer_state``, TRL's ``log_metric`` and ``log_extra`` and every column
of the data but the prompt's (one list per column, one value per completion), and return one float, or None, per
completion. Several
functions are summed with their weights; a function's None or NaN means "does not apply to this sample"
(TRL's ``nansum``), and a sample that no function scores is unscorable. An infinite reward is an error.
An ``async def`` function is awaited (grpo.rewards.async_loop), as TRL does; rewards may be any real
number, NumPy and torch scalars included. A function that raises is an error for the samples it raised
on: they are unscorable, never scored 0.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo.errors import ConfigError
from grpo.rewards.async_loop import wait_all

logger = logging.getLogger(__name__)

RewardFn = Callable[..., list[float | None]]


class RewardError(ConfigError):
    """A reward function broke its contract (wrong length, wrong type): the function must be fixed."""


@dataclass(frozen=True)
class Reward:
    """One reward function of a run, with the name its metric is logged under and its weight."""

    name: str
    fn: RewardFn
    weight: float = 1.0


@dataclass(frozen=True)
class TrainerState:
    """What TRL's ``trainer_state`` keyword carries that reward functions use (curricula), with TRL's values:
    ``global_step`` is the optimizer steps completed (N - 1 while step N's samples are scored), ``max_steps``
    the run's total steps."""

    global_step: int
    max_steps: int

    @classmethod
    def finished(cls, steps: int | None) -> TrainerState:
        """As at the end of a run of `steps` (1 when unknown): an evaluation outside training scores with
        the reward the run ends on."""
        return cls(steps or 1, steps or 1)


@dataclass
class ExtraColumns:
    """TRL's ``log_extra`` keyword: ``log_extra(column, values)`` adds a column to the completions table, one
    value per completion of the call. A call on one sample alone (a batch that raised, scored one by one) writes
    at that sample's place (``offset``)."""

    size: int
    columns: dict[str, list[Any]] = field(default_factory=dict)
    offset: int = 0

    def __call__(self, column: str, values: Sequence[Any]) -> None:
        row = self.columns.setdefault(str(column), [None] * self.size)
        for i, value in enumerate(list(values)[: self.size - self.offset]):
            row[self.offset + i] = value

    def at(self, offset: int) -> ExtraColumns:
        return ExtraColumns(self.size, self.columns, offset)

    def of(self, i: int) -> dict[str, Any]:
        """Completion i's values, by column."""
        return {column: values[i] for column, values in self.columns.items()}


@dataclass
class Scores:
    """A batch's rewards: the weighted total, each function's own, and per-sample errors."""

    total: list[float | None]  # None: unscorable (no function scored it, or one raised on it)
    parts: dict[str, list[float | None]] = field(default_factory=dict)  # reward name -> its rewards
    errors: list[str | None] = field(default_factory=list)


def _fn_name(fn: RewardFn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _validated(fn: RewardFn, out: Any, expected_len: int) -> list[float | None]:
    """The rewards as floats/None; a malformed return value is the reward author's bug."""
    if hasattr(out, "tolist") and not isinstance(out, (str, bytes)):  # numpy arrays, torch tensors
        out = out.tolist()
    if not isinstance(out, (list, tuple)):
        raise RewardError(f"reward function {_fn_name(fn)} returned {type(out).__name__} {_short(out)}: it must "
                          f"return a list with one float (or None) per completion")
    if len(out) != expected_len:
        raise RewardError(f"reward function {_fn_name(fn)} returned {len(out)} rewards for {expected_len} "
                          "completions: it must return one float (or None) per completion")
    rewards: list[float | None] = []
    for i, value in enumerate(out):
        number = _number(value)
        if value is not None and number is None:
            raise RewardError(f"reward function {_fn_name(fn)} returned {type(value).__name__} {_short(value)} at "
                              f"index {i}: rewards must be float, int, bool or None")
        rewards.append(number)
    return rewards


def _number(value: Any) -> float | None:
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # np.bool_ and other NumPy/torch scalars
        item = value.item()
        if isinstance(item, numbers.Real):
            return float(item)
    return None


def _call_all(fns: Sequence[RewardFn], inputs: dict[str, Any]) -> list[tuple[Any, Exception | None]]:
    """Each function's return value on `inputs`, or what it raised. Async functions' coroutines run together
    once every function has been called, as TRL gathers them."""
    outcomes: list[tuple[Any, Exception | None]] = []
    for fn in fns:
        try:
            outcomes.append((fn(**inputs), None))
        except Exception as exc:  # user code: each caller decides what a failure means
            outcomes.append((None, exc))
    waiting = [i for i, (out, _) in enumerate(outcomes) if inspect.isawaitable(out)]
    for i, result in zip(waiting, wait_all([outcomes[i][0] for i in waiting]) if waiting else []):
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
        outcomes[i] = (None, result) if isinstance(result, Exception) else (result, None)
    return outcomes


def _row(inputs: dict[str, Any], i: int) -> dict[str, Any]:
    """Sample i's inputs: one-element lists, the extra columns written at its place, and the values shared by the
    batch (trainer_state) as they are."""
    return {key: [value[i]] if isinstance(value, list) else value.at(i) if isinstance(value, ExtraColumns) else value
            for key, value in inputs.items()}


def _check_lengths(inputs: dict[str, Any]) -> None:
    n = len(inputs["completions"])
    for key, values in inputs.items():
        if isinstance(values, list) and len(values) != n:
            raise ValueError(f"column {key!r} has {len(values)} rows for {n} completions")


def _discard(name: str, value: Any) -> None:
    """TRL's `log_metric` and `log_extra` keywords where no step's metrics or samples are being written (the
    start's check, an evaluation)."""


def _with_loggers(inputs: dict[str, Any]) -> dict[str, Any]:
    """`inputs` of TRL's whole call (those with `trainer_state`) with TRL's `log_metric` and `log_extra` keywords
    too: the caller's (a training step's, whose values join its metrics and samples), else ones that discard them."""
    if "trainer_state" not in inputs:
        return inputs
    return {**inputs, **{name: _discard for name in ("log_metric", "log_extra") if name not in inputs}}


def call_reward(fn: RewardFn, inputs: dict[str, Any]) -> tuple[list[float | None], list[str | None]]:
    """One function's rewards and per-sample error strings for a batch (``inputs["completions"]``). If the
    batch call raises, each sample is scored alone, so one bad sample costs only its own reward (None)."""
    _check_lengths(inputs)
    inputs = _with_loggers(inputs)
    return _rewards(fn, inputs, *_call_all([fn], inputs)[0])


def _rewards(fn: RewardFn, inputs: dict[str, Any], out: Any, exc: Exception | None
             ) -> tuple[list[float | None], list[str | None]]:
    """`fn`'s rewards and per-sample errors from its batch call's outcome (`out`, or `exc` raised)."""
    n = len(inputs["completions"])
    errors: list[str | None] = [None] * n
    if exc is not None:  # any failure falls back to per-sample scoring
        rewards, errors = _score_one_by_one(fn, inputs, exc)
    else:
        rewards = _validated(fn, out, n)
    for i, reward in enumerate(rewards):
        if reward is not None and math.isnan(reward):
            rewards[i] = None  # TRL's missing value, as None: the other functions' weighted sum stands
        elif reward is not None and math.isinf(reward):
            rewards[i] = None
            errors[i] = "infinite reward"
    return rewards, errors


def _score_one_by_one(fn: RewardFn, inputs: dict[str, Any], batch_exc: Exception
                      ) -> tuple[list[float | None], list[str | None]]:
    logger.warning("reward function %s failed on the batch (%s: %s); scoring samples one by one", _fn_name(fn),
                   type(batch_exc).__name__, batch_exc)
    rewards: list[float | None] = []
    errors: list[str | None] = []
    for i in range(len(inputs["completions"])):
        out, exc = _call_all([fn], _row(inputs, i))[0]
        if exc is not None:  # this sample's failure is recorded, not raised
            rewards.append(None)
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        rewards.append(_validated(fn, out, 1)[0])
        errors.append(None)
    return rewards, errors


def score_completions(fn: RewardFn, completions: list[str], columns: dict[str, list[Any]]
                      ) -> tuple[list[float | None], list[str | None]]:
    """One function's rewards for `completions`, given the data's `columns`."""
    return call_reward(fn, {"completions": completions, **columns})


def score(rewards: Sequence[Reward], inputs: dict[str, Any]) -> Scores:
    """Every reward function on the batch, and their weighted sum per sample."""
    n = len(inputs["completions"])
    _check_lengths(inputs)
    inputs = _with_loggers(inputs)
    scores = Scores(total=[None] * n, errors=[None] * n)
    for reward, outcome in zip(rewards, _call_all([r.fn for r in rewards], inputs)):
        values, errors = _rewards(reward.fn, inputs, *outcome)
        scores.parts[reward.name] = values
        for i, (value, error) in enumerate(zip(values, errors)):
            if error is not None and scores.errors[i] is None:
                scores.errors[i] = f"{reward.name}: {error}" if len(rewards) > 1 else error
            if value is not None:
                scores.total[i] = (scores.total[i] or 0.0) + reward.weight * value
    for i, error in enumerate(scores.errors):
        if error is not None:  # a function failed on it: the rest alone would be a different reward
            scores.total[i] = None
    return scores


def _completion_shape(completions: list[Any]) -> str:
    """How the completions were given, as TRL gives them: the usual cause of a function failing on them."""
    if completions and isinstance(completions[0], list):
        return ('completions are [{"role": "assistant", "content": ...}] lists, as the prompts are chat messages; '
                "give the prompt column as text for strings")
    return ('completions are strings, as the prompts are text; give the prompt column as [{"role", "content"}] '
            'messages for [{"role": "assistant", "content": ...}] lists')


def check_rewards(rewards: Sequence[Reward], inputs: dict[str, Any], what: str) -> None:
    """Call each function once on `inputs` (`what` says which rows, for the message): a function that
    raises or returns the wrong shape or type is a one-line error now, not a crash mid-run."""
    n = len(inputs["completions"])
    inputs = _with_loggers(inputs)
    for reward, (out, exc) in zip(rewards, _call_all([r.fn for r in rewards], inputs)):
        if exc is not None:  # user code: reported in one line, with how it was called
            raise ConfigError(
                f"reward function {_fn_name(reward.fn)} failed on {what}: {type(exc).__name__}: {exc} (it is called "
                f"by keyword with {', '.join(inputs)}; take **kwargs for those it does not use; "
                f"{_completion_shape(inputs['completions'])})") from exc
        try:
            _validated(reward.fn, out, n)
        except RewardError as exc:
            raise RewardError(f"{exc} (called on {what})") from None


def _takes_keyword(fn: RewardFn, name: str) -> bool:
    """Whether `fn` names keyword `name` itself (not only through **kwargs)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return False
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return name in parameters and parameters[name].kind in kinds


def check_golds(rewards: Sequence[Reward], golds: Sequence[str], what: str) -> None:
    """A reward that reads `gold` (the `math` reward, or a function naming the keyword) on problems none of which
    has a gold answer could never score: refused now, in one line, not found unscorable steps into a run."""
    if any(golds):
        return
    for reward in rewards:
        if _takes_keyword(reward.fn, "gold"):
            raise ConfigError(f"reward {reward.name} compares answers with the gold answer (its `gold` keyword), but "
                              f"none of {what} has one: set task.answer_column to the column holding the gold "
                              "answer (and task.gold_pattern if it must be read out of a longer text)")
