"""Servers placed by Ray (`grpo train --launcher ray` with rollout.server.replicas=2 of the SGLang
stand-in): each in a Ray actor in its own bundle, the run ending with one process's parameters on one
server; a server's actor SIGKILLed mid-rollout, recorded, restarted in its bundle and verified before
it serves again; and a lost rank 0 taking its server actors and their processes with it (marked
`distributed`, this last one also `long`; needs `pip install 'grpo[ray]'`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpo.tools.doctor import diagnose
from tests.processes import session

from .helpers import metric_lines
from .test_distributed import assert_same_weights, one_process, weights
from .test_ray import ray_launch
from .test_server_engine import SGLANG, of_kind

pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")]

FLEET = [*SGLANG, "rollout.server.replicas=2", "checkpoint.keep_last=10"]
STEPS = 30


@pytest.fixture(scope="module")
def one_server(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("one") / "r"
    one_process(run_dir, *SGLANG, "train.steps=3", "checkpoint.keep_last=10")
    return run_dir


# one rank (nproc=1) is long: two ranks make the same servers and the same comparison, in CI
@pytest.mark.parametrize("nproc", [pytest.param(1, marks=pytest.mark.long), 2])
def test_two_servers_as_ray_actors_end_with_the_parameters_of_one_server_in_one_process(tmp_path, one_server, nproc):
    run_dir = tmp_path / "r"
    result = ray_launch(run_dir, *FLEET, "train.steps=3", nproc=nproc)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(weights(one_server, 3), weights(run_dir, 3))
    starts = {e["evidence"]["server"]: e["evidence"] for e in of_kind(run_dir, "server_start")}
    # each server in its own bundle, after the ranks', in an actor of its own (not a trainer's process)
    assert sorted((name, s["bundle"]) for name, s in starts.items()) == [("sglang-0", nproc), ("sglang-1", nproc + 1)]
    assert starts["sglang-0"]["actor_pid"] != starts["sglang-1"]["actor_pid"]
    assert all(s["url"] == f"http://{s['node']}:{s['url'].rsplit(':', 1)[1]}" for s in starts.values())
    lines = metric_lines(run_dir)
    assert all(line["rollout/sources"] == ["sglang-0#1", "sglang-1#1"] for line in lines)
    assert all(line["sync/probe_diff"] <= line["sync/tolerance"] for line in lines)


def test_a_killed_server_actor_is_recorded_restarted_in_its_bundle_and_verified_before_it_serves(tmp_path):
    run_dir = tmp_path / "r"
    # A step takes about a second here and a stand-in's start about 11 s: in 30 steps it is back (at step 15 here).
    result = ray_launch(run_dir, *FLEET, f"train.steps={STEPS}", "testing.faults.kill_server_actor_at_steps=[2]",
                        nproc=1)
    assert result.returncode == 0, result.stderr[-3000:]
    (lost,) = of_kind(run_dir, "server_actor_lost")
    first, again = [e["evidence"] for e in of_kind(run_dir, "server_start") if e["evidence"]["server"] == "sglang-0"]
    assert lost["step"] == 2 and lost["evidence"]["server"] == "sglang-0" and lost["evidence"]["bundle"] == 1
    assert lost["evidence"]["actor_pid"] == first["actor_pid"] and lost["evidence"]["node"] == first["node"]
    (failed,) = of_kind(run_dir, "server_failed")
    assert failed["evidence"]["exit"].startswith("was lost with its Ray actor")
    # restarted as a new actor in the same bundle; sglang-1 never restarted
    assert (again["incarnation"], again["bundle"]) == (2, 1) and again["actor_pid"] != first["actor_pid"]
    assert [e["evidence"]["server"] for e in of_kind(run_dir, "server_start")].count("sglang-1") == 1

    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert sorted(lines) == list(range(1, STEPS + 1)) and all(line["update/applied"] == 1 for line in lines.values())
    # only sglang-0's share of step 2 failed (round robin over the two), and was retried on sglang-1
    assert 0 < lines[2]["rollout/failed"] <= 8 and lines[2]["rollout/retries"] == lines[2]["rollout/failed"]
    assert [s for s in lines if lines[s]["rollout/failed"]] == [2]
    # nothing of the dead incarnation was trained on from the step it died
    assert all("sglang-0#1" not in lines[s]["rollout/sources"] for s in range(2, STEPS + 1))
    # it served again only after its weights were verified
    verified = [e for e in of_kind(run_dir, "weight_sync_verified")
                if (e["evidence"]["server"], e["evidence"]["incarnation"]) == ("sglang-0", 2)]
    back = [s for s in range(2, STEPS + 1) if "sglang-0#2" in lines[s]["rollout/sources"]]
    assert verified and back and verified[0]["step"] <= back[0], (verified, back)
    recovery = next(line for line in diagnose(run_dir) if line.startswith("RECOVERY"))
    assert "1 server actor(s) lost" in recovery


@pytest.mark.long  # two groups of two servers (49 s): CI restarts a lost rank's group in test_ray.py and a
# lost server actor above
def test_a_lost_rank_takes_its_server_actors_and_their_processes_with_it_and_the_new_group_starts_them_again(tmp_path):
    run_dir = tmp_path / "r"
    result = ray_launch(run_dir, *FLEET, "train.steps=4", "checkpoint.every_steps=2",
                        "testing.faults.kill_rank_at_step=[0,3]", nproc=1, max_restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [e["kind"] for e in of_kind(run_dir, "rank_lost") + of_kind(run_dir, "group_restart")] == \
        ["rank_lost", "group_restart"]
    starts = [(e["evidence"]["server"], e["evidence"]["incarnation"], e["evidence"]["bundle"], e["evidence"]["pid"])
              for e in of_kind(run_dir, "server_start")]
    assert sorted(s[:3] for s in starts) == [("sglang-0", 1, 1), ("sglang-0", 2, 1), ("sglang-1", 1, 2),
                                             ("sglang-1", 2, 2)]
    for name, incarnation, _, reaper in starts:
        if incarnation == 1:  # the first group's servers ended with their actors: nothing of them runs on
            assert not session(reaper), (name, session(reaper))
            assert "is gone: ended the server's session" in (run_dir / "servers" / f"{name}.log").read_text()
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert lines[3]["rollout/sources"] == lines[4]["rollout/sources"] == ["sglang-0#2", "sglang-1#2"]
