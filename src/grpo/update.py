"""The update phase: log-probs of completions under the policy, and optimizer steps on the GRPO loss."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from grpo.loss import BatchTotals, LossConfig, policy_loss
from grpo.optim import MasterWeightAdamW


@dataclass
class TrainBatch:
    """The samples an update trains on: one row per completion, ragged until collated."""

    prompt_ids: list[list[int]]  # [B][P_i]
    completion_ids: list[list[int]]  # [B][T_i]
    old_logprobs: list[list[float]]  # [B][T_i] under the sampling policy
    advantages: torch.Tensor  # [B]
    ref_logprobs: list[torch.Tensor] | None = None  # [B][T_i], when a KL term is used

    def __len__(self) -> int:
        return len(self.completion_ids)

    @property
    def num_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [b, P+T] prompts left-padded, completions right-padded
    attention_mask: torch.Tensor  # [b, P+T]
    position_ids: torch.Tensor  # [b, P+T]
    completion_mask: torch.Tensor  # [b, T]
    old_logprobs: torch.Tensor  # [b, T]
    advantages: torch.Tensor  # [b]
    ref_logprobs: torch.Tensor | None = None  # [b, T]


def collate(batch: TrainBatch, rows: list[int], pad_id: int, device: torch.device) -> MicroBatch:
    prompt_len = max(len(batch.prompt_ids[r]) for r in rows)
    completion_len = max(max(len(batch.completion_ids[r]) for r in rows), 1)
    b = len(rows)
    input_ids = torch.full((b, prompt_len + completion_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    completion_mask = torch.zeros((b, completion_len))
    old = torch.zeros((b, completion_len))
    ref = torch.zeros((b, completion_len)) if batch.ref_logprobs is not None else None
    for i, r in enumerate(rows):
        prompt, completion = batch.prompt_ids[r], batch.completion_ids[r]
        input_ids[i, prompt_len - len(prompt) : prompt_len] = torch.tensor(prompt)
        input_ids[i, prompt_len : prompt_len + len(completion)] = torch.tensor(completion, dtype=torch.long)
        attention_mask[i, prompt_len - len(prompt) : prompt_len + len(completion)] = 1
        completion_mask[i, : len(completion)] = 1
        old[i, : len(completion)] = torch.tensor(batch.old_logprobs[r])
        if ref is not None:
            ref[i, : len(completion)] = batch.ref_logprobs[r]
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    to = lambda t: t.to(device) if t is not None else None  # noqa: E731
    return MicroBatch(
        to(input_ids), to(attention_mask), to(position_ids), to(completion_mask), to(old),
        to(batch.advantages[rows].float()), to(ref),
    )


def completion_logprobs(
    model: torch.nn.Module, mb: MicroBatch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """-> log-probs [b, T] of the completion tokens (at the sampling temperature), entropy [b, T] or None."""
    completion_len = mb.completion_mask.shape[1]
    # Only the last T+1 positions' logits are needed: skip the lm_head over the prompt.
    logits = model(
        input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids,
        use_cache=False, logits_to_keep=completion_len + 1,
    ).logits[:, :-1].float()  # [b, T, V]
    if temperature > 0 and temperature != 1.0:
        logits.div_(temperature)  # in place: one fewer [b, T, V] copy
    targets = mb.input_ids[:, -completion_len:]  # [b, T]
    log_norm = torch.logsumexp(logits, dim=-1)  # [b, T]
    logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - log_norm
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = log_norm - (probs * logits).sum(-1)
    return logprobs, entropy


@dataclass
class UpdateResult:
    applied: bool
    metrics: dict[str, float] = field(default_factory=dict)
    skip_reason: str | None = None


def micro_batches(batch: TrainBatch, size: int) -> list[list[int]]:
    """Rows grouped by length, so each micro-batch pads little; the loss is normalised over the
    whole batch, so the grouping does not change it."""
    order = sorted(range(len(batch)), key=lambda r: (len(batch.prompt_ids[r]) + len(batch.completion_ids[r]), r))
    return [order[i : i + size] for i in range(0, len(order), size)]


def update_policy(
    model: torch.nn.Module,
    optimizer: MasterWeightAdamW,
    batch: TrainBatch,
    loss_cfg: LossConfig,
    *,
    updates: int,
    micro_batch_size: int,
    max_grad_norm: float,
    temperature: float,
    pad_id: int,
    inject_nan: bool = False,
) -> UpdateResult:
    """`updates` optimizer steps over the batch, each accumulating gradients over micro-batches.

    A step whose loss or gradient norm is not finite is not applied; its gradients are discarded.
    """
    device = next(model.parameters()).device
    totals = BatchTotals(num_tokens=batch.num_tokens, num_sequences=len(batch))
    sums: dict[str, float] = {}
    steps_applied = 0
    model.train()
    for update in range(updates):
        optimizer.zero_grad()
        loss_total = 0.0
        for rows in micro_batches(batch, micro_batch_size):
            mb = collate(batch, rows, pad_id, device)
            logprobs, entropy = completion_logprobs(model, mb, temperature, with_entropy=update == 0)
            loss, metrics = policy_loss(
                logprobs, mb.old_logprobs, mb.advantages, mb.completion_mask, loss_cfg, totals, mb.ref_logprobs
            )
            if inject_nan:
                loss = loss * float("nan")
            loss.backward()
            optimizer.accumulate_grads()
            loss_total += loss.item()
            weight = metrics.pop("tokens") / totals.num_tokens
            for key, value in metrics.items():
                sums[f"{key}"] = sums.get(key, 0.0) + weight * value / updates
            if entropy is not None:
                ent = (entropy * mb.completion_mask).sum().item() / totals.num_tokens
                sums["entropy"] = sums.get("entropy", 0.0) + ent
        grad_norm = optimizer.clip_grad_norm(max_grad_norm)
        sums["loss"] = sums.get("loss", 0.0) + loss_total / updates
        sums["grad_norm"] = sums.get("grad_norm", 0.0) + grad_norm / updates
        if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            optimizer.zero_grad()
            what = "loss" if not math.isfinite(loss_total) else "gradient norm"
            return UpdateResult(False, sums, f"non-finite {what} at update {update}; update not applied")
        optimizer.step()
        steps_applied += 1
    optimizer.zero_grad()
    return UpdateResult(steps_applied == updates, sums)
