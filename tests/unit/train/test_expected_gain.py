"""A quickstart ends by saying what gain its work is known to give over seeds, measured on the machine kind
nearest its own; other runs do not."""

import pytest

from grpo.config import load_config
from grpo.train import expected_gain
from grpo.train.expected_gain import quickstart_expectation

QUICKSTART = load_config("quickstart", ["train.seed=7", "run_dir=/tmp/elsewhere", "model.dtype=float32",
                                        "logging.tensorboard=false"])


@pytest.mark.parametrize("device_type, flags, spread", [
    ("cpu", frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}), expected_gain.XEON_AMX),
    ("cpu", frozenset({"avx2", "avx512f", "avx512_bf16"}), expected_gain.EPYC_9004),
    ("cpu", frozenset({"bf16", "asimd"}), expected_gain.EPYC_9004),  # ARM's BF16: bf16 instructions, no AMX
    ("cpu", frozenset({"avx2", "fma"}), expected_gain.AVX2_EPYC),
    ("cuda", frozenset({"avx2"}), expected_gain.H200),
])
def test_the_quickstarts_work_gets_the_spread_of_the_nearest_machine_kind(device_type, flags, spread):
    said = quickstart_expectation(QUICKSTART, device_type, flags)
    assert said is not None and said.startswith(f"expected: the quickstart gained {spread.mean:+.1f}")
    assert spread.machine in said
    if spread.sd is not None:
        assert f"+- {spread.sd:.1f} points over {spread.runs} seeds" in said
    else:
        assert "in one run" in said
    # the README's reference beside any other kind's
    assert (expected_gain.REFERENCE.machine in said) and said.count("points") == (1 if spread is expected_gain.REFERENCE else 2)


def test_other_work_gets_nothing():
    assert quickstart_expectation(load_config("quickstart", ["train.steps=5"])) is None
    assert quickstart_expectation(load_config("quickstart", ["rollout.max_staleness=2"])) is None
    assert quickstart_expectation(load_config("tiny", [])) is None
