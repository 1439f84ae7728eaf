"""A quickstart ends by saying what gain its work is known to give over seeds; other runs do not."""

from grpo.config import load_config
from grpo.train import expected_gain
from grpo.train.expected_gain import quickstart_expectation


def test_the_quickstarts_work_gets_the_spread_over_seeds():
    said = quickstart_expectation(load_config("quickstart", ["train.seed=7", "run_dir=/tmp/elsewhere",
                                                             "model.dtype=float32", "logging.tensorboard=false"]))
    assert said is not None
    assert f"over {expected_gain.QUICKSTART_SEEDS} seeds" in said
    assert f"{expected_gain.QUICKSTART_GAIN_MEAN:+.1f} +- {expected_gain.QUICKSTART_GAIN_SD:.1f} points" in said


def test_other_work_gets_nothing():
    assert quickstart_expectation(load_config("quickstart", ["train.steps=5"])) is None
    assert quickstart_expectation(load_config("quickstart", ["rollout.max_staleness=2"])) is None
    assert quickstart_expectation(load_config("tiny", [])) is None

