"""The policy: the model being trained, its optimizer and frozen reference, the update, and their state.

The loop talks to the policy only through this class, so the sharded policy (FSDP2, one shard per
rank) takes the local one's place without the loop knowing: log-probs, one update, finiteness,
saving and loading. Sharded, every method is collective: all ranks call it together.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import torch
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from grpo import metric_keys
from grpo.algo.loss import BatchTotals, LossConfig
from grpo.algo.offpolicy import importance_weights
from grpo.config import RunConfig
from grpo.dist import SINGLE, Ranks
from grpo.errors import ConfigError
from grpo.policy import lora, sharding, state
from grpo.policy.models import DTYPES, load_model_and_tokenizer
from grpo.policy.optim import MasterWeightAdamW
from grpo.policy.update import (
    Collective,
    PrepareStats,
    TrainBatch,
    UpdateResult,
    collate,
    completion_logprobs,
    micro_batches,
    update_policy,
)
from grpo.rundir.direct import Written


class Policy:
    def __init__(self, cfg: RunConfig, device: torch.device, ranks: Ranks = SINGLE) -> None:
        self.cfg, self.device, self.ranks = cfg, device, ranks
        self.sharded = ranks.distributed
        self.lora = cfg.model.lora.enabled
        if self.sharded and self.lora:
            raise ConfigError("model.lora under torchrun is not supported yet: train LoRA in one process, or "
                              "full weights under torchrun")
        # Sharded, the parameters are the optimizer's fp32 master copy; FSDP computes in model.dtype.
        model_cfg = dataclasses.replace(cfg.model, dtype="float32") if self.sharded else cfg.model
        self.model, self.tokenizer = load_model_and_tokenizer(model_cfg, device)
        self.uses_reference = cfg.algo.kl_coef > 0
        # The KL reference is the starting model, frozen. With LoRA it costs nothing: it is the base
        # with the adapters switched off. Without, it is a copy, made only when KL is on.
        self.ref_model: torch.nn.Module | None = None
        if self.lora:
            self.model = lora.wrap(self.model, cfg.model.lora)
            self.base_hash = lora.base_sha256(self.model)  # the base is frozen: hashed once
        elif self.uses_reference:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        if self.sharded:
            compute = DTYPES[cfg.model.dtype]
            sharding.shard(self.model, compute)
            if self.ref_model is not None:
                sharding.shard(self.ref_model, compute)
        self.optimizer = MasterWeightAdamW(self.model, cfg.actor)
        self.loss_cfg = LossConfig(cfg.algo.clip_low, cfg.algo.clip_high, cfg.algo.loss_agg, cfg.algo.kl_coef,
                                   cfg.algo.kl_estimator, cfg.rollout.max_new_tokens, cfg.algo.ratio_level)
        # How many updates the weights have taken (saved with checkpoints); rollouts carry it.
        self.version = 0
        # Changes whenever the weights do (an update or a load), so an engine knows to sync.
        self.revision = 0
        self._unsharded_depth = 0  # see unsharded()

    @property
    def lr(self) -> float:
        return self.optimizer.optimizer.param_groups[0]["lr"]

    def set_lr(self, lr: float) -> None:
        self.optimizer.set_lr(lr)

    @contextlib.contextmanager
    def unsharded(self) -> Iterator[None]:
        """For generation and evaluation: the weights gathered once for the whole phase. Within it,
        another `unsharded` (a server's probe inside the rollout) changes nothing."""
        if not self.sharded or self._unsharded_depth:
            yield
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(sharding.unsharded(self.model))
            if self.ref_model is not None:
                stack.enter_context(sharding.unsharded(self.ref_model))
            self._unsharded_depth += 1
            try:
                yield
            finally:
                self._unsharded_depth -= 1

    def prepare(self, batch: TrainBatch, recompute_old: bool) -> tuple[TrainBatch, PrepareStats]:
        """-> the batch with what the loss needs beyond the sampler's output (recomputed old log-probs when
        asked for, and the reference model's log-probs when a KL term is used), a new value; and how far
        the sampler's log-probs are from the trainer's, when recomputed (drift shows on the curves).
        Off policy (rollout.max_staleness > 0) the recomputed log-probs are the proximal policy's, and
        each token gets its importance weight proximal/behaviour (grpo.algo.offpolicy)."""
        stats = PrepareStats()
        with self.unsharded():
            if recompute_old:
                sampler = batch.old_logprobs
                batch = dataclasses.replace(batch, old_logprobs=self.logprobs(batch))
                diffs = [abs(a - b) for s, t in zip(sampler, batch.old_logprobs) for a, b in zip(s, t)]
                if diffs:
                    stats.logprob_mismatch, stats.logprob_mismatch_max = sum(diffs) / len(diffs), max(diffs)
                if self.cfg.rollout.max_staleness > 0:
                    flat = lambda rows: torch.tensor([x for row in rows for x in row], dtype=torch.float64)  # noqa: E731
                    weights, stats.offpolicy = importance_weights(flat(batch.old_logprobs), flat(sampler),
                                                                  self.cfg.algo.importance_cap)  # [tokens]
                    per_row = list(weights.split([len(row) for row in sampler]))  # [B][T_i]
                    batch = dataclasses.replace(batch, importance_weights=per_row)
            if self.uses_reference:
                reference = [torch.tensor(lp) for lp in self.reference_logprobs(batch)]  # [B][T_i]
                batch = dataclasses.replace(batch, ref_logprobs=reference)
        return batch, stats

    def reference_logprobs(self, batch: TrainBatch) -> list[list[float]]:
        if self.lora:
            with self.model.disable_adapter():
                return self.logprobs(batch)
        return self.logprobs(batch, self.ref_model)

    def inference_weights(self) -> ContextManager[torch.nn.Module]:
        """The model to generate with, for the duration: with LoRA the adapters merged in (one matmul
        per layer; see grpo.policy.lora.merged_for_inference)."""
        return lora.merged_for_inference(self.model) if self.lora else contextlib.nullcontext(self.model)

    @property
    def inference_is_exact(self) -> bool:
        """Whether `inference_weights` computes the trained function itself. Not for LoRA in half
        precision: the merged weights are rounded, which moved SmolLM2's bf16 log-probs by 0.04 on
        average (0.4 at most) per token, against 6e-4 for the adapted model's own decoding."""
        return not self.lora or self.cfg.model.dtype == "float32"

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

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: list[int]) -> list[float]:
        """[T-1] log p(ids[k] | ids[:k]) at temperature 1: what a server's weights are checked against."""
        was_training = self.model.training
        self.model.eval()
        try:
            with self.unsharded():
                ids = torch.tensor([token_ids], device=self.device)  # [1, T]
                logits = self.model(input_ids=ids).logits[0, :-1].float()  # [T-1, V]
        finally:
            self.model.train(was_training)
        return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()

    def update(self, batch: TrainBatch, check_stop: Callable[[], None] = lambda: None) -> UpdateResult:
        result = update_policy(
            self.model, self.optimizer, batch, self.loss_cfg,
            updates=self.cfg.algo.updates_per_batch, micro_batch_size=self.cfg.algo.micro_batch_size,
            max_grad_norm=self.cfg.actor.max_grad_norm, temperature=self.cfg.rollout.temperature,
            pad_id=self.tokenizer.pad_token_id, check_stop=check_stop,
            collective=self._collective(batch) if self.sharded else None,
        )
        if self.sharded:  # every rank's share of the sums; the gradient norm is global already
            summed = sorted(k for k in result.metrics if k != metric_keys.GRAD_NORM)
            result.metrics.update(zip(summed, self.ranks.sum([result.metrics[k] for k in summed])))
        if result.applied:
            self.version += 1
        if result.optimizer_steps:
            self.revision += 1
        return result

    def _collective(self, batch: TrainBatch) -> Collective:
        totals = batch.loss_totals
        tokens, sequences, all_tokens, computed_tokens = self.ranks.sum([
            totals.num_tokens, totals.num_sequences, batch.num_tokens,
            sum(len(batch.completion_ids[r]) for r in batch.gradient_rows)])
        (passes,) = self.ranks.max([len(micro_batches(batch, self.cfg.algo.micro_batch_size, batch.gradient_rows))])
        pad = torch.tensor([[self.tokenizer.pad_token_id]], device=self.device)
        return Collective(
            BatchTotals(int(tokens), int(sequences)), int(all_tokens), int(computed_tokens), max(int(passes), 1),
            lambda enabled: sharding.set_gradient_sync(self.model, enabled),
            lambda: self.model(input_ids=pad).logits.float().sum() * 0.0,
        )

    def check_update(self, result: UpdateResult, scan: bool) -> None:
        """Mark an applied update that left a weight non-finite. With a finite, clipped gradient an
        AdamW step cannot make a finite fp32/bf16 weight non-finite, so the full scan (a pass over
        every weight) runs only where that does not hold, and where asked (`scan`: before every
        checkpoint, which must never hold a poisoned model)."""
        scan = scan or self.cfg.actor.max_grad_norm <= 0 or self.cfg.model.dtype == "float16"
        if result.applied and scan and not self.params_finite():
            # The weights did change: only a rollback (the breaker's default) undoes this.
            result.skip_reason, result.nonfinite = "non-finite parameters after the update", True

    def params_finite(self) -> bool:
        return not self.ranks.any(not self.optimizer.params_finite())

    def save_model(self, directory: Path) -> None:
        """What a checkpoint holds: a directory `AutoModelForCausalLM.from_pretrained` loads or, with
        LoRA, only the adapter and what rebuilds the base (see grpo.policy.lora)."""
        if self.lora:
            lora.save_adapter(self.model, self.tokenizer, directory, self.cfg.model, self.base_hash)
        else:
            self.save_full_model(directory)

    def save_full_model(self, directory: Path) -> None:
        """A directory `AutoModelForCausalLM.from_pretrained` loads, LoRA adapters merged in: what a
        server serves. Sharded, the weights are gathered to rank 0, which writes it."""
        if self.lora:
            lora.save_merged(self.model, directory)
            self.tokenizer.save_pretrained(directory)
            return
        if not self.sharded:
            self.model.save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)
            return
        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not self.ranks.main:
            return
        directory.mkdir(parents=True, exist_ok=True)
        dtype = DTYPES[self.cfg.model.dtype]
        if getattr(self.model.config, "tie_word_embeddings", False):
            full.pop("lm_head.weight", None)
        save_file({k: v.to(dtype).contiguous() for k, v in full.items()}, directory / "model.safetensors",
                  metadata={"format": "pt"})
        config = copy.deepcopy(self.model.config)
        config.dtype = dtype
        config.save_pretrained(directory)
        if self.model.generation_config is not None:
            self.model.generation_config.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)

    def _check_kind(self, model_dir: Path) -> None:
        if lora.is_adapter_dir(model_dir) != self.lora:
            held = "a full model" if self.lora else "a LoRA adapter"
            raise ValueError(f"{model_dir} holds {held}, but model.lora.rank={self.cfg.model.lora.rank}")

    def save_state(self, directory: Path) -> dict[Path, Written]:
        """Trainable weights and optimizer state for an exact resume, at any number of ranks (each
        writes its shards). With LoRA those are the adapters: the base is rebuilt from its name.
        -> the size and CRC32 of each file this rank wrote."""
        return state.save(self.model, self.optimizer, directory, self.sharded)

    def load_state(self, checkpoint: Path) -> None:
        """From a checkpoint directory: its `policy/` state, after checking its `model/` is the same
        kind (and, with LoRA, trained on this base with this rank)."""
        self._check_kind(checkpoint / "model")
        if self.lora:
            lora.load_adapter(self.model, checkpoint / "model", self.base_hash)
        state.load(self.model, self.optimizer, checkpoint / "policy", self.sharded)
        self.revision += 1

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.version = saved.get("version", 0)
