"""Anomalies the timeline finds in any source's metrics, each at its first step."""

from __future__ import annotations

from grpo.tools.doctor import timeline
from grpo.tools.doctor.record import RunRecord


def record(**series: list[float]) -> RunRecord:
    run = RunRecord("verl", "x.log")
    for name, values in series.items():
        for step, value in enumerate(values, 1):
            run.put(step, name, value)
    return run


def kinds(run: RunRecord) -> dict[str, int]:
    return {a.kind: a.step for a in timeline.anomalies(run)}


def test_a_healthy_noisy_run_has_no_anomaly():
    run = record(reward=[0.3 + 0.05 * (i % 3) for i in range(40)], loss=[0.01 * (-1) ** i for i in range(40)],
                 entropy=[0.6 + 0.02 * (i % 2) for i in range(40)], grad_norm=[1.0 + 0.1 * (i % 4) for i in range(40)],
                 step_s=[30.0 + i % 3 for i in range(40)], memory_gib=[60.0 + 0.1 * (i % 2) for i in range(40)])
    assert timeline.anomalies(run) == []


def test_memory_that_only_grows():
    run = record(memory_gib=[40.0 + 0.5 * i for i in range(30)])
    assert "memory_growth" in kinds(run)


def test_a_step_time_jump():
    run = record(step_s=[30.0] * 15 + [400.0] + [30.0] * 5)
    assert kinds(run)["step_time_jump"] == 16


def test_zero_reward_needs_a_streak_not_one_unlucky_step():
    assert "zero_reward" not in kinds(record(reward=[0.3, 0.0, 0.4, 0.3, 0.0, 0.5, 0.3]))
    assert kinds(record(reward=[0.3, 0.4, 0.0, 0.0, 0.0, 0.0]))["zero_reward"] == 3


def test_a_step_count_that_goes_back_is_a_restart(tmp_path):
    from grpo.tools.doctor import verl

    log = tmp_path / "train.log"
    log.write_text("\n".join(f"step:{s} - critic/score/mean:0.5" for s in (1, 2, 3, 4, 3, 4, 5)) + "\n")
    run = verl.read_record(log)
    assert kinds(run)["restart"] == 3 and sorted(run.metrics) == [1, 2, 3, 4, 5]
