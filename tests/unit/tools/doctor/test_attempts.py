"""A run restarted in the same log (a resume appended with `>>`, AReaL's recover): only the attempt now
running is judged, so a watch started on it never stops a healthy resumed trainer for the dead steps of
the attempt before; the doctor still says what went wrong before, as history."""

from __future__ import annotations

import pytest

from grpo.tools.doctor import examine, judge
from grpo.tools.doctor.textlog import iter_lines
from grpo.tools.watch import identify
from tests.foreign_logs import FORMATS, dead, healthy

RESUMES = {"verl": "(TaskRunner pid=2231) Load from checkpoint folder: /ckpt/global_step_16",
           "trl_log": "Continuing training from global step 16",
           "areal": "20251112-04:42:44.192 RecoverHandler INFO: Loaded recover info: resuming from step 17"}


def resumed_log(tmp_path, name: str):
    """Attempt 1: healthy to 19, the reward dead from 20 to 24 (stopped there); attempt 2 resumed from 16,
    healthy to 30."""
    fmt = FORMATS[name]
    lines = fmt.preamble()
    for s in range(1, 25):
        lines += fmt.step(healthy(s) if s < 20 else dead(s), 100)
    lines += fmt.preamble() + [RESUMES[name]]
    for s in range(17, 31):
        lines += fmt.step(healthy(s), 100)
    log = tmp_path / fmt.log_name
    log.write_text("\n".join(lines) + "\n")
    return log


@pytest.mark.parametrize("name", sorted(RESUMES))
def test_the_attempt_running_now_is_judged_and_the_one_before_is_history(tmp_path, name):
    diagnosis, record = examine(resumed_log(tmp_path, name))
    # steps 17-30 of 100 were healthy; a console log that names its total and stops short of it is unknown
    assert diagnosis.status == ("unknown" if record.total_steps == 100 else "healthy"), diagnosis.explanation
    assert record.steps() == list(range(1, 31))
    assert len(diagnosis.history) == 1 and "from step 20" in diagnosis.history[0], diagnosis.history
    assert "restarted from step 17" in diagnosis.history[0]


@pytest.mark.parametrize("name", sorted(RESUMES))
def test_a_watch_started_on_a_resumed_run_never_trips_on_the_attempt_before(tmp_path, name):
    """The watch's first poll reads the whole file (both attempts), then the resumed run goes on."""
    log = resumed_log(tmp_path, name)
    follower = identify(log)
    follower.reader.feed_all(iter_lines(log))
    record = follower.reader.result(final=False)
    record.running = True
    assert judge(record).status == "healthy", judge(record).explanation
