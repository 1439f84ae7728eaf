"""model.dtype=auto: the precision the device multiplies fastest; an explicit dtype is never overridden."""

import math

import pytest

from grpo import precision
from grpo.config import load_config

SAPPHIRE_RAPIDS = "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
HIDDEN_AMX_XEON = "fpu avx2 avx512f avx512_bf16 avx512_vnni"  # a Xeon whose hypervisor hides AMX
GENOA = "fpu avx2 avx512f avx512_bf16 avx512_vnni avx512vl"  # AMD EPYC 9004 (Zen 4)
AVX2_EPYC = "fpu sse4_2 avx2 fma"
GRAVITON3 = "fp asimd sve bf16 i8mm"  # ARM's Features line


@pytest.fixture
def cpu(monkeypatch):
    """Pose as a CPU with these flags whose bf16 products run `speedup` times fp32's (None: never measured)."""
    def pose(flags: str, speedup: float | None = None) -> list[int]:
        measured: list[int] = []

        def measure() -> float:
            assert speedup is not None, "measured where the flags decide"
            measured.append(1)
            return speedup

        precision.cpu_choice.cache_clear()
        monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags.split()))
        monkeypatch.setattr(precision, "bf16_speedup", measure)
        return measured
    yield pose
    precision.cpu_choice.cache_clear()


@pytest.mark.parametrize("flags, speedup, expected", [
    (SAPPHIRE_RAPIDS, None, "bfloat16"),
    (AVX2_EPYC, None, "float32"),  # bf16 emulated: ~100x slower
    (HIDDEN_AMX_XEON, 0.6, "float32"),
    (GENOA, 2.4, "bfloat16"),
    (GENOA, 1.1, "float32"),  # too close to call: fp32, which every CPU runs well
    (GRAVITON3, 1.8, "bfloat16"),
])
def test_auto_on_a_cpu_follows_its_flags_or_else_a_measurement(cpu, flags, speedup, expected):
    measured = cpu(flags, speedup)
    assert precision.concrete_dtype("auto", "cpu") == expected
    assert precision.with_concrete_dtype(load_config("quickstart"), "cpu").model.dtype == expected
    if speedup is not None:
        assert f"measured at {speedup:.2f}x fp32's" in precision.auto_choice("cpu").why
    assert len(measured) == (1 if speedup is not None else 0)  # once per process, however often asked


def test_auto_on_a_gpu_is_bf16_without_a_measurement(cpu):
    measured = cpu(AVX2_EPYC)
    assert precision.concrete_dtype("auto", "cuda") == "bfloat16"
    assert measured == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_an_explicit_dtype_is_kept_on_every_device(cpu, dtype):
    cpu(AVX2_EPYC)
    cfg = load_config("quickstart", [f"model.dtype={dtype}"])
    assert precision.with_concrete_dtype(cfg, "cpu") is cfg


@pytest.mark.parametrize("text, flags", [
    (f"processor\t: 0\nmodel name\t: X\nflags\t\t: {SAPPHIRE_RAPIDS}\n\nprocessor\t: 1\nflags\t\t: {SAPPHIRE_RAPIDS}\n",
     SAPPHIRE_RAPIDS),
    (f"processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: {GRAVITON3}\n", GRAVITON3),
    ("processor\t: 0\n", ""),
])
def test_flags_are_read_from_cpuinfo(tmp_path, text, flags):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert precision.cpu_flags(cpuinfo) == frozenset(flags.split())
    assert precision.cpu_flags(tmp_path / "missing") == frozenset()


def test_the_measurement_runs_on_this_cpu():
    speedup = precision.bf16_speedup(shape=(8, 64, 128), repeats=2)
    assert math.isfinite(speedup) and speedup > 0


def timings(*seconds):
    """A timed run's seconds, one value per call, in turn."""
    values = iter(seconds)
    return lambda: next(values)


def test_one_busy_moment_does_not_decide_the_precision():
    # fp32 1 ms a product, bf16 0.5 ms, but bf16's first timed run caught the machine busy (8 ms).
    fp32 = timings(5e-3, *[1e-3] * 9)
    bf16 = timings(5e-3, 8e-3, *[0.5e-3] * 8)
    assert precision.fastest_ratio(fp32, bf16, repeats=9) == 2.0


def test_an_emulated_bf16_product_ends_the_measurement_after_a_few_runs():
    calls = []

    def bf16():
        calls.append(1)
        return 0.1

    assert precision.fastest_ratio(timings(*[1e-3] * 10), bf16, repeats=9) == 1e-3 / 0.1
    assert len(calls) == 1 + precision.SETTLED_RUNS  # the first call, then the runs that settle it
