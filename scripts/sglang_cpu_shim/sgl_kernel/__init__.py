"""A pure-torch stand-in for SGLang's kernel package `sgl_kernel`, for SGLang's CPU engine.

SGLang 0.5.23 imports `sgl_kernel` on CPU at module level, and PyPI has no CPU build of it (the
`sglang-kernel` wheel is CUDA-only). This module gives what a CPU server for a text model needs:

- The one function it calls when serving, `assign_req_to_token_pool_cpu` (imported by
  `sglang/srt/mem_cache/allocation.py`), written in torch with the semantics of the Triton kernel it
  stands for.
- Seven functions used only by speculative decoding that the server imports at module level whether
  or not speculative decoding is on (`copy_all_layer_kv_cache_cpu` from
  `sglang/kernels/ops/kvcache/cache_move.py`, called only for pools built with
  `enable_kv_cache_copy`, i.e. with a speculative algorithm; six from `sglang/kernels/ops/speculative/`).
  They are importable and raise, naming themselves, when called.
- No `torch.ops.sgl_kernel` operators. SGLang decides whether to use its Intel AMX kernels with
  `hasattr(torch.ops.sgl_kernel, "convert_weight_packed")` (`_is_intel_amx_backend_available` in
  `sglang/srt/utils/common.py`) and its other CPU kernels with similar probes, so with this shim those
  are all off and SGLang runs its own torch-native layers (which is why the server must be started with
  `--attention-backend torch_native`: the CPU default, `intel_amx`, needs those operators).
- No distribution metadata: `importlib.metadata.version("sglang-kernel")` still fails; SGLang checks it
  only on CUDA.
- Any other attribute fails with an AttributeError naming it, so a code path that needs a real kernel
  stops there instead of running something made up.

scripts/setup_sglang_env.sh copies this package into the SGLang environment.
"""

from __future__ import annotations

import torch

__all__ = [
    "assign_req_to_token_pool_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
]


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write newly allocated KV-cache slots into the request-to-token table, in place.

    For request i of the batch, row `req_pool_indices[i]` of `req_to_token` (rows `pool_len` long)
    gets, at columns `start_offset[i]:end_offset[i]`, the next `end_offset[i] - start_offset[i]`
    entries of `out_cache_loc`, which holds the batch's slots request after request. The same as
    the Triton kernel `assign_req_to_token_pool` in `sglang/srt/mem_cache/allocation.py`.
    """
    if req_to_token.dim() != 2 or req_to_token.shape[1] != pool_len or not req_to_token.is_contiguous():
        raise ValueError(f"assign_req_to_token_pool_cpu: req_to_token must be a contiguous [rows, {pool_len}] "
                         f"table, got shape {tuple(req_to_token.shape)} strides {req_to_token.stride()}")
    lengths = (end_offset - start_offset).to(torch.int64)
    rows = req_pool_indices.to(torch.int64).repeat_interleave(lengths)
    # Column of each written slot: its request's start plus its rank within that request.
    firsts = torch.cumsum(lengths, 0) - lengths
    ranks = torch.arange(rows.numel(), dtype=torch.int64) - firsts.repeat_interleave(lengths)
    columns = start_offset.to(torch.int64).repeat_interleave(lengths) + ranks
    req_to_token.view(-1)[rows * pool_len + columns] = out_cache_loc[: rows.numel()].to(req_to_token.dtype)


def _speculative_only(name: str):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} is not in grpo's CPU shim of sgl_kernel "
                                  "(scripts/sglang_cpu_shim): speculative decoding needs the real kernel package")

    unavailable.__name__ = unavailable.__qualname__ = name
    return unavailable


assign_draft_cache_locs_contiguous_cpu = _speculative_only("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _speculative_only("assign_extend_cache_locs_cpu")
build_tree_kernel_efficient_cpu = _speculative_only("build_tree_kernel_efficient_cpu")
copy_all_layer_kv_cache_cpu = _speculative_only("copy_all_layer_kv_cache_cpu")
fill_accept_out_cache_loc_cpu = _speculative_only("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _speculative_only("fill_bonus_tokens_cpu")
verify_tree_greedy_cpu = _speculative_only("verify_tree_greedy_cpu")


def __getattr__(name: str):
    # AttributeError (not another type) so that `hasattr` and `from sgl_kernel import X` inside a
    # `try/except ImportError` behave as with a real build that lacks X.
    raise AttributeError(f"sgl_kernel.{name} is not in grpo's CPU shim of sgl_kernel (scripts/sglang_cpu_shim): "
                         f"it has only {', '.join(__all__)}; this SGLang code path needs the real kernel package")
