"""Past one process: the tiny config under `torchrun` with FSDP2 on gloo (CPU), against one process
(marked `distributed`: several processes each; CI runs them).

Rollouts are the same wherever they are generated (per-sample seeds) and the loss is normalised over
the global batch, so N ranks compute the update one process would, to float rounding.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo.cli import main
from grpo.rundir.files import JsonlLog
from grpo.rundir.resume import resume_command

from .helpers import abandoned_lines, deterministic, metric_lines

pytestmark = pytest.mark.distributed
STEPS = ["train.steps=5", "checkpoint.every_steps=2", "checkpoint.keep_last=5"]
# fp32, gradients summed in another order. AdamW's first steps move a parameter by about lr (1e-3 in
# tiny) however small its gradient, so the few whose gradients are near AdamW's eps (1e-8) turn that
# rounding into up to ~1% of a step; a wrong batch, share or normalisation moves most parameters by ~lr.
TOLERANCE = 2e-5  # any parameter
ROUNDING = 1e-6  # ... and at most 1 in 1,000 of them past this


def elastic_logs(run_dir: Path) -> Path:
    """Where torchrun keeps its per-rank files: beside the run, in the test's folder (by default a
    torchelastic_* folder in /tmp that nothing removes)."""
    return run_dir.parent / f"{run_dir.name}.torchelastic"


def torchrun(run_dir: Path, *overrides: str, nproc: int = 2, max_restarts: int = 0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--max-restarts={max_restarts}",
         "--standalone", f"--log-dir={elastic_logs(run_dir)}", "-m", "grpo", "train", "--config", "tiny",
         f"run_dir={run_dir}", *overrides],
        capture_output=True, text=True, timeout=600,
    )


def one_process(run_dir: Path, *overrides: str) -> None:
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", *overrides]) == 0


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors")


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    diffs = [(a[k].float() - b[k].float()).abs() for k in a]
    assert max(d.max().item() for d in diffs) < TOLERANCE
    past_rounding = sum(int((d > ROUNDING).sum()) for d in diffs)
    assert past_rounding <= sum(d.numel() for d in diffs) / 1000, f"{past_rounding} parameters differ by > {ROUNDING}"


def assert_close_metrics(a: Path, b: Path) -> None:
    la, lb = metric_lines(a), metric_lines(b)
    assert [x["step"] for x in la] == [x["step"] for x in lb]
    for x, y in zip(la, lb):
        x, y = deterministic(x), deterministic(y)
        assert x.keys() == y.keys()
        for key in x:
            if isinstance(x[key], float):
                assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), (x["step"], key)
            else:
                assert x[key] == y[key], (x["step"], key)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("single") / "r"
    one_process(run_dir, *STEPS)
    return run_dir


def test_two_ranks_compute_what_one_process_does(tmp_path, single):
    run_dir = tmp_path / "r"
    result = torchrun(run_dir, *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(weights(single, 5), weights(run_dir, 5))
    assert_close_metrics(single, run_dir)
    policy_files = sorted(p.name for p in (run_dir / "checkpoints" / "step_000005" / "policy").iterdir())
    assert policy_files == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # each rank wrote its shards
    assert json.loads((run_dir / "summary.json").read_text())["ranks"] == 2
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_000005" / "model")
    loaded = {k: v for k, v in model.state_dict().items() if k in weights(single, 5)}
    assert_same_weights(loaded, weights(single, 5))  # the consolidated model loads in plain transformers


def test_a_nan_on_rank_1_only_is_not_applied_by_any_rank_and_both_roll_back(tmp_path):
    fault = ["testing.faults.nan_loss_at_steps=[3]", "guard.nonfinite.action=rollback"]
    one_process(tmp_path / "one", *STEPS, *fault)
    run_dir = tmp_path / "two"
    result = torchrun(run_dir, *STEPS, *fault, "testing.faults.nan_loss_on_rank=1")
    assert result.returncode == 0, result.stderr[-3000:]
    events = JsonlLog(run_dir / "events.jsonl").read()[0]
    assert [e["evidence"]["breaker"] for e in events if e["kind"] == "trip"] == ["nonfinite"]
    (rollback,) = [e for e in events if e["kind"] == "rollback"]
    assert rollback["step"] == 3 and rollback["evidence"]["checkpoint"].endswith("step_000002")
    (line3,) = abandoned_lines(run_dir)  # the rollback ran step 3 again: its NaN line is kept apart
    assert line3["step"] == 3 and line3["update/applied"] == 0 and line3["update/nonfinite"] == 1
    assert [x["step"] for x in metric_lines(run_dir)] == [1, 2, 3, 4, 5]
    # Had either rank applied the NaN step, or rolled back alone, this could not match one process.
    assert_same_weights(weights(tmp_path / "one", 5), weights(run_dir, 5))


def test_a_rank_killed_mid_step_is_restarted_by_the_launcher_and_the_run_ends_as_if_it_had_not(tmp_path, single):
    run_dir = tmp_path / "r"
    result = torchrun(run_dir, *STEPS, "testing.faults.kill_rank_at_step=[1,4]", max_restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run_dir / ".fault-kill-rank1-step4").exists()
    events = JsonlLog(run_dir / "events.jsonl").read()[0]
    restarts = [e for e in events if e["kind"] == "restart"]
    assert len(restarts) == 1 and restarts[0]["message"].endswith("step_000002")  # the last good checkpoint
    assert [x["step"] for x in metric_lines(run_dir)] == [1, 2, 3, 4, 5]  # step 3's line replayed once
    assert_same_weights(weights(single, 5), weights(run_dir, 5))


def test_a_checkpoint_of_two_ranks_resumes_in_one_process_and_back(tmp_path, single):
    two_then_one = tmp_path / "a"
    assert torchrun(two_then_one, *STEPS, "train.steps=3").returncode == 0
    assert resume_command(two_then_one, None).startswith("torchrun --nproc-per-node 2 -m grpo train --config")
    one_process(two_then_one, *STEPS)  # same directory: resumes from step 3, saved by 2 ranks
    assert resume_command(two_then_one, None).startswith("grpo train --config")  # the newest start's way
    assert_same_weights(weights(single, 5), weights(two_then_one, 5))

    one_then_two = tmp_path / "b"
    one_process(one_then_two, *STEPS, "train.steps=3")
    result = torchrun(one_then_two, *STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(weights(single, 5), weights(one_then_two, 5))
    for run_dir in (two_then_one, one_then_two):
        assert [x["step"] for x in metric_lines(run_dir)] == [1, 2, 3, 4, 5]


def test_two_ranks_leave_truncated_completions_out_of_the_loss_as_one_process_does(tmp_path):
    """algo.mask_truncated: each rank's masked rows leave the global normaliser, so the ranks' update is still the
    one process's (the stop strings make a mix of ended and truncated answers at every step)."""
    masking = [*STEPS, "train.steps=2", "algo.mask_truncated=true", "rollout.max_new_tokens=4",
               'rollout.stop=["1","2","3"]']
    one_process(tmp_path / "single", *masking)
    result = torchrun(tmp_path / "ranks", *masking)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = metric_lines(tmp_path / "ranks")
    assert all(0 < line["update/masked_truncated_frac"] < 1 and line["update/applied"] for line in lines)
    assert_same_weights(weights(tmp_path / "single", 2), weights(tmp_path / "ranks", 2))
    assert_close_metrics(tmp_path / "single", tmp_path / "ranks")
