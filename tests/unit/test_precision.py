"""model.dtype=auto: the precision the device multiplies fastest; an explicit dtype is never overridden."""

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


@pytest.mark.parametrize("flags, amx", [
    ("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", True),  # Sapphire Rapids
    ("fpu avx2 avx512f avx512_bf16 avx512_vnni", False),  # a Xeon whose hypervisor hides AMX
    ("fpu sse4_2 avx2 fma", False),  # an AVX2-only EPYC
])
def test_amx_is_read_from_the_cpus_flags(tmp_path, flags, amx):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: X\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert precision.cpu_has_amx(cpuinfo) is amx
    assert precision.cpu_has_amx(tmp_path / "missing") is False
