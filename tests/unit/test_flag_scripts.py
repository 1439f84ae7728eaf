"""Real OpenRLHF and ms-swift launch scripts (tests/data/openrlhf_scripts/README.md, swift_scripts/README.md), their
flags given to grpo as their users give them: as `flag=value` overrides, as the `--flag value` words themselves after
`grpo train`, and (ms-swift) after `grpo train swift rlhf`, the command pasted whole: one message answers every flag
as the truth written before (truth.yaml) does."""

from __future__ import annotations

import pytest

from grpo.config import load_config
from grpo.errors import ConfigError
from tests.coming_from import told
from tests.script_flags import OPENRLHF, SWIFT, flags

TABLES = {"openrlhf": OPENRLHF, "swift": SWIFT}
SCRIPTS = [pytest.param(table, script, id=f"{name}-{script.stem}")
           for name, table in TABLES.items() for script in table.files()]
# The words before a script's flags: `grpo train` alone, or with the trainer's own command words pasted too.
COMMANDS = [pytest.param(table, command, script, id=f"{name}-{' '.join(command) or 'flags'}-{script.stem}")
            for name, table in TABLES.items() for script in table.files()
            for command in ([()] if table is OPENRLHF else [(), ("swift", "rlhf")])]


@pytest.mark.parametrize("table", TABLES.values(), ids=list(TABLES))
def test_eight_scripts_and_a_truth_for_every_flag_they_pass(table, tmp_path):
    assert len(table.files()) == 8
    names = {flag.name for script in table.files() for flag in flags(table.words(script, tmp_path))}
    assert names == set(table.truth)


@pytest.mark.parametrize("table,script", SCRIPTS)
def test_a_script_s_flags_written_as_overrides_are_answered_in_one_message(table, script, tmp_path):
    given = flags(table.words(script, tmp_path))
    with pytest.raises(ConfigError) as info:
        load_config("quickstart", [flag.override for flag in given])
    message = str(info.value)
    assert "\n" not in message
    missed = table.unanswered(script, given, message)
    assert not missed, f"{len(given) - len(missed)} of {len(given)} answered; not: {missed[:5]}"


@pytest.mark.parametrize("table,command,script", COMMANDS)
def test_a_script_s_flags_given_to_grpo_train_are_answered_in_one_line(table, command, script, tmp_path, capsys):
    words = table.words(script, tmp_path)
    message = told(["train", "--config", "quickstart", *command, *words], capsys)
    given = flags(words)
    missed = table.unanswered(script, given, message)
    assert not missed, f"{len(given) - len(missed)} of {len(given)} answered; not: {missed[:5]}"
