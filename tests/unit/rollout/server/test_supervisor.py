"""The supervisor's state machine over real processes: ready only after a one-token generation,
failures seen at once, restarts with backoff within a budget, a diagnosis when it gives up (at once
when a start fails the same way twice), and waits that end on a stop signal."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from grpo.config import ServerConfig
from grpo.faults import signals
from grpo.rollout.server.backend import Backend, Generation, LaunchSpec
from grpo.rollout.server.client import ServerError
from grpo.rollout.server.diagnosis import likely_cause
from grpo.rollout.server.supervisor import RestartBudget, ServerGaveUp, ServerState, StartCancelled, Supervisor
from tests.server_logs import LOGS
from tests.waiting import wait_until


class ScriptedBackend(Backend):
    """Launches a real process running `program`; its health generation succeeds while `healthy`."""

    name = "scripted"

    def __init__(self, program: str) -> None:
        self.program, self.healthy, self.health_calls = program, True, 0
        self.on_health = None  # called (with the supervisor's process) before each health generation

    def launch(self, cfg, python, model_dir, host, port, dtype, seed) -> LaunchSpec:
        return LaunchSpec([sys.executable, "-c", self.program])

    def health_generate(self, client, token_ids, timeout_s) -> None:
        self.health_calls += 1
        if self.on_health is not None:
            self.on_health()
        if not self.healthy:
            raise ServerError("timeout", "no answer")

    def generate(self, client, prompt_ids, params, seed, timeout_s=None) -> Generation:
        """Only the seed check samples here: tokens drawn from the request's seed, as a server honouring it."""
        tokens = [(seed >> (8 * i)) % 251 for i in range(params.max_new_tokens)]
        return Generation(tokens, [0.0] * len(tokens), "length")

    def prompt_logprobs(self, client, token_ids):
        raise NotImplementedError

    def reload_weights(self, client, model_dir, mode) -> None:
        raise NotImplementedError

    def reset_cache(self, client) -> None:
        raise NotImplementedError


SLEEPER = "import time; print('serving', flush=True); time.sleep(120)"


def supervisor(tmp_path: Path, backend: Backend, cancel: threading.Event | None = None,
               **cfg) -> tuple[Supervisor, list]:
    events = []
    cfg = {"max_restarts": 2, "restart_backoff_s": 0.05, "startup_timeout_s": 5.0, **cfg}
    sup = Supervisor("s-0", backend, ServerConfig(**cfg), model_dir=tmp_path, dtype="float32", seed=0,
                     log_dir=tmp_path / "servers", health_ids=[1, 2],
                     record=lambda kind, message, **ev: events.append((kind, message, ev)),
                     url=cfg.get("urls", [None])[0] if cfg.get("urls") else None, cancel=cancel)
    return sup, events


def kinds(events) -> list[str]:
    return [k for k, _, _ in events]


def delays(events) -> list[float]:
    return [ev["delay_s"] for kind, _, ev in events if kind == "server_restart"]


def test_ready_means_a_generation_answered_and_a_kill_is_seen_at_once(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events = supervisor(tmp_path, backend)
    assert sup.ensure_ready() is True
    assert sup.state == ServerState.READY and sup.incarnation == 1 and backend.health_calls >= 1
    assert kinds(events) == ["server_start", "server_seeds", "server_ready"]
    assert sup.seeds.reproducible is True and sup.status()["seeds"]["reproducible"] is True
    assert sup.ensure_ready() is False  # already ready: nothing to do

    signals.send(sup.process, signal.SIGKILL)  # from outside: an OOM killer, say
    assert sup.process.exited.wait(10)
    while "server_failed" not in kinds(events):  # the watcher thread records it right after the exit
        sup.process.exited.wait(0.05)
    assert sup.state == ServerState.FAILED
    failure = events[-1][2]
    assert events[-1][0] == "server_failed" and failure["exit"] == "killed by SIGKILL" and sup.dead == {1}
    assert "serving" in "\n".join(failure["log_tail"])

    assert sup.ensure_ready() is True  # restarted
    assert sup.state == ServerState.READY and sup.incarnation == 2 and delays(events) == [0.05]
    assert kinds(events)[-3:] == ["server_restart", "server_start", "server_ready"]  # seeds checked once
    sup.stop()
    assert sup.state == ServerState.STOPPED and sup.process.exited.is_set()
    assert kinds(events).count("server_failed") == 1  # stopping on purpose is not a failure


class SlowSampler(ScriptedBackend):
    """Answers the one-token readiness probe, but its 16-token seed check times out (a loaded machine)."""

    def generate(self, client, prompt_ids, params, seed, timeout_s=None) -> Generation:
        raise ServerError("timeout", f"no answer in {timeout_s}s")


def test_a_seed_check_that_runs_out_of_time_is_unknown_and_costs_no_restart(tmp_path):
    sup, events = supervisor(tmp_path, SlowSampler(SLEEPER))
    assert sup.ensure_ready() is True
    assert kinds(events) == ["server_start", "server_seeds", "server_ready"] and sup.incarnation == 1
    assert sup.seeds.reproducible is None and "could not be checked (timeout: no answer in" in sup.seeds.detail
    sup.stop()


def test_a_hang_is_found_by_the_health_generation_and_the_server_killed(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events = supervisor(tmp_path, backend)
    sup.ensure_ready()
    backend.healthy = False
    assert sup.check_health() is False
    assert sup.state == ServerState.FAILED and sup.process.exited.is_set()
    assert "hung" in events[-1][1]
    backend.healthy = True
    assert sup.ensure_ready() and sup.incarnation == 2
    sup.stop()


MEMORY_ERROR = ("(EngineCore pid=77) ValueError: Available memory on node 0 (1.2/23.0 GiB) on startup is less "
                "than desired CPU memory utilization (0.9, 20.7 GiB).")


def test_a_start_that_fails_the_same_way_twice_is_given_up_quoting_the_server_and_naming_the_knob(tmp_path):
    noise = "; ".join(f"print('shutting down {i}')" for i in range(30))  # the cause far above the tail
    backend = ScriptedBackend(f"import sys; print({MEMORY_ERROR!r}); print('RuntimeError: Engine core "
                              f"initialization failed. See root cause above.'); {noise}; sys.exit(1)")
    backend.healthy = False
    sup, events = supervisor(tmp_path, backend, max_restarts=3)
    with pytest.raises(ServerGaveUp, match=r"gave up \(it failed the same way twice\)") as info:
        sup.ensure_ready()
    diagnosis = info.value.diagnosis
    assert kinds(events).count("server_start") == 2 and delays(events) == [0.05]  # no third start
    assert diagnosis["server_error"] == MEMORY_ERROR.split(") ", 1)[1]
    failed = [ev for kind, _, ev in events if kind == "server_failed"]
    assert len(failed) == 2 and all(ev["server_cause"] == "memory_taken_at_start" for ev in failed)
    assert not any("Available memory" in line for line in diagnosis["log_tail"])  # not in the last 20 lines
    assert "rollout.server.memory_fraction" in str(info.value) and "kv_cache_gib" in str(info.value)
    assert "Available memory on node 0" in str(info.value)
    with pytest.raises(ServerGaveUp):  # and it stays given up
        sup.ensure_ready()


def test_starts_failing_differently_use_the_restart_budget(tmp_path):
    counter = tmp_path / "starts"
    backend = ScriptedBackend(f"import pathlib, sys; p = pathlib.Path({str(counter)!r}); "
                              "n = len(p.read_text()) if p.exists() else 0; p.write_text('x' * (n + 1)); "
                              "print('RuntimeError: ' + ['first', 'second', 'third'][n] + ' way'); sys.exit(3)")
    backend.healthy = False
    sup, events = supervisor(tmp_path, backend, max_restarts=2)
    with pytest.raises(ServerGaveUp, match="2 restarts used up") as info:
        sup.ensure_ready()
    assert delays(events) == [0.05, 0.1]  # doubling backoff, then the budget is spent
    assert info.value.diagnosis["exit"] == "exited with status 3" and info.value.diagnosis["restarts"] == 2
    assert info.value.diagnosis["server_error"] == "RuntimeError: third way"  # (numbers alone would not differ)
    assert "exited with status 3" in info.value.diagnosis["likely_cause"]
    assert kinds(events).count("server_start") == 3 and kinds(events)[-1] == "server_gave_up"


def test_a_stop_signal_ends_a_start_within_a_second_and_kills_the_half_started_server(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    backend.healthy = False
    cancel = threading.Event()
    sup, events = supervisor(tmp_path, backend, cancel=cancel, startup_timeout_s=600.0)
    outcome = []

    def start() -> None:
        try:
            sup.ensure_ready()
        except StartCancelled as exc:
            outcome.append((time.monotonic(), exc))

    thread = threading.Thread(target=start)
    thread.start()
    wait_until(lambda: backend.health_calls >= 2, 10, "health polls")  # it is polling: the server is "starting"
    signalled = time.monotonic()
    cancel.set()
    thread.join(5)
    assert outcome and outcome[0][0] - signalled < 1.0
    assert sup.process.exited.is_set() and sup.state == ServerState.STOPPED
    assert "server_failed" not in kinds(events)  # a stop is not a failure


def test_a_stop_signal_ends_the_backoff_before_a_restart(tmp_path):
    backend = ScriptedBackend("import sys; sys.exit(3)")
    backend.healthy = False
    cancel = threading.Event()
    sup, events = supervisor(tmp_path, backend, cancel=cancel, restart_backoff_s=60.0)
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(StartCancelled):
        sup.ensure_ready()
    assert time.monotonic() - started < 3 and kinds(events).count("server_start") == 1


def test_a_sigkill_seen_first_by_the_health_check_is_recorded_as_the_kill_not_as_a_hang(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events = supervisor(tmp_path, backend)
    sup.ensure_ready()

    def killed_under_the_check() -> None:  # the connection resets before the watcher sees the exit
        signals.send(sup.process, signal.SIGKILL)
        raise ServerError("connect", "POST /generate: ConnectionResetError: [Errno 104] Connection reset by peer")

    backend.on_health = killed_under_the_check
    assert sup.check_health() is False
    failed = [(m, ev) for kind, m, ev in events if kind == "server_failed"]
    assert len(failed) == 1 and failed[0][1]["exit"] == "killed by SIGKILL"
    assert "hung" not in failed[0][0] and failed[0][0].endswith("killed by SIGKILL")
    sup.stop()


def test_a_server_never_ready_within_the_startup_timeout_fails(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    backend.healthy = False
    sup, events = supervisor(tmp_path, backend, max_restarts=0, startup_timeout_s=1.0)
    with pytest.raises(ServerGaveUp, match="0 restarts used up"):
        sup.ensure_ready()
    assert "not ready after 1s" in events[-2][2]["reason"]
    assert sup.process.exited.is_set()  # killed, not left running


def test_a_server_whose_child_was_killed_is_diagnosed_by_the_crash_line_not_by_the_noise_above_it(tmp_path):
    """Real SGLang's log of its scheduler SIGKILLed, replayed by a process that then dies as SGLang did."""
    replay = LOGS / "sglang_scheduler_killed.log"
    backend = ScriptedBackend(f"import os, signal, sys; sys.stdout.write(open({str(replay)!r}).read()); "
                              "sys.stdout.flush(); os.kill(os.getpid(), signal.SIGKILL)")
    backend.healthy = False
    sup, events = supervisor(tmp_path, backend, max_restarts=1)
    with pytest.raises(ServerGaveUp) as info:
        sup.ensure_ready()
    crash = "Subprocess scheduler_0 (pid=6766) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
    failed = [(m, ev) for kind, m, ev in events if kind == "server_failed"]
    assert failed[0][0] == f"s-0: the server process was killed by SIGKILL while starting (the server said: {crash})"
    assert failed[0][1]["stopped_by_grpo"] is False
    cause = info.value.diagnosis["likely_cause"]
    assert cause.startswith("its scheduler_0 was killed by SIGKILL") and cause.endswith(f'"{crash}"')
    assert "rollout.server.python" not in cause


def test_a_server_grpo_kills_for_hanging_is_said_to_be_stopped_by_grpo(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events = supervisor(tmp_path, backend)
    sup.ensure_ready()
    backend.healthy = False
    assert sup.check_health() is False
    (failure,) = sup.failures
    assert failure["exit"] == "killed by SIGKILL" and failure["stopped_by_grpo"] is True
    assert likely_cause(failure, False) == "grpo stopped it (hung: no one-token generation in 30s (timeout: no answer))"
    sup.stop()


def test_an_attached_server_is_never_restarted_and_the_diagnosis_says_so(tmp_path):
    backend = ScriptedBackend(SLEEPER)
    sup, events = supervisor(tmp_path, backend, urls=["http://127.0.0.1:9"], max_restarts=1)
    assert sup.ensure_ready() and sup.process is None  # nothing launched
    backend.healthy = False
    assert sup.check_health() is False
    with pytest.raises(ServerGaveUp) as info:
        sup.ensure_ready()
    assert "grpo cannot restart a server it did not start" in info.value.diagnosis["likely_cause"]


def test_restart_budget_doubles_and_caps():
    budget = RestartBudget(max_restarts=8, backoff_s=5.0)
    assert [budget.next_delay() for _ in range(9)] == [5, 10, 20, 40, 60, 60, 60, 60, None]


def test_likely_cause_prefers_oom_evidence_and_says_whether_the_kernel_log_was_read():
    oom = {"oom_kills": ["Out of memory: Killed process 42"], "exit": "killed by SIGKILL"}
    assert "OOM" in likely_cause(oom, False)
    unread = likely_cause({"exit": "killed by SIGKILL", "reason": "x", "oom_kills": None}, False)
    read = likely_cause({"exit": "killed by SIGKILL", "reason": "x", "oom_kills": []}, False)
    assert "not readable" in unread and "not readable" not in read and "no OOM kill in the kernel log" in read
