"""A key's check beside it: the helpers' bounds, and the walk that names each key by its dotted path."""

from dataclasses import dataclass, field

import pytest

from grpo.config.keys import Rule, above, at_least, finite, knob, problems, within


@pytest.mark.parametrize("interval, inside, outside", [
    ("(0, 1]", [1e-9, 1.0], [0.0, 1.5]),
    ("[0, 1)", [0.0, 0.999], [1.0, -0.1]),
    ("[0, 1]", [0.0, 1.0], [-1e-9, 1.0001]),
])
def test_within_reads_the_interval_as_written(interval, inside, outside):
    check = within(interval)
    assert all(check.ok(v) for v in inside) and not any(check.ok(v) for v in outside)
    assert check.says == f"must be in {interval}"


def test_the_messages_say_what_the_value_must_be():
    assert at_least(1).says == "must be at least 1"
    assert at_least(0).says == "must be 0 or more"
    assert at_least(0, zero_means="off").says == "must be 0 (off) or more"
    assert at_least(2, ": a reason").says == "must be at least 2: a reason"
    assert above(0).says == "must be above 0" and not above(0).ok(0.0)
    assert not finite().ok(float("nan"))


@dataclass
class Inner:
    size: int = knob(1, "a size", check=at_least(1))
    limit: float | None = knob(None, "null: none", check=above(0))

    def check_section(self, at: str) -> list[Rule]:
        return [(self.size != 7, f"{at}.size must not be 7", self.size)]


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    other: Inner = field(default_factory=lambda: Inner(size=0))


def test_problems_names_each_key_by_its_path_and_skips_null():
    failing = [(message, value) for ok, message, value in problems(Outer(inner=Inner(size=7))) if not ok]
    assert failing == [("inner.size must not be 7", 7), ("other.size must be at least 1", 0)]
