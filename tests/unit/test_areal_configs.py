"""Seven real AReaL experiment configs and a launch script (tests/data/areal_configs/README.md), given to grpo as
an AReaL user gives them: a whole config as `grpo train --config areal.yaml`, and its keys (or the script's) as
overrides. One message answers every key as the truth written before (truth.yaml) does."""

from __future__ import annotations

import pytest

from grpo.config import load_config
from grpo.errors import ConfigError
from tests.areal_configs import SCRIPTS, TRUTH, YAMLS, answered, expected, input_names, input_overrides

INPUTS = YAMLS + SCRIPTS


def refusal(config: str, overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(config, overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def unanswered(path, tmp_path, message: str) -> list[str]:
    names = input_names(path, tmp_path)
    return [key for key in names if not answered(message, expected(path.stem, key, names))]


def test_eight_inputs_and_a_truth_for_every_key_they_set(tmp_path):
    assert (len(YAMLS), len(SCRIPTS)) == (7, 1)
    assert {key for path in INPUTS for key in input_names(path, tmp_path)} == set(TRUTH)


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.stem)
def test_a_config_given_as_grpo_s_config_is_answered_in_one_message(path, tmp_path):
    missed = unanswered(path, tmp_path, refusal(str(path), []))
    assert not missed, f"{len(input_names(path, tmp_path)) - len(missed)} answered; not: {missed[:5]}"


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.stem)
def test_its_keys_given_as_overrides_are_answered_in_one_message(path, tmp_path):
    missed = unanswered(path, tmp_path, refusal("quickstart", input_overrides(path, tmp_path)))
    assert not missed, f"{len(input_names(path, tmp_path)) - len(missed)} answered; not: {missed[:5]}"
