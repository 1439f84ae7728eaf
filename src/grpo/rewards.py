"""Reward functions: answer extraction and math scoring, plus a registry of reward callables.

A reward is ``None`` when a sample cannot be scored (unusable gold answer, or the reward
function failed on it); such samples are left out of training, never scored 0.
"""

from __future__ import annotations

import importlib
import logging
import math
import numbers
import re
import threading
from collections.abc import Callable
from typing import Any, overload

from math_verify import parse as mv_parse
from math_verify import verify as mv_verify
from math_verify.errors import TimeoutException

__all__ = [
    "RewardFn",
    "extract_answer",
    "get_reward",
    "gsm8k_gold",
    "math_batch_reward",
    "math_reward",
    "parse_number",
    "register_reward",
    "registered_rewards",
    "score_completions",
]

logger = logging.getLogger(__name__)

RewardFn = Callable[..., list[float | None]]

# ---------------------------------------------------------------------------
# Answer extraction
# ---------------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_IS = re.compile(
    r"(?:the\s+(?:final\s+)?answer\s+is|final\s+answer\s*(?:is|:))\s*:?[ \t]*",
    re.IGNORECASE,
)
_HASHES = re.compile(r"^[ \t]*####[ \t]*(.*?)[ \t]*$", re.MULTILINE)
# The sign is only taken when it is not a hyphen inside a range like "3-4".
_LAST_NUMBER = re.compile(
    r"(?:(?<![\w)])[-−])?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|\.\d+)"
)
_SENTENCE_END = re.compile(r"\.(?:\s|$)")


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at ``text[start] == "{"``, and the index after it."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped char (\{, \}) never opens or closes a group
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
        i += 1
    return None


def _boxed_contents(text: str) -> list[str]:
    found: list[str] = []
    for match in _BOXED.finditer(text):
        i = match.end()
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] == "{":
            group = _braced(text, i)
            # An unclosed group is a truncated completion: skip it rather than guess.
            if group is not None and group[0].strip():
                found.append(group[0].strip())
        else:
            token = re.match(r"[^\s$}]+", text[i:])
            if token is not None:
                found.append(token.group(0).rstrip("."))
    return found


def _clean_phrase_answer(raw: str) -> str:
    raw = raw.strip().strip("*").strip()
    end = _SENTENCE_END.search(raw)
    if end is not None:
        raw = raw[: end.start()]
    return raw.strip().strip("*").strip().rstrip(".").strip()


def extract_answer(text: str) -> str | None:
    """The final answer in a completion: last ``\\boxed{}``, then "the answer is X" /
    "final answer: X", then a ``#### X`` line, then the last number. None if nothing."""
    boxed = _boxed_contents(text)
    if boxed:
        return boxed[-1]

    phrases = list(_ANSWER_IS.finditer(text))
    for match in reversed(phrases):
        rest = text[match.end() :]
        line, _, after = rest.partition("\n")
        if not line.strip().strip("*").strip():
            # "Final answer:\n\n42": the answer is on the next non-empty line.
            line = next((ln for ln in after.split("\n") if ln.strip()), "")
        answer = _clean_phrase_answer(line)
        if answer:
            return answer

    hashes = [m.group(1) for m in _HASHES.finditer(text)]
    for raw in reversed(hashes):
        answer = raw.strip().rstrip(".").strip()
        if answer:
            return answer

    numbers_found = _LAST_NUMBER.findall(text)
    if numbers_found:
        return numbers_found[-1]
    return None


# ---------------------------------------------------------------------------
# Number normalisation
# ---------------------------------------------------------------------------

_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+"
_LEADING_NUMBER = re.compile(
    rf"""^(?P<sign>[-+]?)\s*(?:
        \\frac\s*\{{\s*(?P<fn>[-+]?(?:{_NUM}))\s*\}}\s*\{{\s*(?P<fd>[-+]?(?:{_NUM}))\s*\}}
      | \\frac\s*(?P<fn1>\d)(?P<fd1>\d)
      | (?P<n>{_NUM})(?:\s*/\s*(?P<d>[-+]?(?:{_NUM})))?
    )(?P<rest>.*)$""",
    re.VERBOSE | re.DOTALL,
)
# What may follow a number: nothing, a full stop, or words after a space ("12 apples",
# "3.50 per hour"). Anything else ("2\sqrt{3}", "3 + 4", "1,2", "2x") is not a plain number.
_ALLOWED_REST = re.compile(r"\.?|\s+[A-Za-z].*", re.DOTALL)
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_VARIABLE_ASSIGN = re.compile(r"^[A-Za-z]\w*\s*=\s*")


def _strip_math_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


def _normalise_latex(text: str) -> str:
    text = _strip_math_delimiters(text)
    text = text.replace("−", "-").replace("\\displaystyle", "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("{,}", "").replace("\\!", "")
    # "1\,000" is a thousands separator; any other thin space is just a space.
    text = re.sub(r"(?<=\d)\\,(?=\d{3}(?!\d))", "", text)
    text = re.sub(r"\\[,;: ]|~", " ", text)
    text = _TEXT_WRAPPER.sub(r" \1 ", text)
    text = re.sub(r"\^\s*\{?\s*\\circ\s*\}?|°", "", text)
    text = text.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    return text.strip()


def _to_float(literal: str) -> float:
    return float(literal.replace(",", ""))


def parse_number(text: str) -> float | None:
    """The number an answer string denotes ("$1,234.00", "-\\frac{3}{4}", "12 apples"), or None."""
    text = _normalise_latex(text)
    text = _VARIABLE_ASSIGN.sub("", text)
    match = _LEADING_NUMBER.match(text)
    if match is None or not _ALLOWED_REST.fullmatch(match.group("rest")):
        return None
    if match.group("fn") is not None:
        numerator, denominator = _to_float(match.group("fn")), _to_float(match.group("fd"))
    elif match.group("fn1") is not None:
        numerator, denominator = float(match.group("fn1")), float(match.group("fd1"))
    else:
        numerator = _to_float(match.group("n"))
        denominator = _to_float(match.group("d")) if match.group("d") is not None else 1.0
    if denominator == 0:
        return None
    value = numerator / denominator
    if match.group("sign") == "-":
        value = -value
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------
# Math scoring
# ---------------------------------------------------------------------------

_NONE_LIKE = frozenset({"", "none", "null", "nan", "n/a", "na"})
_PROSE = re.compile(r"[a-z]+(?:[\s'\-]+[a-z]+)*")


def _normalise_str(text: str) -> str:
    text = _normalise_latex(text)
    text = re.sub(r"\s+", " ", text).strip().rstrip(".").strip()
    return text.lower()


def _mv_timeout() -> int | None:
    # math_verify enforces its timeout with signal.alarm, which raises off the main thread;
    # there it has to run without one.
    return 5 if threading.current_thread() is threading.main_thread() else None


def _mv_parse(text: str) -> list[Any]:
    """math_verify's parse of a bare LaTeX answer (wrapped in $...$ so it is found)."""
    try:
        return mv_parse(f"${_strip_math_delimiters(text)}$", parsing_timeout=_mv_timeout())
    except TimeoutException:
        # With raise_on_error=False math_verify turns its own parse failures into [];
        # only its timeout (a BaseException) can escape when the alarm lands outside its
        # handler. Our own code is not inside this try, so nothing of ours is hidden.
        return []


def _mv_verify(gold: list[Any], pred: list[Any]) -> bool:
    try:
        return bool(mv_verify(gold, pred, timeout_seconds=_mv_timeout()))
    except TimeoutException:
        # Same reason as in _mv_parse: a timed-out comparison is "not shown equal".
        return False


def math_reward(completion: str, gold: str | None) -> float | None:
    """1.0 if the completion's final answer equals ``gold``, 0.0 if not, None if ``gold``
    is unusable (empty, "None", nothing numeric, LaTeX or textual in it)."""
    if gold is None or gold.strip().lower() in _NONE_LIKE:
        return None
    gold_num = parse_number(gold)
    gold_norm = _normalise_str(gold)
    # Plain words skip math_verify: it reads "Monday" as the product M*o*n*d*a*y, so any
    # anagram would verify. They are compared as strings instead.
    gold_is_prose = gold_num is None and _PROSE.fullmatch(gold_norm) is not None
    gold_mv: list[Any] = []
    if gold_num is None and not gold_is_prose:
        gold_mv = _mv_parse(gold)
        # On failure math_verify falls back to the raw string alone ("???" -> ["???"]); only
        # a parsed expression makes the gold comparable.
        parsed = any(not isinstance(item, str) for item in gold_mv)
        if not parsed and not any(ch.isalnum() for ch in gold_norm):
            return None

    pred = extract_answer(completion)
    if pred is None:
        return 0.0
    if gold_num is not None:
        pred_num = parse_number(pred)
        if pred_num is not None:
            return float(math.isclose(pred_num, gold_num, rel_tol=1e-9, abs_tol=1e-6))
        # A non-numeric answer ("2\sqrt{3}") may still equal a numeric gold.
        gold_mv = _mv_parse(gold)
    if gold_mv:
        pred_mv = _mv_parse(pred)
        if pred_mv and _mv_verify(gold_mv, pred_mv):
            return 1.0
    if gold_num is None:
        return float(_normalise_str(pred) == gold_norm)
    return 0.0


def gsm8k_gold(answer_field: str) -> str | None:
    """The text after the last ``####`` of a GSM8K answer field, or None if there is none."""
    if "####" not in answer_field:
        return None
    return answer_field.rsplit("####", 1)[1].strip()


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------

_REGISTRY: dict[str, RewardFn] = {}


@overload
def register_reward(name: str, fn: None = None) -> Callable[[RewardFn], RewardFn]: ...
@overload
def register_reward(name: str, fn: RewardFn) -> RewardFn: ...
def register_reward(
    name: str, fn: RewardFn | None = None
) -> RewardFn | Callable[[RewardFn], RewardFn]:
    """Register a reward under ``name``; use as ``@register_reward("x")`` or
    ``register_reward("x", fn)``. A name can be registered once."""

    def add(reward_fn: RewardFn) -> RewardFn:
        if not callable(reward_fn):
            raise TypeError(f"reward {name!r} must be callable, got {type(reward_fn).__name__}")
        if name in _REGISTRY:
            raise ValueError(f"a reward named {name!r} is already registered")
        _REGISTRY[name] = reward_fn
        return reward_fn

    if fn is None:
        if name in _REGISTRY:
            raise ValueError(f"a reward named {name!r} is already registered")
        return add
    return add(fn)


def registered_rewards() -> list[str]:
    return sorted(_REGISTRY)


def get_reward(name: str) -> RewardFn:
    """A registered reward, or one imported from ``"package.module:function"``."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" not in name:
        raise KeyError(
            f"unknown reward {name!r}; registered rewards: {', '.join(registered_rewards())}"
            " (or give an import path 'package.module:function')"
        )
    module_name, _, attr_path = name.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        if not hasattr(obj, attr):
            raise AttributeError(f"reward {name!r}: {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"reward {name!r} is not callable (got {type(obj).__name__})")
    return obj


def math_batch_reward(
    completions: list[str], gold: list[str | None], **unused_columns: Any
) -> list[float | None]:
    """Built-in ``"math"`` reward: :func:`math_reward` per sample."""
    if len(gold) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(gold)} gold answers")
    return [math_reward(c, g) for c, g in zip(completions, gold)]


register_reward("math", math_batch_reward)

FORMAT_BONUS = 0.1


@register_reward("math_format")
def math_format_reward(completions: list[str], gold: list[str | None], **unused_columns: Any) -> list[float | None]:
    """``"math"`` plus a small format bonus: a wrong answer that still states a final answer the
    extractor can read (\\boxed{}, "the answer is", ####) scores FORMAT_BONUS instead of 0. A weak
    model whose answers are almost all wrong then still gets a signal (finish, and say the answer
    plainly) from its first steps. Evaluate with plain ``"math"`` (eval.reward=math)."""
    rewards = math_batch_reward(completions, gold)
    return [r if r is None or r >= 1.0 or extract_answer(c) is None else FORMAT_BONUS
            for r, c in zip(rewards, completions)]


@register_reward("digits")
def digit_fraction_reward(completions: list[str], **unused_columns: Any) -> list[float | None]:
    """A deliberately easy toy reward, the fraction of characters that are digits: a randomly
    initialised tiny model gets a graded signal from its first step, so smoke tests see learning."""
    return [sum(c.isdigit() for c in text) / len(text) if text else 0.0 for text in completions]


# ---------------------------------------------------------------------------
# Scoring a batch with any reward function
# ---------------------------------------------------------------------------


def _fn_name(fn: RewardFn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _validated(fn: RewardFn, out: Any, expected_len: int) -> list[float | None]:
    """The rewards as floats/None; a malformed return value is the reward author's bug."""
    if not isinstance(out, list):
        raise TypeError(
            f"reward function {_fn_name(fn)} must return a list, got {type(out).__name__}"
        )
    if len(out) != expected_len:
        raise TypeError(
            f"reward function {_fn_name(fn)} returned {len(out)} rewards for "
            f"{expected_len} completions"
        )
    rewards: list[float | None] = []
    for i, value in enumerate(out):
        if value is None:
            rewards.append(None)
        elif isinstance(value, numbers.Real):
            rewards.append(float(value))
        else:
            raise TypeError(
                f"reward function {_fn_name(fn)} returned {type(value).__name__} at index {i};"
                " rewards must be float, int, bool or None"
            )
    return rewards


def score_completions(
    fn: RewardFn, completions: list[str], columns: dict[str, list[Any]]
) -> tuple[list[float | None], list[str | None]]:
    """Rewards and per-sample error strings for a batch. If the batch call raises, each
    sample is scored alone, so one bad sample costs only its own reward (None)."""
    n = len(completions)
    for key, values in columns.items():
        if len(values) != n:
            raise ValueError(f"column {key!r} has {len(values)} rows for {n} completions")

    errors: list[str | None] = [None] * n
    try:
        out = fn(completions, **columns)
    except Exception as exc:  # user code: any failure falls back to per-sample scoring
        rewards, errors = _score_one_by_one(fn, completions, columns, exc)
    else:
        rewards = _validated(fn, out, n)

    for i, reward in enumerate(rewards):
        if reward is not None and not math.isfinite(reward):
            rewards[i] = None
            errors[i] = "non-finite reward"
    return rewards, errors


def _score_one_by_one(
    fn: RewardFn, completions: list[str], columns: dict[str, list[Any]], batch_exc: Exception
) -> tuple[list[float | None], list[str | None]]:
    logger.warning(
        "reward function %s failed on the batch (%s: %s); scoring samples one by one",
        _fn_name(fn),
        type(batch_exc).__name__,
        batch_exc,
    )
    rewards: list[float | None] = []
    errors: list[str | None] = []
    for i, completion in enumerate(completions):
        row = {key: [values[i]] for key, values in columns.items()}
        try:
            out = fn([completion], **row)
        except Exception as exc:  # user code: this sample's failure is recorded, not raised
            rewards.append(None)
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        rewards.append(_validated(fn, out, 1)[0])
        errors.append(None)
    return rewards, errors
