"""Supervisor's Liveness: a server owing answers is hung once stopped, or idle, for stall_s; working, never."""

from __future__ import annotations

from grpo.rollout.server.process import Activity
from grpo.rollout.server.supervisor import Liveness

STALL_S = 10.0


def test_a_server_using_cpu_is_never_hung_however_long_it_takes():
    live = Liveness(since=0.0, cpu_mark=5.0, working_at=0.0)
    for second in range(1, 300):
        assert live.hang(Activity(False, 5.0 + 0.9 * second), float(second), STALL_S) is None


def test_a_server_that_uses_no_cpu_is_hung_after_stall_s():
    live = Liveness(since=0.0, cpu_mark=5.0, working_at=0.0)
    assert live.hang(Activity(False, 5.01), 9.9, STALL_S) is None
    reason = live.hang(Activity(False, 5.02), 10.0, STALL_S)
    assert reason == "its processes used 0.02s of CPU in 10.0s"


def test_a_stopped_server_is_hung_after_stall_s_of_being_stopped_and_a_continued_one_is_not():
    live = Liveness(since=0.0, cpu_mark=5.0, working_at=0.0)
    assert live.hang(Activity(True, 5.0), 1.0, STALL_S) is None
    assert live.hang(Activity(False, 6.0), 5.0, STALL_S) is None  # continued, and working
    assert live.hang(Activity(True, 6.0), 6.0, STALL_S) is None  # stopped again: counted from here
    assert live.hang(Activity(True, 6.0), 15.9, STALL_S) is None
    assert live.hang(Activity(True, 6.0), 16.0, STALL_S) == "its processes have been stopped (SIGSTOP) for 10.0s"
