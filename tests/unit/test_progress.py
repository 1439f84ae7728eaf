"""Progress lines: what they say, and that they come out only when due."""

import logging

from grpo import progress
from grpo.progress import Progress


def test_a_log_line_when_not_on_a_terminal_with_rates_and_etas(caplog):
    p = Progress(total_steps=10, interval_s=0.0, tty=False)
    p.step_times = [20.0, 20.0]
    p.start_step(3)
    progress.activate(p)
    try:
        with caplog.at_level(logging.INFO, logger="grpo.progress"), progress.phase("rollout"):
            progress.tick(40, 64, "samples")
    finally:
        progress.activate(None)
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("step 3/10 rollout: 40/64 samples (") and "left)" in message
    assert message.endswith("run eta 2.7 min")  # 8 steps left (3..10) x 20 s


def test_nothing_is_due_before_the_interval_and_nothing_without_a_display(caplog):
    p = Progress(total_steps=2, interval_s=3600.0, tty=False)
    progress.activate(p)
    try:
        with caplog.at_level(logging.INFO, logger="grpo.progress"):
            progress.tick(1, 2, "x")
    finally:
        progress.activate(None)
    progress.tick(1, 2, "x")  # no display active: a no-op
    assert caplog.records == []


def test_a_terminal_status_line_is_cleared_when_its_phase_ends(capsys):
    p = Progress(total_steps=0, interval_s=0.0, tty=True)
    progress.activate(p)
    try:
        with progress.phase("evaluate"):
            progress.tick(5, 10, "decode steps")
        err = capsys.readouterr().err
    finally:
        progress.activate(None)
    assert "evaluate: 5/10 decode steps" in err and err.endswith("\r\033[K")  # the table prints on a clean line


def test_the_run_eta_follows_the_recent_steps_and_a_stall_reads_as_one():
    p = Progress(total_steps=10, interval_s=0.0, tty=False)
    p.step_times = [5.0, 150.0, 300.0, 200.0]  # one step cut short: the pace is the median of the last ones
    p.start_step(9)
    p.enter("rollout")
    now = p.step_started + 100.0  # 100 s into step 9 of 10
    text = p.describe(0, 64, "samples", now)
    assert "0/64 samples (none yet after 1.7 min)" in text and "samples/s" not in text
    assert text.endswith("run eta 5.0 min")  # 2 steps x 200 s - the 100 s already spent
    assert p.describe(32, 64, "samples", now).startswith("step 9/10 rollout: 32/64 samples (0.3 samples/s")
