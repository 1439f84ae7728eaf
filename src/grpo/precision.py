"""`model.dtype=auto`: the precision the machine multiplies fastest, decided where the device is known.

bfloat16 on a GPU and on a CPU with AMX, whose matrix units take bf16 natively. A CPU with bf16
instructions but no AMX goes either way, so there it is measured: on a 2-core Xeon with AVX512-BF16
(AMX hidden by its hypervisor) bf16 products ran at about 0.6x fp32's and float32 made the quickstart's
step 1.3x faster, while on an AMD EPYC 9004 (Zen 4, AVX512-BF16) they ran at 2.4-2.5x fp32's
(bench/RESULTS.md). A CPU with neither is float32 without a measurement: there torch emulates bf16
products, 70-100x slower than fp32's on an AVX2-only EPYC.
The run's config keeps `auto`, so the same command resumes on another machine in that machine's
precision: the training state holds fp32 weights and AdamW moments either way (a bf16 run's checkpoint
resumes in float32). Each start says which precision it chose, and why.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Callable

from grpo.config import RunConfig

AUTO = "auto"
# bf16 only where its products are clearly faster: the two CPUs measured sit at 0.6x and 2.4x, and a
# choice made near 1x could flip between two starts of one run with the machine's noise.
BF16_MIN_SPEEDUP = 1.3
# A decoder's MLP product at a decode step's rows, about SmolLM2-135M's: [64, 576] @ [576, 1536].
PROBE_SHAPE = (64, 576, 1536)


BF16_INSTRUCTIONS = frozenset({"avx512_bf16", "bf16"})  # x86's AVX512-BF16, ARM's BF16 (cpuinfo flags)


@dataclasses.dataclass(frozen=True)
class Choice:
    dtype: str  # float32 | bfloat16
    why: str  # for the run's first lines


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (x86's `flags`, ARM's `Features`); empty elsewhere."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def bf16_speedup(shape: tuple[int, int, int] = PROBE_SHAPE, repeats: int = 9) -> float:
    """fp32's time over bf16's for one product of `shape` (rows, inner, outer) on this CPU: >1, bf16 is faster."""
    import torch

    rows, inner, outer = shape
    generator = torch.Generator().manual_seed(0)
    x32, w32 = torch.randn(rows, inner, generator=generator), torch.randn(outer, inner, generator=generator)
    x16, w16 = x32.bfloat16(), w32.bfloat16()

    def seconds(x: torch.Tensor, w: torch.Tensor) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            torch.nn.functional.linear(x, w)
            return time.perf_counter() - start
        return run

    return fastest_ratio(seconds(x32, w32), seconds(x16, w16), repeats)


# An emulated bf16 product (~0.1 s) is known after this many runs of each: a busy moment slows one run, not three.
SETTLED_RUNS = 3


def fastest_ratio(time32: Callable[[], float], time16: Callable[[], float], repeats: int) -> float:
    """The fastest of `repeats` alternating timed runs of each (after one first call each, which chooses and
    prepares its kernels): fp32's over bf16's. A busy moment slows one run, not the figure: a quickstart once
    chose float32 from 0.12x, one slow first bf16 run ending the measurement at once. It ends early only
    when bf16 is still over twice slower after `SETTLED_RUNS` of each."""
    time32(), time16()
    best32 = best16 = float("inf")
    for run in range(1, repeats + 1):
        best32, best16 = min(best32, time32()), min(best16, time16())
        if run >= SETTLED_RUNS and best16 > 2 * best32:
            break
    return best32 / best16


@functools.cache
def cpu_choice() -> Choice:
    """This CPU's faster precision for a model's products, measured once per process where flags can't tell."""
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return Choice("bfloat16", "AMX multiplies bf16 natively")
    if not flags & BF16_INSTRUCTIONS:
        return Choice("float32", "no bf16 instructions: bf16 products run far slower than fp32 here")
    speedup = bf16_speedup()
    verdict = "faster" if speedup >= BF16_MIN_SPEEDUP else f"not {BF16_MIN_SPEEDUP}x faster"
    return Choice("bfloat16" if speedup >= BF16_MIN_SPEEDUP else "float32",
                  f"bf16 instructions, no AMX: bf16 products measured at {speedup:.2f}x fp32's, {verdict}")


def auto_choice(device_type: str) -> Choice:
    """What `model.dtype=auto` runs on a device of `device_type` (cpu, cuda, ...), and why."""
    if device_type != "cpu":
        return Choice("bfloat16", f"{device_type} multiplies bf16 natively")
    return cpu_choice()


def concrete_dtype(dtype: str, device_type: str) -> str:
    """`dtype` as configured -> float32 | bfloat16 | float16 for a device of `device_type` (cpu, cuda)."""
    return auto_choice(device_type).dtype if dtype == AUTO else dtype


def with_concrete_dtype(cfg: RunConfig, device_type: str) -> RunConfig:
    """`cfg` with model.dtype made concrete for the device (the same object when it already is)."""
    return with_dtype(cfg, concrete_dtype(cfg.model.dtype, device_type))


def with_dtype(cfg: RunConfig, dtype: str) -> RunConfig:
    if dtype == cfg.model.dtype:
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dtype=dtype))
