"""`model.dtype=auto`: the precision the machine multiplies fastest, decided where the device is known.

bfloat16 on a GPU and on a CPU with AMX, whose matrix units take bf16 natively; float32 on any other
CPU. Without AMX, torch converts or emulates bf16 products: on a 2-core Xeon with AVX512-BF16 (no AMX)
float32 made the quickstart's step 1.3x faster, and on an AMD EPYC with AVX2 only a bf16 product of the
quickstart's shapes ran at 1.1-1.2 GFLOP/s against fp32's 82-123, 70-100x slower (bench/RESULTS.md).
The run's config keeps `auto`, so the same command resumes on another machine in that machine's
precision: the training state holds fp32 weights and AdamW moments either way (a bf16 run's checkpoint
resumes in float32). Each start says which precision it chose.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from grpo.config import RunConfig

AUTO = "auto"


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU advertises AMX's bf16 tiles (Linux's `amx_bf16` flag)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and "amx_bf16" in line.split() for line in text.splitlines())


def concrete_dtype(dtype: str, device_type: str) -> str:
    """`dtype` as configured -> float32 | bfloat16 | float16 for a device of `device_type` (cpu, cuda)."""
    if dtype != AUTO:
        return dtype
    return "bfloat16" if device_type != "cpu" or cpu_has_amx() else "float32"


def with_concrete_dtype(cfg: RunConfig, device_type: str) -> RunConfig:
    """`cfg` with model.dtype made concrete for the device (the same object when it already is)."""
    dtype = concrete_dtype(cfg.model.dtype, device_type)
    if dtype == cfg.model.dtype:
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dtype=dtype))
