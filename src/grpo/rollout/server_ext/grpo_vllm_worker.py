"""vLLM worker extension for in-place weight sync of the GRPO rollout server.

Loaded inside the vLLM server, never by the ``grpo`` package: the directory holding this file is
put on the server's PYTHONPATH and the server is started with

    --worker-extension-cls grpo_vllm_worker.GrpoWorkerExtension   (and VLLM_SERVER_DEV_MODE=1)

Its methods are then callable over HTTP; ``/collective_rpc`` passes arguments as JSON *strings*:

    POST /collective_rpc {"method": "grpo_reload_weights"}
    POST /collective_rpc {"method": "grpo_reload_weights", "kwargs": {"weights_path": "/new/dir"}}
    POST /collective_rpc {"method": "grpo_weight_fingerprint"}
    -> {"results": [{...one dict per worker...}]}

Why it exists: vLLM's stock ``reload_weights`` re-reads the checkpoint and re-packs every layer that
received weights, but with tied word embeddings (SmolLM2, the tiny test models) the checkpoint has no
``lm_head.weight``; the head gets nothing ("ParallelLMHead: Failed to load weights" in the log) and on
CPU it keeps the GEMM-packed copy of the *old* embedding that was made at start-up. Sampling then uses
the new body with the old output projection. After the reload this extension points the head at the
embedding again and re-runs the head's weight processing (which re-packs it), then reports a
fingerprint showing that the head computes the same logits as the embedding matrix.

The caller must still reset the prefix cache (``POST /reset_prefix_cache``) after every sync, or
cached KV computed with the old weights is reused, and should pause generation around the sync
(``POST /pause?mode=wait`` ... ``POST /resume``) so no request mixes old and new weights.

Imports only torch and vllm.
"""

from __future__ import annotations

import time
from typing import Any

import torch

_PROBE_ROWS = 4  # rows of the fixed probe input used to compare the head with the embedding


def _find_embed_and_head(model: torch.nn.Module) -> tuple[Any, Any]:
    """The model's input embedding and output head (None when not found or ambiguous)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        ParallelLMHead,
        VocabParallelEmbedding,
    )

    heads = [m for m in model.modules() if isinstance(m, ParallelLMHead)]
    embeds = [
        m
        for m in model.modules()
        if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead)
    ]
    embed = embeds[0] if len(embeds) == 1 else None
    head = heads[0] if len(heads) == 1 else None
    return embed, head


def _ties_embeddings(vllm_config: Any) -> bool:
    hf_config = vllm_config.model_config.hf_config
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    return bool(
        getattr(text_config, "tie_word_embeddings", False) or getattr(hf_config, "tie_word_embeddings", False)
    )


@torch.inference_mode()
def _head_vs_embed_maxdiff(embed: Any, head: Any) -> float:
    """Max |head(x) - x @ E^T| on a fixed input: ~0 when the (packed) head matches the embedding.

    The head is applied through its quant method, i.e. the same (CPU-packed) path the sampler uses.
    """
    weight = embed.weight
    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(_PROBE_ROWS, weight.shape[1], generator=gen).to(weight.dtype).to(weight.device)
    got = head.quant_method.apply(head, x).float()
    want = x.float() @ weight.float().t()
    return float((got[:, : want.shape[1]] - want).abs().max())


@torch.inference_mode()
def _fingerprint(vllm_config: Any, model: torch.nn.Module) -> dict[str, Any]:
    embed, head = _find_embed_and_head(model)
    out: dict[str, Any] = {"tied": _ties_embeddings(vllm_config), "model": vllm_config.model_config.model}
    if embed is None:
        return out
    e = embed.weight.detach()
    out["embed_sum"] = float(e.double().sum())
    out["embed_abs_sum"] = float(e.double().abs().sum())
    out["embed_dtype"] = str(e.dtype).replace("torch.", "")
    if head is not None and head.weight.numel() > 0:
        out["head_shares_embed"] = head.weight.data_ptr() == e.data_ptr()
        out["head_sum"] = float(head.weight.detach().double().sum())
        out["head_vs_embed_maxdiff"] = _head_vs_embed_maxdiff(embed, head)
    return out


class GrpoWorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (has ``model_runner``, ``vllm_config``).

    Method names must not clash with the worker's own attributes (vLLM asserts on that at start-up),
    hence the ``grpo_`` prefix.
    """

    def grpo_reload_weights(self, weights_path: str | None = None) -> dict[str, Any]:
        """Reload weights in place from disk, then re-tie and re-pack a tied lm_head.

        ``weights_path``: a model directory to read instead of the served one. vLLM then remembers it
        as the model path, so later reloads without an argument read it too. Empty/None: re-read the
        directory the server was started with (or the last ``weights_path``).

        Returns a dict: ``seconds`` (whole call), ``reload_seconds`` (vLLM's reload), ``retied``
        (whether the head was re-tied and re-packed), ``stale_head_maxdiff`` (head vs new embedding
        *before* the fix: > 0 means the stock reload left the head stale) and the fingerprint
        (``embed_sum``, ``head_sum``, ``head_vs_embed_maxdiff``: ~0 after a good sync, ...).
        """
        t0 = time.perf_counter()
        self.reload_weights(weights_path=weights_path or None, is_checkpoint_format=True)
        t1 = time.perf_counter()
        model = self.model_runner.get_model()
        embed, head = _find_embed_and_head(model)
        retied = False
        stale = None
        if _ties_embeddings(self.vllm_config) and embed is not None and head is not None:
            stale = _head_vs_embed_maxdiff(embed, head) if head.weight.numel() > 0 else None
            if head.weight is not embed.weight:
                head.weight = embed.weight
            # Re-run the head's post-load processing: on CPU this re-packs the weight for the GEMM
            # kernel (oneDNN / sgl) that computes the logits; elsewhere it is a no-op.
            head.quant_method.process_weights_after_loading(head)
            retied = True
        result = _fingerprint(self.vllm_config, model)
        result.update(
            seconds=time.perf_counter() - t0,
            reload_seconds=t1 - t0,
            retied=retied,
            stale_head_maxdiff=stale,
        )
        return result

    def grpo_weight_fingerprint(self) -> dict[str, Any]:
        """Cheap summary of the served weights (no reload): embed/head sums, head-vs-embed max diff."""
        return _fingerprint(self.vllm_config, self.model_runner.get_model())
