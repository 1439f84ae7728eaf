"""The policy: the model being trained, its optimizer and frozen reference, the update, and their state.

The loop talks to the policy only through this class, so a sharded policy (FSDP2) can take its place
without the loop knowing: log-probs, one update, finiteness checks, saving and loading.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch

from grpo.algo.loss import LossConfig
from grpo.config import RunConfig
from grpo.policy import lora
from grpo.policy.models import load_model_and_tokenizer
from grpo.policy.optim import MasterWeightAdamW
from grpo.policy.update import TrainBatch, UpdateResult, collate, completion_logprobs, micro_batches, update_policy
from grpo.rundir.checkpoints import load_weights


class Policy:
    def __init__(self, cfg: RunConfig, device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        self.model, self.tokenizer = load_model_and_tokenizer(cfg.model, device)
        self.lora = cfg.model.lora.enabled
        self.uses_reference = cfg.algo.kl_coef > 0
        # The KL reference is the starting model, frozen. With LoRA it costs nothing: it is the base
        # with the adapters switched off. Without, it is a copy, made only when KL is on.
        self.ref_model: torch.nn.Module | None = None
        if self.lora:
            self.model = lora.wrap(self.model, cfg.model.lora)
            self.base_hash = lora.base_sha256(self.model)  # the base is frozen: hashed once
        elif self.uses_reference:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = MasterWeightAdamW(self.model, cfg.actor)
        self.loss_cfg = LossConfig(cfg.algo.clip_low, cfg.algo.clip_high, cfg.algo.loss_agg, cfg.algo.kl_coef,
                                   cfg.algo.kl_estimator, cfg.rollout.max_new_tokens)
        # How many updates the weights have taken (saved with checkpoints); rollouts carry it.
        self.version = 0
        # Changes whenever the weights do (an update or a load), so an engine knows to sync.
        self.revision = 0

    @property
    def lr(self) -> float:
        return self.optimizer.optimizer.param_groups[0]["lr"]

    def set_lr(self, lr: float) -> None:
        self.optimizer.set_lr(lr)

    def prepare(self, batch: TrainBatch, recompute_old: bool) -> dict[str, float]:
        """Fill in what the loss needs beyond the sampler's output: recomputed old log-probs when
        asked for, and the reference model's log-probs when a KL term is used. -> how far the
        sampler's log-probs are from the trainer's, when recomputed (drift shows on the curves)."""
        metrics = {}
        if recompute_old:
            sampler = batch.old_logprobs
            batch.old_logprobs = self.logprobs(batch)
            diffs = [abs(a - b) for s, t in zip(sampler, batch.old_logprobs) for a, b in zip(s, t)]
            if diffs:
                metrics = {"rollout/logprob_mismatch": sum(diffs) / len(diffs),
                           "rollout/logprob_mismatch_max": max(diffs)}
        if self.uses_reference:
            batch.ref_logprobs = [torch.tensor(lp) for lp in self.reference_logprobs(batch)]
        return metrics

    def reference_logprobs(self, batch: TrainBatch) -> list[list[float]]:
        if self.lora:
            with self.model.disable_adapter():
                return self.logprobs(batch)
        return self.logprobs(batch, self.ref_model)

    def inference_weights(self) -> ContextManager[torch.nn.Module]:
        """The model to generate with, for the duration: with LoRA the adapters merged in (one matmul
        per layer; see grpo.policy.lora.merged_for_inference)."""
        return lora.merged_for_inference(self.model) if self.lora else nullcontext(self.model)

    @property
    def inference_is_exact(self) -> bool:
        """Whether `inference_weights` computes the trained function itself. Not for LoRA in half
        precision: the merged weights are rounded, which moved SmolLM2's bf16 log-probs by 0.04 on
        average (0.4 at most) per token, against 6e-4 for the adapted model's own decoding."""
        return not self.lora or self.cfg.model.dtype == "float32"

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: list[int]) -> list[float]:
        """[T-1] log p(ids[k] | ids[:k]) at temperature 1: what a server's weights are checked against."""
        was_training = self.model.training
        self.model.eval()
        try:
            ids = torch.tensor([token_ids], device=self.device)  # [1, T]
            logits = self.model(input_ids=ids).logits[0, :-1].float()  # [T-1, V]
        finally:
            self.model.train(was_training)
        return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch, model: torch.nn.Module | None = None) -> list[list[float]]:
        """Per-token log-probs [B][T_i] of the batch's completions under `model` (the policy by default)."""
        model = model if model is not None else self.model
        out: list[list[float]] = [[] for _ in range(len(batch))]
        was_training = model.training
        model.eval()  # what the sampler saw: no dropout (LoRA's, when set)
        try:
            for rows in micro_batches(batch, self.cfg.algo.micro_batch_size):  # grouped by length, not in order
                mb = collate(batch, rows, self.tokenizer.pad_token_id, self.device)
                logprobs, _ = completion_logprobs(model, mb, self.cfg.rollout.temperature)  # [b, T]
                for i, r in enumerate(rows):
                    out[r] = logprobs[i, : len(batch.completion_ids[r])].tolist()
        finally:
            model.train(was_training)
        return out

    def update(self, batch: TrainBatch, inject_nan: bool = False,
               check_stop: Callable[[], None] = lambda: None) -> UpdateResult:
        result = update_policy(
            self.model, self.optimizer, batch, self.loss_cfg,
            updates=self.cfg.algo.updates_per_batch, micro_batch_size=self.cfg.algo.micro_batch_size,
            max_grad_norm=self.cfg.actor.max_grad_norm, temperature=self.cfg.rollout.temperature,
            pad_id=self.tokenizer.pad_token_id, inject_nan=inject_nan, check_stop=check_stop,
        )
        if result.applied:
            self.version += 1
        if result.optimizer_steps:
            self.revision += 1
        return result

    def params_finite(self) -> bool:
        return self.optimizer.params_finite()

    def save_model(self, directory: Path) -> None:
        """What a checkpoint holds: a directory `AutoModelForCausalLM.from_pretrained` loads or, with
        LoRA, only the adapter and what rebuilds the base (see grpo.policy.lora)."""
        if self.lora:
            lora.save_adapter(self.model, self.tokenizer, directory, self.cfg.model, self.base_hash)
        else:
            self.model.save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)

    def save_full_model(self, directory: Path) -> None:
        """A directory `AutoModelForCausalLM.from_pretrained` loads, LoRA adapters merged in: what a
        server serves."""
        if self.lora:
            lora.save_merged(self.model, directory)
        else:
            self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def load_model(self, directory: Path) -> None:
        """Restore what `save_model` wrote; a LoRA checkpoint for a full model or the reverse is refused."""
        if lora.is_adapter_dir(directory) != self.lora:
            held = "a full model" if self.lora else "a LoRA adapter"
            raise ValueError(f"{directory} holds {held}, but model.lora.rank={self.cfg.model.lora.rank}")
        if self.lora:
            lora.load_adapter(self.model, directory, self.base_hash)
        else:
            load_weights(directory, self.model)
        self.revision += 1

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = state.get("version", 0)
