"""model.dtype=auto: the precision the device multiplies fastest; an explicit dtype is never overridden."""

from pathlib import Path

import pytest

from grpo import precision
from grpo.config import load_config


@pytest.mark.parametrize("amx, device, expected", [
    (False, "cpu", "float32"),  # bf16 converted or emulated: 1.3x (AVX512-BF16) to ~100x (AVX2) slower
    (True, "cpu", "bfloat16"),
    (False, "cuda", "bfloat16"),
])
def test_auto_is_bf16_only_where_it_is_multiplied_natively(monkeypatch, amx, device, expected):
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: amx)
    assert precision.concrete_dtype("auto", device) == expected
    cfg = precision.with_concrete_dtype(load_config("quickstart"), device)
    assert cfg.model.dtype == expected


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_an_explicit_dtype_is_kept_on_every_device(monkeypatch, dtype):
    monkeypatch.setattr(precision, "cpu_has_amx", lambda: False)
    cfg = load_config("quickstart", [f"model.dtype={dtype}"])
    assert precision.with_concrete_dtype(cfg, "cpu") is cfg


def test_amx_is_read_from_this_cpus_flags():
    flags = next(line.split() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    assert precision.cpu_has_amx() == ("amx_bf16" in flags)
