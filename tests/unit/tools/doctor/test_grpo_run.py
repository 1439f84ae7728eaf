"""The reader of grpo's own run directories: events placed on the step they happened in, and a
server's failure shown with the telling line of its log."""

from __future__ import annotations

import json

from grpo.tools.doctor import examine, explain
from tests.server_logs import server_log


def test_a_server_failure_is_placed_on_the_step_in_progress_with_its_log_line(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    events = [
        {"time": 1.0, "step": 7, "kind": "server_failed", "message": "sglang-0: the server process exited with status 1",
         "evidence": {"log_tail": ["loading weights", "torch.OutOfMemoryError: CUDA out of memory", "bye"]}},
        {"time": 2.0, "step": 7, "kind": "server_gave_up", "message": "inference server sglang-0 gave up",
         "evidence": {"log_tail": []}},
    ]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    metrics = [{"step": s, "reward/mean": 0.4, "groups/trained": 4, "groups/dropped_invalid": 0} for s in range(1, 7)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    diagnosis, _ = examine(run_dir)
    assert diagnosis.cause == "server_failure" and diagnosis.first_bad_step == 7
    assert diagnosis.evidence[0].line == 1 and "its log: torch.OutOfMemoryError" in diagnosis.evidence[0].text


def test_a_server_lost_before_the_first_step_stops_step_1(tmp_path):
    """STOPPED.json carries step 0 when the server never came up: step 1 is the one that never ran."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "STOPPED.json").write_text(json.dumps({
        "cause": "inference_server: inference server sglang-0 gave up (2 restarts used up): it exited with status 3",
        "step": 0, "last_good_checkpoint": None, "resume_command": "grpo train --config r/config.yaml"}))
    (run_dir / "events.jsonl").write_text("")
    diagnosis, _ = examine(run_dir)
    assert diagnosis.cause == "server_failure" and diagnosis.first_bad_step == 1
    assert diagnosis.evidence[0].file.endswith("STOPPED.json") and "exited with status 3" in diagnosis.evidence[0].text


def write_log(path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def failed_round(step: int, statuses: dict[str, int], retried: bool) -> dict:
    """A rollout_failed event as the collector records it."""
    return {"time": 1.0, "step": step, "kind": "rollout_failed", "message": f"step {step}: ...",
            "evidence": {"samples": sum(statuses.values()), "statuses": statuses, "retried": retried}}


def test_a_run_that_never_logged_a_step_names_the_samples_that_timed_out(tmp_path):
    """Issue 52: the doctor said only "stalled, no step logged" of a run whose 24 samples had timed out."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    write_log(run_dir / "events.jsonl", [
        {"time": 0.5, "step": 0, "kind": "checkpoint", "message": "saved step_000000", "evidence": {}},
        *[failed_round(1, {"timeout": 8}, retried=True) for _ in range(3)],
        failed_round(1, {"timeout": 8}, retried=False)])
    diagnosis, lines = explain(run_dir)
    told = "32 attempt(s) failed (32 timeout): 24 retried, 8 sample(s) still failed after every retry"
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("stalled", 1)
    assert f"step 1's samples failed: {told}" in diagnosis.explanation
    assert diagnosis.evidence[0].file.endswith("events.jsonl") and diagnosis.evidence[0].line == 5
    assert f"FAILED   step 1 (never logged): {told} (their groups dropped)" in lines


def test_rollouts_count_the_recovered_samples_and_the_failures_of_replayed_steps(tmp_path):
    """Issue 52: after a rollback the doctor read the replayed steps only, and said "failed 0, timeout 0"."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    counts = {"rollout/ok": 16, "rollout/truncated": 0, "rollout/failed": 16, "rollout/timeout": 0,
              "rollout/empty": 0, "rollout/unscorable": 0, "rollout/failed_frac": 0.5, "rollout/recovered": 16,
              "rollout/unrecovered": 0, "update/applied": 1}
    write_log(run_dir / "metrics.jsonl", [{"step": 1, **counts}, {"step": 2, **counts, "rollout/timeout": 16,
                                                                      "rollout/failed": 0}])
    write_log(run_dir / "metrics.abandoned.jsonl", [{"step": 1, **counts, "rollout/recovered": 8,
                                                     "rollout/unrecovered": 8}])
    write_log(run_dir / "events.jsonl", [])
    lines = explain(run_dir)[1]
    assert ("ROLLOUTS ok 32, truncated 0, failed 16, timeout 16, empty 0, unscorable 0 (attempts); 32 sample(s) "
            "recovered on a retry, 0 still failed after every retry; failures at steps 1-2") in lines
    assert ("         and in 1 replayed step line(s) (steps 1, metrics.abandoned.jsonl): ok 16, truncated 0, "
            "failed 16, timeout 0, empty 0, unscorable 0 (attempts); 8 sample(s) recovered on a retry, 8 still "
            "failed after every retry") in lines


def test_a_rollback_is_named_with_its_learning_rate_change_in_old_runs_too(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    write_log(run_dir / "metrics.jsonl", [{"step": s, "reward/mean": 0.4} for s in range(1, 4)])
    write_log(run_dir / "events.jsonl", [  # before the event named its factor
        {"time": 1.0, "step": 2, "kind": "rollback", "message": "rolled back to step 0 after nonfinite",
         "evidence": {"checkpoint": "c", "lr_scale": 0.25, "rollbacks": 2}}])
    diagnosis, lines = explain(run_dir)
    said = "rolled back to step 0 after nonfinite: learning rate 0.25 x its schedule from then on"
    assert {(a.step, a.kind, a.detail) for a in diagnosis.timeline} == {(2, "rollback", said)}
    assert f"         rollback at step 2: {said}" in lines


def test_a_server_failure_shows_the_crash_line_of_its_log_tail(tmp_path):
    """Real SGLang's last 20 lines after its scheduler was SIGKILLed: the crash, read as the supervisor reads it."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    event = {"time": 1.0, "step": 3, "kind": "server_failed",
             "message": "sglang-0: the server process was killed by SIGKILL",
             "evidence": {"log_tail": server_log("sglang_scheduler_killed")[-20:]}}
    (run_dir / "events.jsonl").write_text(json.dumps(event) + "\n")
    diagnosis, _ = examine(run_dir)
    assert diagnosis.evidence[0].text.endswith(
        "| its log: Subprocess scheduler_0 (pid=6766) crashed with exit code -9. Triggering SIGQUIT for cleanup...")


def test_a_run_stopped_for_unscorable_rewards_is_a_broken_reward_not_failed_rollouts(tmp_path):
    """Every answer generated (failed_frac 0) and none scorable: the groups were dropped for the reward."""
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    metrics = [{"step": s, "reward/mean": 0.4, "groups/trained": 4, "groups/dropped_invalid": 0,
                "rollout/failed_frac": 0.0} for s in range(1, 4)]
    metrics += [{"step": s, "groups/trained": 0, "groups/dropped_invalid": 4, "rollout/failed_frac": 0.0,
                 "rollout/unscorable": 48, "rollout/unscorable_frac": 1.0, "rollout/reward_errors": 48}
                for s in (4, 5)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    trip = {"time": 2.0, "step": 5, "kind": "trip", "message": "100% of generated answers could not be scored",
            "evidence": {"breaker": "unscorable_rewards", "action": "stop", "unscorable_frac": 1.0}}
    (run_dir / "events.jsonl").write_text(json.dumps(trip) + "\n")
    diagnosis, _ = examine(run_dir)
    assert diagnosis.cause == "reward_broken" and diagnosis.first_bad_step == 4, diagnosis.explanation
    assert "failed_frac" not in " ".join(e.text for e in diagnosis.evidence)
