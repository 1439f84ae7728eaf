"""What the Ray launcher asks for and gives each rank (no Ray needed)."""

import pytest

from grpo.errors import ConfigError
from grpo.launch.ray import bundles, rank_environment


def test_one_bundle_per_rank_with_a_gpu_each_only_on_cuda():
    assert bundles(2, gpus=False) == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert bundles(1, gpus=True) == [{"GPU": 1.0, "CPU": 1.0}]
    with pytest.raises(ConfigError, match="--nproc must be at least 1"):
        bundles(0, gpus=False)


def test_each_rank_gets_what_torchrun_would_set_and_its_attempt():
    env = rank_environment(1, 2, "10.0.0.5", 29500, attempt=3)
    assert env == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "10.0.0.5",
                   "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "3"}
