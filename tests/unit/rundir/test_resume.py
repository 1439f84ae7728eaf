"""A resume command that works for the way the run was launched: one process, torchrun (one node or
several), or `grpo train --launcher ray`; the newest start's way wins."""

from __future__ import annotations

import shlex

import pytest

from grpo.rundir.resume import LAUNCH_FILE, LAUNCHER_ENV, RAY_STRATEGY_ENV, record_launch, resume_command

TORCHRUN_ENV = ("LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", LAUNCHER_ENV, RAY_STRATEGY_ENV)


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    for key in TORCHRUN_ENV:
        monkeypatch.delenv(key, raising=False)
    return tmp_path


def command(run_dir, checkpoint=None) -> list[str]:
    return shlex.split(resume_command(run_dir, checkpoint))


def test_one_process_resumes_with_grpo_train(run_dir):
    record_launch(run_dir, world=1)
    assert not (run_dir / LAUNCH_FILE).exists()
    assert command(run_dir, run_dir / "ck") == ["grpo", "train", "--config", f"{run_dir}/config.yaml",
                                                f"resume_from={run_dir}/ck"]


def test_torchrun_on_one_node_and_on_several(run_dir, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    record_launch(run_dir, world=4)
    assert command(run_dir)[:6] == ["torchrun", "--nproc-per-node", "4", "-m", "grpo", "train"]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("MASTER_ADDR", "node0")
    monkeypatch.setenv("MASTER_PORT", "29500")
    record_launch(run_dir, world=16)
    assert command(run_dir)[:12] == ["torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                     "node0:29500", "--nproc-per-node", "8", "-m", "grpo", "train"]


def test_ray_keeps_its_launcher_and_cluster_and_a_later_single_process_start_wins(run_dir, monkeypatch):
    monkeypatch.setenv(LAUNCHER_ENV, "ray:10.0.0.5:6379")
    record_launch(run_dir, world=2)
    assert command(run_dir)[:8] == ["grpo", "train", "--launcher", "ray", "--nproc", "2", "--ray-address",
                                    "10.0.0.5:6379"]
    monkeypatch.setenv(RAY_STRATEGY_ENV, "SPREAD")  # a placement other than PACK is launched as it was
    record_launch(run_dir, world=2)
    assert command(run_dir)[6:11] == ["--ray-address", "10.0.0.5:6379", "--ray-strategy", "SPREAD", "--config"]
    monkeypatch.delenv(RAY_STRATEGY_ENV)
    monkeypatch.setenv(LAUNCHER_ENV, "ray:")  # a local cluster: no address to give
    record_launch(run_dir, world=1)
    assert command(run_dir)[:7] == ["grpo", "train", "--launcher", "ray", "--nproc", "1", "--config"]
    monkeypatch.delenv(LAUNCHER_ENV)
    record_launch(run_dir, world=1)
    assert command(run_dir)[:3] == ["grpo", "train", "--config"]
