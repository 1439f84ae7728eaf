"""Whole runs on a supervised server: SGLang's adapter against the stand-in server (a real process
that speaks SGLang's API and really generates), killed, hung, fed stale weights, answering garbage,
dying on every start, and attached rather than started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.errors import EXIT_STOPPED, ConfigError, RunStopped
from grpo.hooks import StepHooks
from grpo.policy.optim import lr_at
from grpo.rollout.server.weights import default_weights_dir
from grpo.rundir.files import JsonlLog
from grpo.tools.doctor import diagnose
from grpo.train.loop import TrainingLoop

from .helpers import (
    ServerKilledDuringEvaluations,
    assert_killed_in_the_sync_after_step_2,
    disturb_each_evaluation,
    make_loop,
    metric_lines,
    start_attached_standin,
)

STANDIN = Path(__file__).resolve().parents[1] / "standins" / "sglang_server.py"
STANDIN_COMMAND = f"{{python}} {STANDIN} --model-path {{model}} --host {{host}} --port {{port}} --dtype {{dtype}} --seed {{seed}}"
SGLANG = ["rollout.engine=sglang", f"rollout.server.command={STANDIN_COMMAND}", "rollout.server.restart_backoff_s=0.2"]


def events(run_dir: Path) -> list[dict]:
    return JsonlLog(run_dir / "events.jsonl").read()[0]


def of_kind(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in events(run_dir) if e["kind"] == kind]


def assert_dead(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"server process {pid} is still running after the run")


def run(run_dir: Path, *overrides: str, hooks: tuple[StepHooks, ...] = ()) -> TrainingLoop:
    loop = make_loop(load_config("tiny", [f"run_dir={run_dir}", *SGLANG, *overrides]), *hooks)
    loop.train()
    return loop


def test_every_step_syncs_and_verifies_the_weights_and_the_server_goes_with_the_run(tmp_path):
    run_dir = tmp_path / "r"
    loop = run(run_dir, "train.steps=4")
    lines = metric_lines(run_dir)
    assert [line["policy/version"] for line in lines] == [1, 2, 3, 4]
    for line in lines:
        assert line["sync/probe_diff"] <= line["sync/tolerance"] == 2e-3  # fp32
        assert line["rollout/logprob_mismatch"] < 1e-4  # the trainer recomputed; the sampler agreed
        assert line["rollout/sources"] == ["sglang-0#1"]
    status = json.loads((run_dir / "servers" / "status.json").read_text())
    assert status["servers"][0]["state"] == "stopped" and status["trainer_policy_version"] == 4
    assert [e["kind"] for e in events(run_dir)][:4] == ["checkpoint", "server_start", "server_seeds", "server_ready"]
    # The stand-in honours a request's seed (torch.Generator per request): the check, made once, says so.
    assert status["servers"][0]["seeds"]["reproducible"] is True
    assert sum(e["kind"] == "server_seeds" for e in events(run_dir)) == 1
    assert_dead(status["servers"][0]["pid"])
    assert not loop.engine.model_dir.exists()  # the weights in /dev/shm are given back


def test_sigkill_mid_rollout_is_detected_in_that_step_restarted_and_nothing_of_it_is_trained_on(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=4", "testing.faults.kill_server_at_steps=[2]")
    injected = of_kind(run_dir, "fault_injected")
    failed = of_kind(run_dir, "server_failed")
    assert [e["step"] for e in injected] == [2]  # events carry the step in progress, as its trips do
    assert len(failed) == 1 and failed[0]["evidence"]["exit"] == "killed by SIGKILL"
    assert failed[0]["evidence"]["incarnation"] == 1 and failed[0]["step"] == 2
    assert [e["evidence"]["incarnation"] for e in of_kind(run_dir, "server_start")] == [1, 2]
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert lines[2]["rollout/failed"] > 0 and lines[2]["rollout/retries"] > 0
    # The proof: every sample any update used came from a live incarnation, never from the dead #1
    # after it died (step 1 trained before the kill, on #1; steps 2-4 on #2 only).
    assert lines[1]["rollout/sources"] == ["sglang-0#1"]
    assert all(lines[s]["rollout/sources"] == ["sglang-0#2"] for s in (2, 3, 4))
    assert all(lines[s]["update/applied"] == 1 for s in (2, 3, 4))
    assert sorted(lines) == [1, 2, 3, 4]
    doctor = "\n".join(diagnose(run_dir))  # the doctor's server section tells the same story
    assert "SERVERS  sglang-0: 2 start(s) (incarnations 1-2)" in doctor and "1 failure(s), 1 restart(s)" in doctor
    assert "step 2: sglang-0#1 failed: the server process was killed by SIGKILL" in doctor


def test_restarts_run_out_the_stop_saves_the_last_trained_step_and_the_same_command_resumes_from_it(tmp_path):
    """No periodic checkpoints: the guard's stop saves before it reports, as a stop signal does."""
    run_dir, no_saves = tmp_path / "r", ["train.steps=5", "checkpoint.every_steps=0", "checkpoint.every_minutes=0"]
    with pytest.raises(RunStopped):
        run(run_dir, *no_saves, "testing.faults.kill_server_at_steps=[4]", "rollout.server.max_restarts=0")
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == ["step_000000", "step_000003"]
    stopped = json.loads((run_dir / "STOPPED.json").read_text())
    assert stopped["last_good_checkpoint"].endswith("step_000003"), stopped
    run(run_dir, *no_saves)
    assert [e["step"] for e in of_kind(run_dir, "restart")] == [3]
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2, 3, 4, 5]


def test_sigkill_during_a_weight_sync_restarts_the_server_on_the_new_weights_before_it_serves(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=3", "testing.faults.kill_server_in_sync_at_steps=[2]")
    assert_killed_in_the_sync_after_step_2(run_dir, "sglang-0")


def test_a_hung_server_is_found_by_its_timeout_and_restarted(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=3", "testing.faults.hang_server_at_steps=[2]", "rollout.server.request_timeout_s=3",
        "rollout.server.health_timeout_s=2")
    (failed,) = of_kind(run_dir, "server_failed")
    assert failed["message"].startswith("sglang-0: hung: no one-token generation in 2s")
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert lines[2]["rollout/timeout"] > 0 and lines[2]["rollout/sources"] == ["sglang-0#2"]
    assert sorted(lines) == [1, 2, 3]


def test_a_sync_during_a_restarted_servers_own_warm_up_waits_for_it_and_costs_no_restart(tmp_path):
    """SGLang refuses a cache flush while its warm-up request is pending, right after a start: that is
    waited out, not read as weights that did not verify (which spent two restarts on one kill)."""
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=3", "testing.faults.kill_server_in_sync_at_steps=[2]",
        "rollout.server.extra_args=[--warmup-s,4]")
    assert [e["evidence"]["incarnation"] for e in of_kind(run_dir, "server_start")] == [1, 2]
    assert not of_kind(run_dir, "weight_sync_mismatch") and len(of_kind(run_dir, "server_failed")) == 1
    assert sorted(line["step"] for line in metric_lines(run_dir)) == [1, 2, 3]


def test_a_stopped_server_is_found_in_seconds_not_at_its_request_timeout(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=3", "testing.faults.hang_server_at_steps=[2]", "rollout.server.stall_s=2")
    (failed,) = of_kind(run_dir, "server_failed")
    assert failed["message"].startswith("sglang-0: hung: its processes have been stopped (SIGSTOP) for 2."), failed
    (hung,) = [e for e in of_kind(run_dir, "fault_injected") if e["message"].startswith("hang_server")]
    assert failed["time"] - hung["time"] < 10  # the request timeout is 300 s
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert lines[2]["rollout/sources"] == ["sglang-0#2"] and sorted(lines) == [1, 2, 3]


def test_a_server_killed_then_hung_on_the_next_step_every_sample_recovered_rolls_nothing_back(tmp_path):
    """Issue 52: a scheduler killed at step 3 and a hang at step 4, every failed sample retried and answered by
    the restarted server; the failed_rollouts breaker counted the failed attempts (half of them, two steps in
    a row), rolled back to step 0 and halved the learning rate. What was trained on lost nothing."""
    run_dir = tmp_path / "r"
    loop = run(run_dir, "train.steps=5", "testing.faults.kill_server_at_steps=[3]",
               "testing.faults.hang_server_at_steps=[4]", "rollout.server.request_timeout_s=3",
               "rollout.server.health_timeout_s=2")
    assert [e["step"] for e in of_kind(run_dir, "server_failed")] == [3, 4]
    assert not of_kind(run_dir, "trip") and not of_kind(run_dir, "rollback")
    lines = metric_lines(run_dir)
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5]  # each step once: nothing replayed
    assert not (run_dir / "metrics.abandoned.jsonl").exists()
    samples = loop.cfg.rollout.problems_per_step * loop.cfg.rollout.samples_per_problem
    for line in lines[2:4]:
        assert line["rollout/failed_frac"] >= 0.5  # what the breaker used to judge, and trip on
        assert (line["rollout/recovered"], line["rollout/unrecovered"], line["rollout/unrecovered_frac"]) == (
            samples, 0, 0.0)
        assert line["groups/trained"] == loop.cfg.rollout.problems_per_step and line["update/applied"] == 1
    assert lines[3]["rollout/timeout"] > 0
    assert loop.state.lr_scale == 1.0 and [line["actor/lr"] for line in lines] == [
        lr_at(step - 1, 5, loop.cfg.actor) for step in range(1, 6)]
    # The retries stay visible: an event for each round of failed samples, each retried.
    retried = of_kind(run_dir, "rollout_failed")
    assert {e["step"] for e in retried} == {3, 4} and all(e["evidence"]["retried"] for e in retried)

    doctor = diagnose(run_dir)
    assert doctor[1] == "DIAGNOSIS healthy"
    assert "(first: server failure (sglang-0: the server process was killed by SIGKILL) at step 3)" in doctor[2]
    assert doctor[2].endswith("; failed samples retried at step(s) 3, 4")
    (rollouts,) = [line for line in doctor if line.startswith("ROLLOUTS ")]
    assert f"{2 * samples} sample(s) recovered on a retry, 0 still failed after every retry" in rollouts
    failed = doctor[doctor.index(next(line for line in doctor if line.startswith("FAILED   "))):][:2]
    assert failed[0].startswith("FAILED   step 3: ") and failed[1].startswith("         step 4: ")
    assert "timeout" in failed[1] and all(line.endswith("none left failed") for line in failed)


def test_skipped_sync_is_caught_by_the_probe_and_repaired_before_the_next_rollout(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=3", "testing.faults.skip_weight_sync_at_steps=[1]")
    (injected,) = of_kind(run_dir, "fault_injected")
    assert injected["step"] == 1 and injected["message"].startswith("skip_weight_sync: a skip reload")
    (mismatch,) = of_kind(run_dir, "weight_sync_mismatch")  # the engine asked for a full reload; the probe saw none
    assert mismatch["evidence"]["prompt_diff"] > 2e-3
    (repaired,) = of_kind(run_dir, "weight_sync_repaired")
    assert len(repaired["evidence"]["attempts"]) == 2
    assert not of_kind(run_dir, "server_failed")  # a second reload fixed it: no restart needed


def standin_fault(run_dir: Path, **knobs) -> None:
    status = json.loads((run_dir / "servers" / "status.json").read_text())
    request = urllib.request.Request(status["servers"][0]["url"] + "/standin/fault", data=json.dumps(knobs).encode(),
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def test_a_stale_tied_head_after_reload_is_caught_and_repaired_by_a_restart(tmp_path):
    """The stand-in's stale_head reload loads everything but the tied head, and says it succeeded."""
    run_dir = tmp_path / "r"

    class StaleHeadAfterStep2sUpdate(StepHooks):  # so the sync that follows it reloads a stale head
        @contextmanager
        def around_update(self, step: int) -> Iterator[None]:
            yield
            if step == 2:
                standin_fault(run_dir, stale_head=True)

    run(run_dir, "train.steps=3", hooks=(StaleHeadAfterStep2sUpdate(),))
    mismatches = of_kind(run_dir, "weight_sync_mismatch")
    assert len(mismatches) == 2 and all(m["evidence"]["prompt_diff"] > 2e-3 for m in mismatches)
    (repaired,) = of_kind(run_dir, "weight_sync_repaired")
    assert repaired["evidence"]["attempts"][-1]["mode"] == "restart"
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert lines[2]["rollout/sources"] == ["sglang-0#1"] and lines[3]["rollout/sources"] == ["sglang-0#2"]
    assert all(line["sync/probe_diff"] <= 2e-3 for line in lines.values())  # what was used was verified


def test_garbage_answers_fail_samples_and_are_never_scored(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=2", "testing.faults.garbage_server_at_steps=[1]")
    line = metric_lines(run_dir)[0]
    assert line["rollout/failed"] == 16 and line["rollout/retries"] == 16 and line["groups/trained"] == 4


def test_real_garbage_from_the_server_is_a_failed_sample(tmp_path):
    from grpo.rollout.engines import SampleStatus, SamplingParams

    loop = make_loop(load_config("tiny", [f"run_dir={tmp_path / 'r'}", *SGLANG]))
    try:
        loop.engine.start(loop.policy)
        for mode in ("json", "shape"):
            standin_fault(tmp_path / "r", garbage=mode)
            (completion,) = loop.engine.generate([[5, 6, 7]], SamplingParams(4))
            assert completion.status == SampleStatus.FAILED and "garbage" in completion.error
        standin_fault(tmp_path / "r", garbage=None)
        (completion,) = loop.engine.generate([[5, 6, 7]], SamplingParams(4))
        assert completion.status.trainable
    finally:
        loop.close()


def test_a_server_that_dies_on_every_start_stops_the_run_with_a_diagnosis(tmp_path):
    run_dir = tmp_path / "r"
    crash = f"{sys.executable} -c print('torch.OutOfMemoryError:_CUDA_out_of_memory');exit(3)"
    result = subprocess.run([sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}",
                             "rollout.engine=sglang", f"rollout.server.command={crash}",
                             "rollout.server.max_restarts=2", "rollout.server.restart_backoff_s=0.1"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == EXIT_STOPPED
    # the same exit and error line twice: no third start, and the cause is the server's own line
    assert ("inference server sglang-0 gave up (it failed the same way twice): it exited with status 3; the server "
            'said: "torch.OutOfMemoryError:_CUDA_out_of_memory": lower rollout.server.memory_fraction') in result.stderr
    assert len(of_kind(run_dir, "server_start")) == 2
    stop = json.loads((run_dir / "STOPPED.json").read_text())
    assert stop["cause"].startswith("inference_server:")
    assert any("CUDA_out_of_memory" in line for line in stop["evidence"]["log_tail"])
    assert stop["last_good_checkpoint"].endswith("step_000000")
    assert (run_dir / "checkpoints" / "step_000000" / "meta.json").is_file()
    assert "stopped by the guard at step 0: inference_server" in "\n".join(diagnose(run_dir))


@pytest.fixture
def standin(tmp_path):
    """A stand-in server started by the test, as a user would run their own."""
    proc, url = start_attached_standin(tmp_path, "standin")
    yield proc, url
    proc.kill()
    proc.wait()


def test_an_attached_server_is_used_and_when_it_dies_the_run_stops_saying_grpo_cannot_restart_it(tmp_path, standin):
    proc, url = standin
    run_dir = tmp_path / "r"
    class KillBeforeStep3(StepHooks):
        def step_start(self, step: int) -> None:
            if step == 3:
                proc.send_signal(signal.SIGKILL)
                proc.wait()

    loop = make_loop(load_config("tiny", [
        f"run_dir={run_dir}", "rollout.engine=sglang", f"rollout.server.urls=[{url}]", "train.steps=4",
        "rollout.server.max_restarts=1", "rollout.server.startup_timeout_s=2", "rollout.server.restart_backoff_s=0.1",
    ]), KillBeforeStep3())
    from grpo.errors import RunStopped

    with pytest.raises(RunStopped, match="grpo cannot restart a server it did not start"):
        loop.train()
    starts = of_kind(run_dir, "server_start")
    assert starts[0]["message"].endswith("(attached)")
    assert [line["step"] for line in metric_lines(run_dir)] == [1, 2]


def test_a_server_killed_during_both_evaluations_changes_no_answer(tmp_path, monkeypatch):
    """Each evaluation's server is SIGKILLed as its requests go out: the failed answers are retried on a
    restarted, verified server, never scored, and every answer equals a clean evaluation's."""
    hooks, compared = disturb_each_evaluation(monkeypatch)
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=2", "eval.before_training=true", "eval.after_training=true", hooks=(hooks,))
    assert len(compared) == 2
    for answers, clean_answers, result, clean in compared:
        assert [a["completion"] for a in answers] == [a["completion"] for a in clean_answers]
        assert result["accuracy"] == clean["accuracy"] and result["retried"] > 0 == clean["retried"]
    failed = of_kind(run_dir, "server_failed")
    assert [f["evidence"]["exit"] for f in failed] == ["killed by SIGKILL"] * 2
    assert [(e["label"], e["accuracy"]) for e in JsonlLog(run_dir / "eval.jsonl").read()[0]] == [
        ("before", compared[0][3]["accuracy"]), ("after", compared[1][3]["accuracy"])]
    # every start's weights (the first and each restart's) were verified before it answered, and an event says so
    assert [e["evidence"]["incarnation"] for e in of_kind(run_dir, "weight_sync_verified")] == [1, 2, 3]


def test_an_evaluation_that_cannot_complete_is_recorded_as_failed_not_as_an_accuracy(tmp_path, monkeypatch):
    from grpo.errors import RunStopped
    from grpo.evaluate import evaluate

    def garbled(engine, *args, **kwargs):
        standin_fault(run_dir, garbage="json")  # every answer garbled, however often it is retried
        return evaluate(engine, *args, **kwargs)

    monkeypatch.setattr("grpo.train.evaluation.evaluate", garbled)
    run_dir = tmp_path / "r"
    with pytest.raises(RunStopped, match=r"held-out evaluation \(before\) failed: (\d+) of \1 answers still failed"):
        run(run_dir, "train.steps=2", "eval.before_training=true")
    (line,) = JsonlLog(run_dir / "eval.jsonl").read()[0]
    assert line["status"] == "failed" and line["label"] == "before" and "accuracy" not in line
    stop = json.loads((run_dir / "STOPPED.json").read_text())
    assert stop["cause"].startswith("evaluation: held-out evaluation (before) failed")
    n = stop["evidence"]["answers"]
    assert stop["evidence"]["failed"] == n and stop["evidence"]["retried"] == 2 * n  # two retries each
    assert not (run_dir / "summary.json").exists() and not (run_dir / "metrics.jsonl").exists()  # no step ran
    (evaluations,) = [line for line in diagnose(run_dir) if line.startswith("EVAL")]
    assert "(before): FAILED" in evaluations and "%" not in evaluations


def test_a_resumed_run_numbers_its_server_incarnations_on(tmp_path):
    run_dir = tmp_path / "r"
    run(run_dir, "train.steps=2")
    run(run_dir, "train.steps=3")
    assert [e["evidence"]["incarnation"] for e in of_kind(run_dir, "server_start")] == [1, 2]
    assert [line["rollout/sources"] for line in metric_lines(run_dir)] == [["sglang-0#1"]] * 2 + [["sglang-0#2"]]


def test_the_same_command_on_a_finished_run_starts_no_server_and_reports_its_evaluations(tmp_path):
    run_dir = tmp_path / "r"
    first = run(run_dir, "train.steps=2", "eval.after_training=true")
    again = run(run_dir, "train.steps=2", "eval.after_training=true")
    assert [e["evidence"]["incarnation"] for e in of_kind(run_dir, "server_start")] == [1]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["after"]["accuracy"] == first.state.score
    assert again.step == 2 and [line["step"] for line in metric_lines(run_dir)] == [1, 2]


@pytest.mark.parametrize("answer, engine", [("nothing listening", "sglang"), ("a plain HTTP server", "vllm")])
def test_an_attached_url_that_is_not_a_server_is_refused_at_start_in_one_line(tmp_path, answer, engine):
    import threading
    import time
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    httpd = HTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)  # answers POST with 501 and a page of HTML
    port = httpd.server_address[1]
    if answer == "nothing listening":
        httpd.server_close()
    else:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    overrides = [f"run_dir={tmp_path / 'r'}", f"rollout.engine={engine}",
                 f"rollout.server.urls=[http://127.0.0.1:{port}]"]
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError):
            make_loop(load_config("tiny", overrides))
        in_process = time.monotonic() - started  # the check, with the tiny model built before it
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "grpo", "train", "--config", "tiny", *overrides],
                                capture_output=True, text=True, timeout=60)
        seconds = time.monotonic() - started  # mostly Python importing torch: 5 s on 2 idle cores, 10+ on busy ones
    finally:
        if answer != "nothing listening":
            httpd.shutdown()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and len(lines[0]) < 400, result.stderr
    assert lines[0].startswith("config error: rollout.server.urls: ")
    if answer == "nothing listening":
        assert f"nothing answers at http://127.0.0.1:{port}" in lines[0] and "Connection refused" in lines[0]
    else:
        assert f"http://127.0.0.1:{port} does not answer as a vllm server" in lines[0] and "HTTP 404" in lines[0]
    assert in_process < 3 and seconds < 30
    assert not (tmp_path / "r" / "checkpoints").exists()  # refused before any work
    assert not default_weights_dir(tmp_path / "r", None).parent.exists()  # nothing left in /dev/shm either


def test_a_server_given_up_during_the_evaluation_after_training_stops_the_run_recording_it_failed(tmp_path,
                                                                                                  monkeypatch):
    from grpo.errors import RunStopped
    from grpo.evaluate import evaluate

    hooks = ServerKilledDuringEvaluations()

    def killed(engine, *args, **kwargs):
        with hooks.server.during({"kill_server"}):
            return evaluate(engine, *args, **kwargs)

    monkeypatch.setattr("grpo.train.evaluation.evaluate", killed)
    run_dir = tmp_path / "r"
    with pytest.raises(RunStopped, match=r"held-out evaluation \(after\) failed: inference server sglang-0 gave up"):
        run(run_dir, "train.steps=2", "eval.after_training=true", "rollout.server.max_restarts=0", hooks=(hooks,))
    (line,) = JsonlLog(run_dir / "eval.jsonl").read()[0]
    assert line["status"] == "failed" and line["label"] == "after" and "accuracy" not in line
    stop = json.loads((run_dir / "STOPPED.json").read_text())
    assert stop["cause"].startswith("inference_server: held-out evaluation (after) failed")
    assert stop["last_good_checkpoint"].endswith("step_000002")  # training itself is saved; resuming evaluates again
