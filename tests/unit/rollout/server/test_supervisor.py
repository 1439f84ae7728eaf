"""The supervisor's state machine over real processes: ready only after a one-token generation,
failures seen at once, restarts with backoff within a budget, a diagnosis when it gives up."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from grpo.config import ServerConfig
from grpo.rollout.server.backend import Backend, Generation, LaunchSpec
from grpo.rollout.server.client import ServerError
from grpo.rollout.server.supervisor import RestartBudget, ServerGaveUp, ServerState, Supervisor, likely_cause


class ScriptedBackend(Backend):
    """Launches a real process running `program`; its health generation succeeds while `healthy`."""

    name = "scripted"

    def __init__(self, program: str) -> None:
        self.program, self.healthy, self.health_calls = program, True, 0

    def launch(self, cfg, python, model_dir, host, port, dtype, seed) -> LaunchSpec:
        return LaunchSpec([sys.executable, "-c", self.program])

    def health_generate(self, client, token_ids, timeout_s) -> None:
        self.health_calls += 1
        if not self.healthy:
            raise ServerError("timeout", "no answer")

    def generate(self, *args, **kwargs) -> Generation:
        raise NotImplementedError

    def prompt_logprobs(self, client, token_ids):
        raise NotImplementedError

    def reload_weights(self, client, model_dir, mode) -> None:
        raise NotImplementedError

    def reset_cache(self, client) -> None:
        raise NotImplementedError


SLEEPER = "import time; print('serving', flush=True); time.sleep(120)"


def supervisor(tmp_path: Path, backend: Backend, **cfg) -> tuple[Supervisor, list, list]:
    events, sleeps = [], []
    cfg = {"max_restarts": 2, "restart_backoff_s": 1.0, "startup_timeout_s": 5.0, **cfg}
    sup = Supervisor("s-0", backend, ServerConfig(**cfg), model_dir=tmp_path, dtype="float32", seed=0,
                     log_dir=tmp_path / "servers", health_ids=[1, 2],
                     record=lambda kind, message, **ev: events.append((kind, message, ev)),
                     url=cfg.get("urls", [None])[0] if cfg.get("urls") else None, sleep=sleeps.append)
    return sup, events, sleeps


def kinds(events) -> list[str]:
    return [k for k, _, _ in events]


def test_ready_means_a_generation_answered_and_a_kill_is_seen_at_once(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events, sleeps = supervisor(tmp_path, backend)
    assert sup.ensure_ready() is True
    assert sup.state == ServerState.READY and sup.incarnation == 1 and backend.health_calls >= 1
    assert kinds(events) == ["server_start", "server_ready"]
    assert sup.ensure_ready() is False  # already ready: nothing to do

    sup.process.send(signal.SIGKILL)  # from outside: an OOM killer, say
    assert sup.process.exited.wait(10)
    while "server_failed" not in kinds(events):  # the watcher thread records it right after the exit
        sup.process.exited.wait(0.05)
    assert sup.state == ServerState.FAILED
    failure = events[-1][2]
    assert events[-1][0] == "server_failed" and failure["exit"] == "killed by SIGKILL" and sup.dead == {1}
    assert "serving" in "\n".join(failure["log_tail"])

    assert sup.ensure_ready() is True  # restarted
    assert sup.state == ServerState.READY and sup.incarnation == 2 and sleeps == [1.0]
    assert kinds(events)[-3:] == ["server_restart", "server_start", "server_ready"]
    sup.stop()
    assert sup.state == ServerState.STOPPED and sup.process.exited.is_set()
    assert kinds(events).count("server_failed") == 1  # stopping on purpose is not a failure


def test_a_hang_is_found_by_the_health_generation_and_the_server_killed(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events, _ = supervisor(tmp_path, backend)
    sup.ensure_ready()
    backend.healthy = False
    assert sup.check_health() is False
    assert sup.state == ServerState.FAILED and sup.process.exited.is_set()
    assert "hung" in events[-1][1]
    backend.healthy = True
    assert sup.ensure_ready() and sup.incarnation == 2
    sup.stop()


def test_a_server_that_dies_on_every_start_is_given_up_with_a_diagnosis(tmp_path):
    backend = ScriptedBackend("import sys; print('RuntimeError: CUDA out of memory', flush=True); sys.exit(3)")
    backend.healthy = False
    sup, events, sleeps = supervisor(tmp_path, backend, max_restarts=2)
    with pytest.raises(ServerGaveUp) as info:
        sup.ensure_ready()
    diagnosis = info.value.diagnosis
    assert sup.state == ServerState.GAVE_UP and sleeps == [1.0, 2.0]  # doubling backoff, then the budget is spent
    assert diagnosis["exit"] == "exited with status 3" and diagnosis["restarts"] == 2
    assert any("CUDA out of memory" in line for line in diagnosis["log_tail"])
    assert "exited with status 3" in diagnosis["likely_cause"]
    assert kinds(events).count("server_start") == 3 and kinds(events)[-1] == "server_gave_up"
    with pytest.raises(ServerGaveUp):  # and it stays given up
        sup.ensure_ready()


def test_a_server_never_ready_within_the_startup_timeout_fails(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    backend.healthy = False
    sup, events, _ = supervisor(tmp_path, backend, max_restarts=0, startup_timeout_s=1.0)
    with pytest.raises(ServerGaveUp, match="0 restarts used up"):
        sup.ensure_ready()
    assert "not ready after 1s" in events[-2][2]["reason"]
    assert sup.process.exited.is_set()  # killed, not left running


def test_an_attached_server_is_never_restarted_and_the_diagnosis_says_so(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events, _ = supervisor(tmp_path, backend, urls=["http://127.0.0.1:9"], max_restarts=1)
    assert sup.ensure_ready() and sup.process is None  # nothing launched
    backend.healthy = False
    assert sup.check_health() is False
    with pytest.raises(ServerGaveUp) as info:
        sup.ensure_ready()
    assert "grpo cannot restart a server it did not start" in info.value.diagnosis["likely_cause"]


def test_restart_budget_doubles_and_caps():
    budget = RestartBudget(max_restarts=8, backoff_s=5.0)
    assert [budget.next_delay() for _ in range(9)] == [5, 10, 20, 40, 60, 60, 60, 60, None]


def test_likely_cause_prefers_oom_evidence():
    assert "OOM" in likely_cause({"oom_kills": ["Out of memory: Killed process 42"], "exit": "killed by SIGKILL"}, False)
    assert "SIGKILL" in likely_cause({"exit": "killed by SIGKILL", "reason": "x"}, False)
