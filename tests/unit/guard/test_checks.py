"""One judgement: every check has one name, one threshold and one patience, in the guard's config and
trip events, the doctor's timeline and JSON, the report's marks and the TRL callback's grpo-guard.json."""

from __future__ import annotations

import dataclasses
import json

from grpo.checks import BREAKERS, CHECKS
from grpo.config import BreakerConfig, GuardConfig
from grpo.guard.breakers import Guard
from grpo.rundir.events import EventLog
from grpo.tools.doctor import examine
from grpo.tools.doctor.timeline import EVENTS
from grpo.tools.report import MARKED
from tests.unit.guard.test_breakers import CASES, guard_for


def test_the_guards_breakers_and_their_defaults_are_the_registrys():
    cfg = GuardConfig()
    breakers = {f.name for f in dataclasses.fields(GuardConfig) if isinstance(getattr(cfg, f.name), BreakerConfig)}
    assert breakers == set(BREAKERS) and breakers <= set(CHECKS)
    for name in breakers:
        check, breaker = CHECKS[name], getattr(cfg, name)
        assert (breaker.threshold, breaker.action, breaker.patience) == (check.threshold, check.action, check.patience)
        assert "guard" in check.judged_by and check.meaning and check.advice


def test_a_trip_keeps_its_name_from_the_guards_event_to_the_doctors_json_and_the_report(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    for step, name in enumerate(sorted(BREAKERS), 1):
        phase, bad, _ = CASES[name]
        guard = guard_for(name, dataclasses.replace(GuardConfig(), **{name: dataclasses.replace(
            getattr(GuardConfig(), name), patience=1)}))
        trips = [t for t in guard.check(phase, step, bad) if t.breaker == name]
        assert trips, name
        events.record("trip", step, trips[0].message, breaker=trips[0].breaker, action=trips[0].action)
    diagnosis, _ = examine(tmp_path)
    named = {a["kind"] for a in diagnosis.to_json()["timeline"]}
    assert set(BREAKERS) <= named  # each under its own name, no renaming on the way
    assert set(CHECKS) | set(EVENTS) <= set(MARKED)  # the report marks every one


def test_the_callbacks_report_names_the_checks_as_the_doctor_does(tmp_path):
    from tests.unit.integrations.test_trl import run

    steps, guard = run(tmp_path, [(0.4, True)] * 6 + [(0.0, False)] * 20, saves=(3,))
    report = json.loads((tmp_path / "out" / "grpo-guard.json").read_text())
    kinds = {a["kind"] for a in report["timeline"]}
    assert "zero_reward" in kinds and kinds <= set(CHECKS) | set(EVENTS)
    assert report["stopped_at_step"] == 6 + CHECKS["zero_reward"].patience


def test_doctor_only_checks_are_not_guard_config():
    doctor_only = {name for name, check in CHECKS.items() if "guard" not in check.judged_by}
    assert doctor_only and not doctor_only & set(BREAKERS)
    assert not hasattr(Guard(GuardConfig()), "_zero_variance")
