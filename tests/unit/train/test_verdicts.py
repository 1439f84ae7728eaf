"""Carrying out the guard's verdicts (grpo.train.verdicts) on a real run directory: each trip recorded
and told to the user's hooks, a stop that names the last good checkpoint and the resume command, a
rollback, a pause that the user, a timeout or a stop signal ends, and server and evaluation failures
turned into stops."""

import json
import signal
import socket
import threading

import pytest

from grpo.config import CheckpointConfig, GuardConfig
from grpo.dist import SINGLE
from grpo.errors import RunStopped
from grpo.evaluate import EvaluationFailed
from grpo.guard.breakers import Guard, Trip
from grpo.rollout.server.supervisor import ServerGaveUp
from grpo.rollout.server.weights import WeightSyncFailed
from grpo.rundir.run import RunDir
from grpo.train.signals import SignalWatch, StopRequested
from grpo.train.verdicts import VerdictActions, notify, wait_while_paused


class RestoringState:
    """RunState's part in a rollback: restore the newest of the candidates that loads (`loads`)."""

    def __init__(self, loads: bool = True) -> None:
        self.loads, self.lr_scale, self.restored = loads, 1.0, []

    def restore_newest(self, candidates, queued=True):
        self.restored.append(([c.step for c in candidates], queued))
        return candidates[-1] if self.loads and candidates else None


@pytest.fixture
def run(tmp_path):
    run = RunDir(tmp_path / "run", CheckpointConfig()).acquire()
    run.open()
    yield run
    run.close()


def actions(run, state=None, **guard) -> VerdictActions:
    cfg = GuardConfig(**guard)
    return VerdictActions(cfg, Guard(cfg), state or RestoringState(), run, SINGLE, SignalWatch())


def events(run) -> list[dict]:
    return run.events.read()


def write_parts(directory) -> None:
    """The files a checkpoint's manifest must list: a model's config and the policy's state."""
    for name in ("model/config.json", "policy/.metadata"):
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text("{}")


def checkpoint(run, step: int, healthy: bool = True):
    return run.checkpoints.save(step, write_parts, {"step": step}, healthy=healthy, score=None,
                                logs=run.log_offsets())


def test_a_warning_is_recorded_with_its_evidence_and_the_run_goes_on(run):
    actions(run).act_on([Trip("truncated_responses", "warn", 2, "90% cut off", {"frac": 0.9})], 2)
    (event,) = events(run)
    assert event["kind"] == "trip" and event["step"] == 2 and event["message"] == "90% cut off"
    assert event["evidence"] == {"breaker": "truncated_responses", "action": "warn", "frac": 0.9}


def test_a_stop_names_the_last_good_checkpoint_and_the_resume_command(run):
    good = checkpoint(run, 2)
    checkpoint(run, 4, healthy=False)
    with pytest.raises(RunStopped) as stopped:
        actions(run).act_on([Trip("nonfinite", "stop", 5, "loss is NaN")], 5)
    text = str(stopped.value)
    assert text.startswith("run stopped at step 5 by breaker nonfinite: loss is NaN")
    assert f"last good checkpoint: {good.path}" in text and "resume with: " in text
    report = json.loads(run.stopped_path.read_text())
    assert report["cause"] == "nonfinite: loss is NaN" and report["last_good_checkpoint"] == str(good.path)
    assert [e["kind"] for e in events(run) if e["kind"] in ("trip", "stop")] == ["trip", "stop"]


def test_a_rollback_restores_a_healthy_checkpoint_without_its_queue_and_lowers_the_lr(run):
    checkpoint(run, 2)
    checkpoint(run, 4)
    later = checkpoint(run, 6, healthy=False)
    state = RestoringState()
    actions(run, state, rollback_lr_factor=0.25).act_on([Trip("zero_reward", "rollback", 7, "reward 0")], 7)
    # Healthy ones up to the last good (step 2's was pruned: checkpoint.keep_last=2), none of their queued batches.
    assert state.restored == [([4], False)]
    assert state.lr_scale == 0.25
    assert not later.path.exists()  # the checkpoints after the one restored are discarded
    (rollback,) = [e for e in events(run) if e["kind"] == "rollback"]
    assert rollback["message"] == "rolled back to step 4 after zero_reward" and rollback["evidence"]["rollbacks"] == 1


def test_a_rollback_with_nothing_that_loads_becomes_a_stop_that_says_so(run):
    checkpoint(run, 2)
    with pytest.raises(RunStopped, match="not rolling back: no healthy checkpoint loads"):
        actions(run, RestoringState(loads=False)).act_on([Trip("zero_reward", "rollback", 3, "reward 0")], 3)


class UserDeletesWhileWaiting(threading.Event):
    """The pause's wait, during which the user deletes the pause file."""

    def __init__(self, pause_file) -> None:
        super().__init__()
        self.pause_file, self.waits = pause_file, 0

    def wait(self, timeout=None) -> bool:
        self.waits += 1
        self.pause_file.unlink()
        return False


def test_a_pause_ends_when_the_user_deletes_the_pause_file(run):
    verdicts = actions(run, pause_poll_s=0.01, pause_timeout_s=60)
    verdicts.signals.event = UserDeletesWhileWaiting(run.paused_path)
    verdicts.act_on([Trip("kl_explosion", "pause", 3, "KL 40")], 3)
    assert verdicts.signals.event.waits == 1
    assert [e["kind"] for e in events(run)][-3:] == ["trip", "pause", "unpause"]


def test_a_pause_nobody_ends_becomes_a_stop_and_leaves_its_reason_in_the_file(run):
    with pytest.raises(RunStopped, match="KL 40; paused 0s with no one resuming"):
        actions(run, pause_timeout_s=0).act_on([Trip("kl_explosion", "pause", 3, "KL 40")], 3)
    assert run.paused_path.read_text().startswith("KL 40\nDelete this file to continue the run.")


def test_a_stop_signal_ends_a_pause_at_once(run):
    verdicts = actions(run, pause_timeout_s=3600)
    verdicts.signals.signum = signal.SIGTERM
    verdicts.signals.event.set()
    with pytest.raises(StopRequested):
        verdicts.act_on([Trip("kl_explosion", "pause", 3, "KL 40")], 3)


@pytest.mark.parametrize("exc, breaker", [
    (ServerGaveUp("server s-0 gave up", {"server_error": "CUDA out of memory"}), "inference_server"),
    (WeightSyncFailed("weights differ", {"max_diff": 0.5}), "weight_sync"),
])
def test_a_server_that_cannot_go_on_stops_the_run_with_its_diagnosis(run, exc, breaker):
    with pytest.raises(RunStopped, match=f"by breaker {breaker}"):
        actions(run).server_stop(exc, 4)
    report = json.loads(run.stopped_path.read_text())
    assert report["cause"] == f"{breaker}: {exc}" and report["evidence"] == (getattr(exc, "diagnosis", None)
                                                                             or exc.evidence)


def test_a_failed_evaluation_is_recorded_as_failed_never_as_zero_and_stops(run):
    with pytest.raises(RunStopped, match="by breaker evaluation: held-out evaluation \\(step 4\\) failed"):
        actions(run).evaluation_failed("step 4", EvaluationFailed("3 answers failed", {"failed": 3}), 4)
    (line,) = run.logs["eval.jsonl"].read()[0]
    assert line == {"step": 4, "label": "step 4", "status": "failed", "error": "3 answers failed"}


def test_hooks_get_the_event_as_json_and_their_failures_come_back_as_errors(tmp_path):
    out = tmp_path / "hook.json"
    event = {"kind": "trip", "step": 3, "evidence": {"breaker": "zero_reward"}}
    assert notify(event, f"cat > {out}", None) == []
    assert json.loads(out.read_text()) == event
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    errors = notify(event, "exit 3", f"http://127.0.0.1:{port}/hook")
    assert len(errors) == 2
    assert errors[0].startswith("on_trip_command failed") and errors[1].startswith("on_trip_webhook failed")


def test_a_failing_hook_is_recorded_and_never_takes_the_run_down(run):
    actions(run, on_trip_command="exit 7").act_on([Trip("zero_reward", "warn", 2, "reward 0")], 2)
    assert [e["kind"] for e in events(run)] == ["trip", "notify_failed"]
    assert "exit status 7" in events(run)[1]["message"]


def test_waiting_while_paused_ends_on_the_timeout_or_a_stop(tmp_path):
    pause_file = tmp_path / "PAUSED"
    pause_file.write_text("paused")
    assert wait_while_paused(pause_file, 0.01, 0.0) is False
    stop = threading.Event()
    stop.set()
    assert wait_while_paused(pause_file, 60, 3600, stop) is False
    pause_file.unlink()
    assert wait_while_paused(pause_file, 60, 3600) is True
