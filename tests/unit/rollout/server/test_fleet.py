"""Several supervised servers (grpo.rollout.server.fleet) over real processes: started side by side,
only the ready and verified ones serve, a failed one restarts in the background while another serves,
and a restart that gives up is raised in the caller's thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from grpo.config import ServerConfig
from grpo.rollout.server.fleet import Fleet
from grpo.rollout.server.supervisor import ServerGaveUp, ServerState, Supervisor

from .test_supervisor import SLEEPER, ScriptedBackend


def server(tmp_path: Path, name: str, program: str = SLEEPER, **cfg) -> Supervisor:
    cfg = {"max_restarts": 2, "restart_backoff_s": 0.05, "startup_timeout_s": 10.0, **cfg}
    return Supervisor(name, ScriptedBackend(program), ServerConfig(**cfg), model_dir=tmp_path, dtype="float32",
                      seed=0, log_dir=tmp_path / name, health_ids=[1, 2], record=lambda *a, **k: None)


@pytest.fixture
def fleet(tmp_path):
    made = []

    def make(*programs: str, **cfg) -> Fleet:
        servers = [server(tmp_path, f"s-{i}", program, **cfg) for i, program in enumerate(programs)]
        made.append(Fleet(servers))
        return made[-1]

    yield make
    for fleet in made:
        for s in fleet.servers:
            s.stop()
        fleet.close()


def test_first_starts_run_side_by_side_and_serve_once_their_weights_are_verified(fleet):
    f = fleet(SLEEPER, SLEEPER)
    assert f.start_together(f.servers) == {"s-0", "s-1"}
    a, b = f.servers
    assert a.state == b.state == ServerState.READY and a.process.pid != b.process.pid
    assert f.serving(3) == []  # ready, but no weights verified on them yet
    a.revision = b.revision = 3
    assert f.serving(3) == [a, b]
    b.revision = 2  # missed a sync
    assert f.serving(3) == [a]


def test_a_dead_process_does_not_serve_even_before_its_supervisor_notices(fleet):
    f = fleet(SLEEPER, SLEEPER)
    f.start_together(f.servers)
    a, b = f.servers
    a.revision = b.revision = 1
    b.process.kill()
    assert b.process.exited.wait(10)
    assert f.serving(1) == [a]


def test_a_failed_server_restarts_aside_while_another_serves_and_rejoins_on_new_weights(fleet):
    f = fleet(SLEEPER, SLEEPER)
    f.start_together(f.servers)
    a, b = f.servers
    a.revision = b.revision = 4
    assert f.can_restart_aside(a) and f.can_restart_aside(b)  # both up: either may go down while the other serves
    b.fail("weights did not verify")
    assert b.state == ServerState.FAILED and f.can_restart_aside(b)
    f.restart_aside(b, revision=4)
    assert f.restarting(b) and b not in f.serving(4) and f.serving(4) == [a]
    assert not f.can_restart_aside(a)  # the only one serving may not go down aside
    f.wait_for_restarts()
    assert f.restarted() == [(b, 4)]  # with the weights exported when it began: reload if they moved on
    assert not f.restarting(b) and b.state == ServerState.READY and b.incarnation == 2
    assert b.revision is None and f.serving(4) == [a]  # serves again only once its weights are verified
    assert f.restarted() == []


def test_with_no_other_server_up_a_restart_is_not_done_aside(fleet):
    f = fleet(SLEEPER)
    f.start_together(f.servers)
    (only,) = f.servers
    only.fail("hung")
    assert not f.can_restart_aside(only)


def test_a_restart_that_gives_up_is_raised_in_the_callers_thread(fleet):
    f = fleet(SLEEPER, SLEEPER, startup_timeout_s=0.5)
    f.start_together(f.servers)
    a, b = f.servers
    b.fail("hung")
    b.backend.healthy = False  # every restart now hangs the same way: the second such one gives up
    f.restart_aside(b, revision=1)
    f.wait_for_restarts()
    with pytest.raises(ServerGaveUp, match="s-1 gave up"):
        f.restarted()
    assert b.state == ServerState.GAVE_UP and not f.restarting(b) and a.state == ServerState.READY


def test_answered_requests_are_counted_per_server_across_threads(fleet):
    f = fleet(SLEEPER, SLEEPER)
    a, b = f.servers
    threads = [threading.Thread(target=lambda s=s: [f.answered(s) for _ in range(500)]) for s in (a, a, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (f.requests(a), f.requests(b)) == (1500, 500)
