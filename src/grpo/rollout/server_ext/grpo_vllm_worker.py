"""vLLM worker extension for in-place weight sync of the GRPO rollout server.

Loaded inside the vLLM server, never by the ``grpo`` package: the directory holding this file is
put on the server's PYTHONPATH and the server is started with

    --worker-extension-cls grpo_vllm_worker.GrpoWorkerExtension   (and VLLM_SERVER_DEV_MODE=1)

Its methods are then callable over HTTP (``/collective_rpc`` forwards the JSON ``args``/``kwargs``
as they are; vLLM documents them as strings, so only strings are used here):

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
fingerprint: a hash of the served embedding (comparable with the trainer's) and a one-hot read-back
through the packed head that is exactly 0.0 when the head uses the current embedding.

The caller must still reset the prefix cache (``POST /reset_prefix_cache``) after every sync, or
cached KV computed with the old weights is reused, and should pause generation around the sync
(``POST /pause?mode=wait`` or ``mode=abort`` ... ``POST /resume``; not ``mode=keep``, which
resumes the frozen requests on the new weights) so no request mixes old and new weights.

Imports only the standard library, torch and vllm.
"""

from __future__ import annotations

import glob
import hashlib
import os
import time
from typing import Any

import torch

_PROBE_COLUMNS = 8  # embedding columns read back through the head by the one-hot probe


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
    """Max |head(e_k) - E[:, k]| over a few one-hot inputs e_k, through the head's own (CPU-packed)
    GEMM, i.e. the path the sampler uses. A one-hot input reads column k of the weight back exactly
    (one product, the rest zeros), so this is 0.0 when the head computes with the current embedding,
    in any dtype, and > 0 when it still holds older values.
    """
    weight = embed.weight
    hidden = weight.shape[1]
    cols = torch.linspace(0, hidden - 1, min(_PROBE_COLUMNS, hidden)).long().unique()
    x = torch.zeros(len(cols), hidden, dtype=weight.dtype, device=weight.device)
    x[torch.arange(len(cols)), cols.to(weight.device)] = 1
    got = head.quant_method.apply(head, x).float()
    want = weight[:, cols.to(weight.device)].t().float()
    n = min(got.shape[1], want.shape[1])
    return float((got[:, :n] - want[:, :n]).abs().max())


@torch.inference_mode()
def _fingerprint(vllm_config: Any, model: torch.nn.Module) -> dict[str, Any]:
    embed, head = _find_embed_and_head(model)
    out: dict[str, Any] = {"tied": _ties_embeddings(vllm_config), "model": vllm_config.model_config.model}
    if embed is None:
        return out
    e = embed.weight.detach()
    # vLLM may pad the vocabulary (e.g. to a multiple of 64): hash/sum only the real rows, so the
    # trainer can compute the same numbers from its own embedding cast to the served dtype.
    e = e[: getattr(embed, "org_vocab_size", e.shape[0])].contiguous()
    out["vocab_rows"] = int(e.shape[0])
    out["embed_sha256"] = hashlib.sha256(e.cpu().view(-1).view(torch.uint8).numpy()).hexdigest()
    out["embed_sum"] = float(e.double().sum())
    out["embed_abs_sum"] = float(e.double().abs().sum())
    out["embed_dtype"] = str(e.dtype).replace("torch.", "")
    if head is not None and head.weight.numel() > 0:
        out["head_shares_embed"] = head.weight.data_ptr() == embed.weight.data_ptr()
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
        *before* the fix: > 0 means the stock reload had left the head stale), and the fingerprint
        of :meth:`grpo_weight_fingerprint` (``head_vs_embed_maxdiff`` must be 0.0 after a sync).

        Raises (HTTP 500 from ``/collective_rpc``) when the directory is missing or holds no
        ``*.safetensors``, *before* touching the model. A failure while loading (e.g. a truncated
        file) leaves vLLM's model half-loaded (parameters on the meta device: the next request kills
        the engine); when ``weights_path`` was given, the previous model path is then reloaded to
        recover, and the error says whether that worked. Otherwise restart the server.
        """
        t0 = time.perf_counter()
        model_config = self.vllm_config.model_config
        if weights_path is not None and not isinstance(weights_path, str):
            raise TypeError(f"weights_path must be a string, got {type(weights_path).__name__}")
        target = weights_path or model_config.model
        if not os.path.isdir(target) or not glob.glob(os.path.join(target, "*.safetensors")):
            raise FileNotFoundError(f"no *.safetensors in model directory {target!r}; weights unchanged")
        previous = (model_config.model, model_config.model_weights, model_config.revision)
        try:
            self.reload_weights(weights_path=weights_path or None, is_checkpoint_format=True)
        except Exception as exc:
            note = "the served model is unusable now: restart the server"
            if weights_path and os.path.realpath(weights_path) != os.path.realpath(previous[0]):
                model_config.model, model_config.model_weights, model_config.revision = previous
                try:
                    self.reload_weights(weights_path=None, is_checkpoint_format=True)
                    self._grpo_retie_head()
                    note = f"weights reloaded from the previous path {previous[0]!r}"
                except Exception:  # noqa: BLE001 - report the original failure
                    pass
            raise RuntimeError(f"reload from {target!r} failed: {exc!r}; {note}") from exc
        t1 = time.perf_counter()
        retied, stale = self._grpo_retie_head()
        result = _fingerprint(self.vllm_config, self.model_runner.get_model())
        result.update(
            seconds=time.perf_counter() - t0,
            reload_seconds=t1 - t0,
            retied=retied,
            stale_head_maxdiff=stale,
        )
        return result

    def _grpo_retie_head(self) -> tuple[bool, float | None]:
        """Point a tied head at the embedding and re-pack it; (retied, head-vs-embed diff before)."""
        embed, head = _find_embed_and_head(self.model_runner.get_model())
        if not (_ties_embeddings(self.vllm_config) and embed is not None and head is not None):
            return False, None
        stale = _head_vs_embed_maxdiff(embed, head) if head.weight.numel() > 0 else None
        if head.weight is not embed.weight:
            head.weight = embed.weight
        # Re-run the head's post-load processing: on CPU this re-packs the weight for the GEMM
        # kernel (oneDNN / sgl) that computes the logits; elsewhere it is a no-op.
        head.quant_method.process_weights_after_loading(head)
        return True, stale

    def grpo_weight_fingerprint(self) -> dict[str, Any]:
        """Summary of the served weights, no reload (~0.4 s over HTTP for SmolLM2-135M, ms for tiny).

        ``embed_sha256``/``embed_sum``/``embed_abs_sum``: over the first ``vocab_rows`` rows of the
        input embedding as served (``embed_dtype``), for comparison with the trainer's embedding cast
        to that dtype; ``head_vs_embed_maxdiff``: 0.0 when the output head computes with the current
        embedding (see ``_head_vs_embed_maxdiff``); ``head_shares_embed``: head and embedding share
        storage; ``tied``: the config ties them; ``model``: the path vLLM reloads from.
        """
        return _fingerprint(self.vllm_config, self.model_runner.get_model())
