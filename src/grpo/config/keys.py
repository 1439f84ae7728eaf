"""How a config key is declared: its default, its meaning and the check of its value, in one place.

    problems_per_step: int = knob(8, "groups per step", check=at_least(1))

The meaning is what `grpo config show` prints beside the key and what the configuration reference
(`grpo.config.doc.reference_markdown`) lists; the check refuses a value that cannot train, in one line
that names the key. A null value of an optional key is never checked: null always means "the default
behaviour" and is described in the key's meaning. Rules across a section's keys are the section's
`check_section(at)` method; rules across sections are in `grpo.config.schema.validate`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HELP = "help"  # field metadata: the key's meaning
CHECK = "check"  # field metadata: a Check of its value


@dataclass(frozen=True)
class Check:
    """`ok(value)` is false for a value that cannot train; `says` is what the value must be, after the key's name."""

    ok: Callable[[Any], bool]
    says: str


# A rule across keys: (holds, the message naming the keys, the offending value).
Rule = tuple[bool, str, Any]


def knob(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = dataclasses.MISSING,
         check: Check | None = None) -> Any:
    """A dataclass field with its meaning and check as metadata; `factory` for a mutable default."""
    metadata: dict[str, Any] = {HELP: help}
    if check is not None:
        metadata[CHECK] = check
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


def rule(ok: Callable[[Any], bool], says: str) -> Check:
    return Check(ok, says)


def at_least(low: int, then: str = "", *, zero_means: str | None = None) -> Check:
    """`must be at least 1`, `must be 0 or more`, `must be 0 (off) or more`; `then` continues the sentence."""
    if low == 0:
        says = f"must be 0 ({zero_means}) or more" if zero_means else "must be 0 or more"
    else:
        says = f"must be at least {low}"
    return Check(lambda v: v >= low, says + then)


def above(low: float, then: str = "") -> Check:
    return Check(lambda v: v > low, f"must be above {low:g}{then}")


def within(interval: str) -> Check:
    """An interval as written in the message: `(0, 1]`, `[0, 1)`, ..."""
    lo, hi = (float(x) for x in interval[1:-1].split(","))
    lo_ok = (lambda v: v >= lo) if interval[0] == "[" else (lambda v: v > lo)
    hi_ok = (lambda v: v <= hi) if interval[-1] == "]" else (lambda v: v < hi)
    return Check(lambda v: lo_ok(v) and hi_ok(v), f"must be in {interval}")


def finite() -> Check:
    return Check(math.isfinite, "must be a finite number")


def key_help(f: dataclasses.Field) -> str:
    return f.metadata.get(HELP, "")


def problems(section: Any, at: str = "") -> list[Rule]:
    """Every key's check and every section's `check_section(at)` under `section`, `at` its dotted path ("" the top)."""
    out: list[Rule] = []
    prefix = f"{at}." if at else ""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            out += problems(value, prefix + f.name)
            continue
        check = f.metadata.get(CHECK)
        if check is not None and value is not None:
            out.append((check.ok(value), f"{prefix}{f.name} {check.says}", value))
    if hasattr(type(section), "check_section"):
        out += section.check_section(at)
    return out
