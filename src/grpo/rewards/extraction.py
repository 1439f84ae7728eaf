"""Reading the final answer out of a completion, and the number an answer string denotes."""

from __future__ import annotations

import math
import re

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


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{}`` in `text` (braces balanced), or None if it has none."""
    boxed = _boxed_contents(text)
    return boxed[-1] if boxed else None


def _clean_phrase_answer(raw: str) -> str:
    raw = raw.strip().strip("*").strip()
    end = _SENTENCE_END.search(raw)
    if end is not None:
        raw = raw[: end.start()]
    return raw.strip().strip("*").strip().rstrip(".").strip()


def extract_answer(text: str, *, last_number: bool = True) -> str | None:
    """The final answer in a completion: last ``\\boxed{}``, then "the answer is X" /
    "final answer: X", then a ``#### X`` line, then (unless not `last_number`) the last number. None if
    nothing."""
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

    numbers_found = _LAST_NUMBER.findall(text) if last_number else []
    if numbers_found:
        return numbers_found[-1]
    return None


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
