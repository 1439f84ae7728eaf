"""Eight real ms-swift GRPO launch scripts (tests/data/swift_scripts/README.md), their flags given to grpo as an
ms-swift user gives them: as `flag=value` overrides, as the `--flag value` words themselves after `grpo train`, and
after `grpo train swift rlhf` (the command pasted whole): one message answers every flag as the truth written before
(truth.yaml) does."""

from __future__ import annotations

import pytest

from grpo.cli import main
from grpo.config import load_config
from grpo.errors import ConfigError
from tests.swift_scripts import SCRIPTS, TRUTH, answered, expected, flags, script_words

SCRIPT_FILES = sorted(SCRIPTS.glob("*.sh"))


def test_eight_scripts_and_a_truth_for_every_flag_they_pass(tmp_path):
    assert len(SCRIPT_FILES) == 8
    names = {flag.name for script in SCRIPT_FILES for flag in flags(script_words(script, tmp_path))}
    assert names == set(TRUTH)


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda p: p.stem)
def test_a_script_s_flags_written_as_overrides_are_answered_in_one_message(script, tmp_path):
    given = flags(script_words(script, tmp_path))
    with pytest.raises(ConfigError) as info:
        load_config("quickstart", [flag.override for flag in given])
    message = str(info.value)
    assert "\n" not in message
    missed = [flag.override for flag in given if not answered(message, expected(script, flag))]
    assert not missed, f"{len(given) - len(missed)} of {len(given)} answered; not: {missed[:5]}"


def told(argv: list[str], capsys) -> str:
    """What grpo says refusing `argv`, exit 2 and argparse's refusals included."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    assert status == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize("command", [(), ("swift", "rlhf")], ids=["flags", "swift-rlhf-flags"])
@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda p: p.stem)
def test_a_script_s_flags_given_to_grpo_train_are_answered_in_one_line(script, command, tmp_path, capsys):
    words = script_words(script, tmp_path)
    message = told(["train", "--config", "quickstart", *command, *words], capsys)
    assert "\n" not in message
    given = flags(words)
    missed = [flag.override for flag in given if not answered(message, expected(script, flag))]
    assert not missed, f"{len(given) - len(missed)} of {len(given)} answered; not: {missed[:5]}"
