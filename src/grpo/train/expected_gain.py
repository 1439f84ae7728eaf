"""What the quickstart is known to learn, said after a run that did the quickstart's work.

One run's gain cannot tell a working setup from a broken one: the same work moves by several points
from seed to seed, and CPUs round differently. `bench/learning.py` measured the spread over seeds
(bench/RESULTS.md, "Learning over seeds"); a quickstart ends by saying it beside its own gain.
"""

from __future__ import annotations

from typing import Any

from grpo.config import RunConfig, load_config, to_dict

# bench/learning.py, synchronous, 25 steps: held-out greedy accuracy gain on 128 problems, in points.
# Seeds 0-4 gave +59.4, +57.0, +59.4, +56.2, +62.5 (18.8% before each), 2026-11-25.
QUICKSTART_GAIN_MEAN = 58.9
QUICKSTART_GAIN_SD = 2.4
QUICKSTART_SEEDS = 5
QUICKSTART_MACHINE = "AMD EPYC family 25 model 1, float32, 2 cores"
# bench/RESULTS.md, "Learning over seeds on the EPYC 9004" (2026-11-26) and "The quickstart's minutes on the EPYC
# 9004" (2026-11-27: bf16 seeds 0-4 +61.7, +38.3, +60.2, +53.9, +45.3).
OTHER_MACHINE = ("an AMD EPYC 9004: +51.9 +- 10.0 over 5 seeds in bf16, +55.5 +- 4.1 over 3 in float32; one bf16 "
                 "run on an Intel Xeon: +42.2")

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
