"""What the quickstart is known to learn, said after a run that did the quickstart's work.

One run's gain cannot tell a working setup from a broken one: the same work moves by several points
from seed to seed, and CPUs round differently. `bench/learning.py` measured the spread over seeds
(bench/RESULTS.md, "Learning over seeds"); a quickstart ends by saying it beside its own gain.
"""

from __future__ import annotations

from typing import Any

from grpo.config import RunConfig, load_config, to_dict

# bench/learning.py, synchronous, 25 steps, rollouts of 32 new tokens (the preset's since 2026-11-27; evaluations
# 40): held-out greedy accuracy gain on 128 problems, in points. Seeds 0-4 gave +56.2, +51.6, +59.4, +54.7, +55.5
# (20.3% before each), bench/RESULTS.md "The quickstart under 3 minutes on the EPYC 9004" (2026-11-27).
QUICKSTART_GAIN_MEAN = 55.5
QUICKSTART_GAIN_SD = 2.8
QUICKSTART_SEEDS = 5
QUICKSTART_MACHINE = "AMD EPYC 9004, family 25 model 17, bf16, 2 cores"
# With rollouts of 40 new tokens, before: bench/RESULTS.md "Learning over seeds" (2026-11-25, the AVX2 EPYC:
# +59.4, +57.0, +59.4, +56.2, +62.5), "Learning over seeds on the EPYC 9004" (2026-11-26) and "The quickstart's
# minutes on the EPYC 9004" (2026-11-27: bf16 seeds 0-4 +61.7, +38.3, +60.2, +53.9, +45.3). An Intel Xeon with
# AMX (family 6 model 167), bf16, 32 new tokens, seeds 0-4: +39.8, +40.6, +57.0, +57.8, +53.9 (19.5% before each),
# "An Intel Xeon with AMX, and a lent NVIDIA H200" (2026-11-28).
OTHER_MACHINE = ("+49.8 +- 8.9 over 5 seeds on an Intel Xeon with AMX in bf16; earlier, with 40-token rollouts: "
                 "+58.9 +- 2.4 over 5 on an AVX2 AMD EPYC in float32, +51.9 +- 10.0 over 5 on the EPYC 9004 in bf16")

# What may differ from the preset while the work, and so the expected gain, stays the quickstart's.
_NOT_THE_WORK = {"name", "run_dir", "logging", "checkpoint", "testing"}


def _work(cfg: RunConfig) -> dict[str, Any]:
    work = {section: values for section, values in to_dict(cfg).items() if section not in _NOT_THE_WORK}
    work["train"] = {k: v for k, v in work["train"].items() if k != "seed"}
    work["model"] = {k: v for k, v in work["model"].items() if k not in ("dtype", "device")}
    return work


def quickstart_expectation(cfg: RunConfig) -> str | None:
    """The quickstart's gain over seeds, for a run of its work (any seed, directory, precision or logging);
    None for any other run."""
    if _work(cfg) != _work(load_config("quickstart", [])):
        return None
    return (f"expected: the quickstart over {QUICKSTART_SEEDS} seeds ({QUICKSTART_MACHINE}) gained "
            f"{QUICKSTART_GAIN_MEAN:+.1f} +- {QUICKSTART_GAIN_SD:.1f} points; another CPU rounds differently and "
            f"its mean may differ ({OTHER_MACHINE})")
