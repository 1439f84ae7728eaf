"""What the Ray launcher asks for and gives each rank and server (no Ray needed)."""

import pytest

from grpo.config import load_config
from grpo.errors import ConfigError
from grpo.launch.ray import bundles, check_server_nodes, placed_servers, rank_environment


def test_one_bundle_per_rank_with_a_gpu_each_only_on_cuda():
    assert bundles(2, gpus=False) == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert bundles(1, gpus=True) == [{"GPU": 1.0, "CPU": 1.0}]
    with pytest.raises(ConfigError, match="--nproc must be at least 1"):
        bundles(0, gpus=False)


def test_each_rank_gets_what_torchrun_would_set_and_its_attempt():
    env = rank_environment(1, 2, "10.0.0.5", 29500, attempt=3)
    assert env == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "10.0.0.5",
                   "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "3"}


def test_servers_get_bundles_of_their_own_after_the_ranks_and_rank_0_is_told_which():
    assert bundles(2, gpus=True, servers=2) == [{"GPU": 1.0, "CPU": 1.0}] * 4
    assert bundles(1, gpus=False, servers=2) == [{"CPU": 1.0}] * 3
    env = rank_environment(0, 1, "10.0.0.5", 29500, attempt=0, server_bundles=[1, 2], gpus=False)
    assert env["GRPO_RAY_SERVER_BUNDLES"] == "1,2" and env["GRPO_RAY_SERVER_GPUS"] == "0"
    assert "GRPO_RAY_SERVER_BUNDLES" not in rank_environment(0, 1, "10.0.0.5", 29500, attempt=0)


def test_only_servers_grpo_starts_are_placed():
    assert placed_servers(load_config("tiny", ["rollout.engine=sglang", "rollout.server.replicas=3"])) == 3
    assert placed_servers(load_config("tiny", ["rollout.engine=sglang", "rollout.server.urls=[http://a:1]"])) == 0
    assert placed_servers(load_config("tiny", [])) == 0  # embedded


def test_servers_on_another_node_need_a_weights_dir_every_node_sees():
    check_server_nodes({0: "a", 1: "b", 2: "a"}, nproc=2, weights_dir=None)  # the server is on rank 0's node
    check_server_nodes({0: "a", 1: "a", 2: "b"}, nproc=2, weights_dir="/shared/w")
    with pytest.raises(ConfigError, match=r"server bundle\(s\) \[2\] on another node .* rollout.server.weights_dir"):
        check_server_nodes({0: "a", 1: "a", 2: "b"}, nproc=2, weights_dir=None)
