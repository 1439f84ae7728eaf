"""Every reader recognises its run however the log ends (a checkpoint save, a traceback, Ray's shutdown
noise, a torn line) and wherever its first step line is: given the file or its directory."""

from __future__ import annotations

import pytest

from grpo.cli import main
from grpo.tools.doctor import examine
from tests.foreign_logs import ENDINGS, FORMATS, healthy, write_log

SOURCES = {"areal": "areal", "verl": "verl", "trl_log": "trl", "grpo": "grpo"}


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_recognised_however_the_log_ends(tmp_path, capsys, name, ending):
    fmt = FORMATS[name]
    log = write_log(fmt, tmp_path / "run", [healthy(s) for s in range(1, 7)], total=20, ending=ending, save_every=3)
    targets = [tmp_path / "run"] if name == "grpo" else [log, tmp_path / "run"]
    for target in targets:
        diagnosis, record = examine(target)
        assert record.source == SOURCES[name]
        assert set(range(1, 7)) <= set(record.steps())
        crashed = ending == "traceback"  # the run ended in a crash: a problem, rightly, whoever trained it
        # A console log that names its total (20) and stops at 6 without a final line reads as a run killed
        # without a word: unknown, never healthy.
        cut = not crashed and name != "grpo" and record.total_steps == 20
        assert diagnosis.status == ("problem" if crashed else "unknown" if cut else "healthy"), diagnosis.explanation
        assert not cut or "of 20 with no final line" in diagnosis.explanation
        capsys.readouterr()
        assert main(["doctor", str(target)]) == (0 if diagnosis.status == "healthy" else 1)
        assert "not a run directory or log the doctor knows" not in capsys.readouterr().err


@pytest.mark.parametrize("name", ["areal", "verl", "trl_log"])
def test_the_first_step_line_anywhere_in_the_head(tmp_path, name):
    """Two hundred kilobytes of start-up warnings before the first step, a traceback after the last."""
    fmt = FORMATS[name]
    log = write_log(fmt, tmp_path, [healthy(s) for s in range(1, 4)], total=10, ending="traceback")
    noise = "".join(f"/usr/lib/python3/site-packages/x.py:{n}: UserWarning: deprecated\n" for n in range(3000))
    log.write_text(noise + log.read_text())
    _, record = examine(log)
    assert record.source == SOURCES[name] and record.steps() == [1, 2, 3]


@pytest.mark.parametrize("name", ["verl", "trl_log", "areal"])
def test_the_checkpoint_a_log_ends_saving_is_found(tmp_path, name):
    fmt = FORMATS[name]
    log = write_log(fmt, tmp_path, [healthy(s) for s in range(1, 5)], total=10, ending="save")
    _, record = examine(log)
    assert [c.step for c in record.checkpoints] == [4]
