"""Per-token work in hand-written CPU kernels (`kernels.c`): bf16 on a CPU with AVX-512.

Between a decode step's products, eager torch runs about 35 small operations a layer (an RMSNorm is seven, rotary
embedding five, attention over the KV cache eight, SiLU-and-multiply two), each a kernel call and a Python dispatch
over a few thousand elements: on an Intel Xeon with AMX, where the products themselves are fast, those and
attention's batched products took half of a quickstart generation (bench/RESULTS.md). Here each group is one
pass: the residual add with the next RMSNorm, rotary embedding with the KV cache write, attention (scores, mask,
softmax, weighted values) per row and key-value head, SiLU-and-multiply (`grpo.rollout.engines.decode_step`). The
update's RMSNorm is one pass forward and one backward where autograd ran about twenty over fp32 copies
(`grpo.policy.fused_norm`). They round to bf16 where eager's operations round, so their outputs are eager's but for
the order of fp32 sums (tested against eager torch).

Built on first use with the system's C compiler (`cc -O3 -march=native -fopenmp`, under a second) into grpo's
cache, named by the source, the compiler and this CPU's flags (a build for another CPU is never loaded), and loaded
with ctypes; its OpenMP is torch's own runtime (one `libgomp.so.1` per process), so the kernels use torch's
threads. Without a compiler, without AVX-512, or where the build fails, the engine keeps its eager step and says
why once.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

import torch

from grpo.policy.models import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")


def _cpu_flags() -> str:
    """This CPU's model and instruction flags (a build's name depends on them: -march=native)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return os.uname().machine
    wanted = ("model name", "flags")
    return "\n".join(dict.fromkeys(line for line in lines if line.split(":")[0].strip() in wanted))


def _build() -> Path:
    """-> the shared library for this source, compiler and CPU, compiled now where the cache has none. Raises
    RuntimeError with the reason where it cannot be built."""
    name = os.environ.get("CC") or "cc"
    compiler = shutil.which(name)
    if compiler is None:
        raise RuntimeError(f"no C compiler ({name}) on PATH")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256(b"\0".join(x.encode() for x in (SOURCE.read_text(), version, " ".join(FLAGS),
                                                            _cpu_flags()))).hexdigest()[:16]
    target = cache_dir() / "kernels" / f"grpo-kernels-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")  # another process may build the same one
    built = subprocess.run([compiler, *FLAGS, "-o", str(partial), str(SOURCE), "-lm"], capture_output=True,
                           text=True, timeout=300)
    if built.returncode != 0:
        partial.unlink(missing_ok=True)
        errors = [line for line in built.stderr.splitlines() if "error" in line] or built.stderr.splitlines() or ["?"]
        raise RuntimeError(f"{Path(compiler).name} failed: {errors[0].strip()}")
    os.replace(partial, target)
    return target


class FusedKernels:
    """The kernels of `kernels.c`, on contiguous bf16 CPU tensors."""

    def __init__(self, library: ctypes.CDLL) -> None:
        pointer, integer, long, real = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float
        self._lib = library
        library.attention_fits.argtypes = [integer] * 3
        library.attention_fits.restype = integer
        library.add_rms_norm.argtypes = [integer, integer, pointer, pointer, pointer, real, pointer]
        library.rope_store.argtypes = [integer] * 4 + [pointer] * 5 + [long, integer, integer]
        library.decode_attention.argtypes = [integer] * 5 + [pointer] * 3 + [long, integer, pointer, long, real, pointer]
        library.silu_mul.argtypes = [long, pointer, pointer, pointer]
        library.rms_norm_forward.argtypes = [long, integer, pointer, pointer, real, pointer, pointer]
        library.rms_norm_backward.argtypes = [long, integer] + [pointer] * 6 + [integer]

    def attention_fits(self, heads: int, kv_heads: int, head_dim: int) -> bool:
        return bool(self._lib.attention_fits(heads, kv_heads, head_dim))

    def add_rms_norm(self, residual: torch.Tensor, delta: torch.Tensor | None, norm: torch.nn.Module,
                     out: torch.Tensor) -> None:
        """residual [A, H] += delta (rounded as eager's add; none: unchanged); out [A, H] = `norm`(residual), a
        Llama-style RMSNorm (its `weight` and `variance_epsilon`)."""
        rows, hidden = residual.shape
        self._lib.add_rms_norm(rows, hidden, residual.data_ptr(), None if delta is None else delta.data_ptr(),
                               norm.weight.data_ptr(), norm.variance_epsilon, out.data_ptr())

    def rope_store(self, qkv: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, heads: int, kv_heads: int,
                   key_buffer: torch.Tensor, value_buffer: torch.Tensor, position: int) -> None:
        """qkv [A, (N + 2K) D]: rotary embedding on its query and key heads in place (cos, sin_signed [A, D], as
        `grpo.rollout.engines.decode_step.rotate_in_place`), then its keys and values written at `position` of
        the buffers [A, K, C, D]."""
        rows, dim, capacity = len(qkv), key_buffer.shape[-1], key_buffer.shape[2]
        self._lib.rope_store(rows, heads, kv_heads, dim, qkv.data_ptr(), cos.data_ptr(), sin_signed.data_ptr(),
                             key_buffer.data_ptr(), value_buffer.data_ptr(), key_buffer.stride(0), capacity, position)

    def attention(self, qkv: torch.Tensor, heads: int, key_buffer: torch.Tensor, value_buffer: torch.Tensor,
                  allowed: torch.Tensor, scaling: float, out: torch.Tensor) -> None:
        """out [A, N*D] <- attention of qkv's queries (its first N heads) over the buffers' [A, K, C, D] first S
        positions, where allowed [A, S] (uint8) is 1."""
        rows, kv_heads, capacity, dim = key_buffer.shape
        self._lib.decode_attention(rows, heads, kv_heads, dim, allowed.shape[1], qkv.data_ptr(), key_buffer.data_ptr(),
                                   value_buffer.data_ptr(), key_buffer.stride(0), capacity, allowed.data_ptr(),
                                   allowed.stride(0), scaling, out.data_ptr())

    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """-> silu(gate) * up [A, I], rounded as eager's (into gate's memory: the product's own output)."""
        self._lib.silu_mul(gate.numel(), gate.data_ptr(), up.data_ptr(), gate.data_ptr())
        return gate


    def rms_norm_forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """x [..., H] -> (weight * bf16(x r) [..., H], r [rows] fp32), r = rsqrt(mean(x^2) + eps) of each row."""
        rows, hidden = x.numel() // x.shape[-1], x.shape[-1]
        out, inv_rms = torch.empty_like(x), torch.empty(rows, dtype=torch.float32)
        self._lib.rms_norm_forward(rows, hidden, x.data_ptr(), weight.data_ptr(), eps, out.data_ptr(), inv_rms.data_ptr())
        return out, inv_rms

    def rms_norm_backward(self, grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                          inv_rms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The output's gradient [..., H] -> (x's [..., H], weight's [H]), as eager's autograd rounds them."""
        rows, hidden = x.numel() // x.shape[-1], x.shape[-1]
        slots = torch.get_num_threads()
        grad_x, weight_sums = torch.empty_like(x), torch.empty(slots, hidden, dtype=torch.float32)
        self._lib.rms_norm_backward(rows, hidden, grad.data_ptr(), x.data_ptr(), weight.data_ptr(), inv_rms.data_ptr(),
                                    grad_x.data_ptr(), weight_sums.data_ptr(), slots)
        return grad_x, weight_sums.sum(0).to(weight.dtype)


@functools.cache
def fused_kernels() -> FusedKernels | None:
    """The kernels built for this CPU, or None where they cannot be (said once, at info level: the eager forms
    are correct, only slower)."""
    try:
        return FusedKernels(ctypes.CDLL(str(_build())))
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        log.info("grpo's fused CPU kernels are not available here (%s): the eager forms run", exc)
        return None
