"""Thirteen real verl launch scripts (tests/data/verl_scripts/README.md), their overrides given to grpo as a verl user
gives them: one message answers every one as the truth written before (truth.yaml) does."""

from __future__ import annotations

import pytest

from grpo.config import load_config
from grpo.errors import ConfigError
from tests.verl_scripts import SCRIPTS, TRUTH, answered, expected, script_overrides

SCRIPT_FILES = sorted(SCRIPTS.glob("*.sh"))


def test_thirteen_scripts_and_a_truth_for_every_key_they_pass(tmp_path):
    assert len(SCRIPT_FILES) == 13
    keys = {o.partition("=")[0].lstrip("+") for s in SCRIPT_FILES for o in script_overrides(s, tmp_path)}
    assert keys == set(TRUTH)


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda p: p.stem)
def test_a_script_s_overrides_are_answered_in_one_message_as_the_truth_answers_them(script, tmp_path):
    overrides = script_overrides(script, tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config("quickstart", overrides)
    message = str(info.value)
    assert "\n" not in message
    missed = [o for o in overrides if not answered(message, expected(script, o))]
    assert not missed, f"{len(overrides) - len(missed)} of {len(overrides)} answered; not: {missed[:5]}"
