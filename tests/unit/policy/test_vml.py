"""grpo.policy.vml: every VML function torch links is settled, and a model load settles them first."""

from __future__ import annotations

import mmap
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo.policy.vml import UNARY_OPS, settle_dispatch
from tests.processes import env_with_src

LIBRARY = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
VML_NAMES = {"Ln": "log", "ErfInv": "erfinv"}  # the rest: the function's name in lower case


def linked_vml_ops() -> set[str]:
    """The torch op of each single- or double-precision VML function (vmsExp, vmdLn, ...) named in the library."""
    with open(LIBRARY, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        names = {m.decode() for m in re.findall(rb"\x00vm[sd]([A-Z][A-Za-z0-9]+)\x00", data)}
    return {VML_NAMES.get(name, name.lower()) for name in names}


@pytest.mark.skipif(not LIBRARY.is_file() or not torch.backends.mkl.is_available(), reason="torch without MKL")
def test_every_vml_function_torch_links_is_settled():
    linked = linked_vml_ops()
    assert linked, f"no VML function found in {LIBRARY}: the scan is wrong"
    assert linked <= set(UNARY_OPS), f"linked but not settled: {sorted(linked - set(UNARY_OPS))}"


def test_settling_calls_each_op_once_per_precision_on_one_element(monkeypatch):
    calls: list[tuple[str, str, int]] = []

    def spy(name: str, op):
        def called(x: torch.Tensor) -> torch.Tensor:
            calls.append((name, str(x.dtype), x.numel()))
            return op(x)
        return called

    for name in UNARY_OPS:
        monkeypatch.setattr(torch, name, spy(name, getattr(torch, name)))
    settle_dispatch.cache_clear()
    settle_dispatch()
    assert sorted(calls) == sorted((name, dtype, 1) for name in UNARY_OPS for dtype in ("torch.float32", "torch.float64"))


def test_a_model_load_settles_the_dispatch_before_the_model_exists():
    code = ("import torch\n"
            "from grpo.config import ModelConfig\n"
            "from grpo.policy import models, vml\n"
            "built = models.build_tiny_model\n"
            "def spy(*a, **k):\n"
            "    print('settled before the model:', vml.settle_dispatch.cache_info().currsize == 1)\n"
            "    return built(*a, **k)\n"
            "models.build_tiny_model = spy\n"
            "models.load_model_and_tokenizer(ModelConfig(name='tiny', dtype='float32'), torch.device('cpu'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with_src(), timeout=120)
    assert "settled before the model: True" in done.stdout, done.stdout + done.stderr[-2000:]
