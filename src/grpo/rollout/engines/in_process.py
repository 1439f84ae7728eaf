"""Engines that generate with the policy's own model in this process: no server and no weight sync (they
read the live weights), a copy of the model to generate ahead of the trainer, and the same finish for every
sample: stop strings, statuses, and a batch the device has no memory for failed, never a crash."""

from __future__ import annotations

import copy
import importlib
import threading
from contextlib import nullcontext
from typing import Callable, ContextManager

import torch
from transformers import PreTrainedTokenizerBase

from grpo.policy import lora
from grpo.rollout.engines.base import RolloutEngine
from grpo.rollout.engines.registry import EngineKind
from grpo.rollout.types import Completion, SampleStatus, SamplingParams


def out_of_memory(exc: RuntimeError) -> bool:
    """The one failure generation expects: the device ran out of memory for this batch (torch raises
    OutOfMemoryError on CUDA, a RuntimeError from the allocator on CPU)."""
    return isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)


class InProcessEngine(RolloutEngine):
    def __init__(
        self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, batch_size: int = 64,
        cancel: threading.Event | None = None,
        inference: Callable[[], ContextManager[object]] = nullcontext,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.cancel = cancel or threading.Event()  # set from outside to abandon generation at the next token
        # Entered around each generate call: the policy's faster form of the same model (LoRA merged in).
        self.inference = inference
        self.eos_ids = self._eos_ids(model, tokenizer)
        self._copy: InProcessEngine | None = None

    def pinned(self, policy) -> RolloutEngine:
        """Its own copy of the model for generating in the background: refreshed from the policy at each
        call, then left alone while the policy trains. Its generation is not cut short by a stop signal: the
        batch in flight finishes, so the checkpoint the stop saves holds it."""
        if self._copy is None:
            model = copy.deepcopy(policy.model).requires_grad_(False)
            inference = (lambda: lora.merged_for_inference(model)) if policy.lora else nullcontext
            self._copy = type(self)(model, self.tokenizer, self.batch_size, inference=inference)
        self._copy.model.load_state_dict(policy.model.state_dict())
        return self._copy

    @staticmethod
    def _eos_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> set[int]:
        ids = {tokenizer.eos_token_id}
        config_eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
        if isinstance(config_eos, int):
            ids.add(config_eos)
        elif config_eos:
            ids.update(config_eos)
        return {i for i in ids if i is not None}

    def in_batches(self, prompts: list[list[int]], seeds: list[int],
                   generate_batch: Callable[[int, list[list[int]], list[int]], list[Completion]]) -> list[Completion]:
        """`generate_batch(start, prompts, seeds)` over `batch_size` prompts at a time. A batch the device has
        no memory for fails its samples (retried, the run goes on); any other error is a bug (ours or the
        model's): a crash with its traceback, never failed samples."""
        results: list[Completion] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            try:
                results.extend(generate_batch(start, chunk, seeds[start : start + self.batch_size]))
            except RuntimeError as exc:
                if not out_of_memory(exc):
                    raise
                error = f"{type(exc).__name__}: {exc}"
                results.extend(Completion([], [], "", "error", SampleStatus.FAILED, error) for _ in chunk)
        return results

    def completion(self, tokens: list[int], logprobs: list[float], stopped: bool,
                   params: SamplingParams) -> Completion:
        """One row's generated tokens [T] and their log-probs [T] (`stopped`: it ended with an EOS)."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if params.stop:
            text, tokens, logprobs, stopped = self._apply_stop(text, tokens, logprobs, params, stopped)
        status, reason = (SampleStatus.OK, "stop") if stopped else (SampleStatus.TRUNCATED, "length")
        if not text.strip():
            status = SampleStatus.EMPTY
        return Completion(tokens, logprobs, text, reason, status)

    def _apply_stop(self, text, row_tokens, row_logprobs, params, stopped):
        """Cut at the first stop string, keeping whole tokens up to and including the one that completes it."""
        cut = min((text.find(s) + len(s) for s in params.stop if s in text), default=-1)
        if cut < 0:
            return text, row_tokens, row_logprobs, stopped
        for n in range(1, len(row_tokens) + 1):
            if len(self.tokenizer.decode(row_tokens[:n], skip_special_tokens=True)) >= cut:
                return text[:cut], row_tokens[:n], row_logprobs[:n], True
        return text, row_tokens, row_logprobs, stopped


def make_in_process(kind: EngineKind, policy, batch_size: int, cancel: threading.Event | None) -> InProcessEngine:
    """The in-process engine `kind` declares (its `EngineKind.engine`), generating with `policy`'s model."""
    module, _, name = kind.engine.partition(":")
    engine_class = getattr(importlib.import_module(module), name)
    return engine_class(policy.model, policy.tokenizer, batch_size, cancel=cancel, inference=policy.inference_weights)
