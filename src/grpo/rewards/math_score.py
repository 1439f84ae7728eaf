"""Math scoring: is a completion's final answer equal to a gold answer (numbers, LaTeX, words)."""

from __future__ import annotations

import math
import re
import threading
from typing import Any

from math_verify import parse as mv_parse
from math_verify import verify as mv_verify
from math_verify.errors import TimeoutException

from grpo.rewards.extraction import _normalise_latex, _strip_math_delimiters, extract_answer, parse_number

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
    if gold is not None and "####" in gold:  # GSM8K's worked solution ending in `#### N`: the gold is N
        gold = gold.rpartition("####")[2]
    if gold is None or gold.strip().lower() in _NONE_LIKE:
        return None
    gold_num = parse_number(gold)
    gold_norm = _normalise_str(gold)
    if _is_worked_solution(gold):
        return None  # which of its numbers is the answer cannot be known: unscorable, never 0
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


_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _is_worked_solution(gold: str) -> bool:
    """Prose with several different numbers in it ("9 plus 5 is 14."): a solution, not an answer."""
    return bool(_WORD.search(gold)) and len(set(_NUMBER.findall(gold))) >= 2


def gsm8k_gold(answer_field: str) -> str | None:
    """The text after the last ``####`` of a GSM8K answer field, or None if there is none."""
    if "####" not in answer_field:
        return None
    return answer_field.rsplit("####", 1)[1].strip()
