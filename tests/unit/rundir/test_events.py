"""events.jsonl (grpo.rundir.events): a server's events, recorded from its own threads, fall under the step the
loop has in progress, and trouble is said as a warning."""

import logging
import threading

from grpo.rundir.events import EventLog, ServerEvents, StepInProgress


def test_a_server_event_from_another_thread_is_recorded_under_the_step_in_progress(tmp_path, caplog):
    log, step = EventLog(tmp_path / "events.jsonl"), StepInProgress(2)
    events = ServerEvents(log, step)
    step.set(3)
    watcher = threading.Thread(target=events.record, args=("server_failed", "sglang-0: died"),
                               kwargs={"server": "sglang-0"})
    with caplog.at_level(logging.INFO, logger="grpo.rundir.events"):
        watcher.start()
        watcher.join()
        step.set(4)
        events.record("server_ready", "sglang-0: ready")
    assert [(e["step"], e["kind"], e["evidence"]) for e in log.read()] == [
        (3, "server_failed", {"server": "sglang-0"}), (4, "server_ready", {})]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "sglang-0: died"), (logging.INFO, "sglang-0: ready")]
