"""What the quickstart is known to learn, said after a run that did the quickstart's work.

One run's gain cannot tell a working setup from a broken one: the same work moves by several points
from seed to seed, and CPUs round differently. `bench/learning.py` measured the spread over seeds
(bench/RESULTS.md, "Learning over seeds"); a quickstart ends by saying it beside its own gain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo.config import RunConfig, load_config, to_dict
from grpo.precision import BF16_INSTRUCTIONS, cpu_flags


@dataclass(frozen=True)
class Spread:
    """bench/learning.py's gain over seeds for the quickstart's work on one kind of machine."""

    machine: str
    mean: float  # held-out greedy accuracy gain on 128 problems, in points
    sd: float | None  # None: one run
    runs: int

    def __str__(self) -> str:
        over = f" +- {self.sd:.1f} points over {self.runs} seeds" if self.sd is not None else " points in one run"
        return f"{self.mean:+.1f}{over} on {self.machine}"


# Synchronous, 25 steps, rollouts of 32 new tokens (the preset's since 2026-11-27; evaluations 40):
# - the EPYC 9004, seeds 0-4: +56.2, +51.6, +59.4, +54.7, +55.5 (20.3% before each), bench/RESULTS.md "The
#   quickstart under 3 minutes on the EPYC 9004" (2026-11-27);
# - an Intel Xeon with AMX (family 6 model 167), seeds 0-4 with the fused CPU kernels (grpo.policy.kernels):
#   +48.4, +57.0, +57.0, +51.6, +52.3 (21.1% before each), bench/RESULTS.md "Fused CPU kernels" (2026-11-28);
#   with the eager decode step, +39.8, +40.6, +57.0, +57.8, +53.9 (19.5% before each), "An Intel Xeon with AMX,
#   and a lent NVIDIA H200" (2026-11-28), where the H200's one run (seed 0) is too. The EPYC 9004's were
#   measured with the eager step (its AVX-512 runs the kernels now: not measured since).
# With rollouts of 40 new tokens, before: "Learning over seeds" (2026-11-25, the AVX2 EPYC in float32: +59.4,
# +57.0, +59.4, +56.2, +62.5); the EPYC 9004 in bf16 then, "The quickstart's minutes on the EPYC 9004"
# (2026-11-27): +61.7, +38.3, +60.2, +53.9, +45.3, +51.9 +- 10.0.
EPYC_9004 = Spread("an AMD EPYC 9004 (family 25 model 17, bf16, 2 cores)", 55.5, 2.8, 5)
XEON_AMX = Spread("an Intel Xeon with AMX (family 6 model 167, bf16, 2 cores)", 53.3, 3.7, 5)
H200 = Spread("an NVIDIA H200 (bf16)", 57.0, None, 1)
AVX2_EPYC = Spread("an AVX2-only AMD EPYC (float32, 2 cores) with the 40-token rollouts of before 2026-11-27",
                   58.9, 2.4, 5)
REFERENCE = EPYC_9004  # README's figure


def measured_on(device_type: str, flags: frozenset[str]) -> Spread:
    """The spread measured on the machine kind nearest this one: a GPU, a CPU with AMX, with bf16 instructions
    but no AMX, or neither."""
    if device_type == "cuda":
        return H200
    if "amx_bf16" in flags:
        return XEON_AMX
    return EPYC_9004 if flags & BF16_INSTRUCTIONS else AVX2_EPYC


# What may differ from the preset while the work, and so the expected gain, stays the quickstart's.
_NOT_THE_WORK = {"name", "run_dir", "logging", "checkpoint", "testing"}


def _work(cfg: RunConfig) -> dict[str, Any]:
    work = {section: values for section, values in to_dict(cfg).items() if section not in _NOT_THE_WORK}
    work["train"] = {k: v for k, v in work["train"].items() if k != "seed"}
    work["model"] = {k: v for k, v in work["model"].items() if k not in ("dtype", "device")}
    return work


def quickstart_expectation(cfg: RunConfig, device_type: str = "cpu",
                           flags: frozenset[str] | None = None) -> str | None:
    """The quickstart's gain over seeds on the machine kind nearest this one (`device_type`, the CPU's `flags`),
    for a run of its work (any seed, directory, precision or logging); None for any other run."""
    if _work(cfg) != _work(load_config("quickstart", [])):
        return None
    here = measured_on(device_type, cpu_flags() if flags is None else flags)
    also = "" if here is REFERENCE else f"; {REFERENCE}"
    return (f"expected: the quickstart gained {here}{also}. One run is one draw from such a spread, and another "
            "kind of machine rounds differently")
