"""The reader of grpo's own run directories: events placed on the step they happened in, and a
server's failure shown with the telling line of its log."""

from __future__ import annotations

import json

from grpo.tools.doctor import examine


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
