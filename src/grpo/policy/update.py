"""The update phase: log-probs of completions under the policy, and optimizer steps on the GRPO loss."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from transformers import DynamicCache

from grpo import metric_keys as keys
from grpo.algo.loss import BatchTotals, LossConfig, measure_names, policy_loss
from grpo.algo.offpolicy import OffPolicyStats
from grpo.policy.attention import PackedPrompts, packs_prompts, shared_prefix
from grpo.policy.cache_keyword import cache_argument
from grpo.policy.fused_norm import fused_rms_norms
from grpo.policy.head import chosen_token_logprobs, split_head
from grpo.policy.optim import MasterWeightAdamW
from grpo.policy.unpad import RealTokens, real_tokens
from grpo.progress import tick


@dataclass(frozen=True)
class TrainBatch:
    """The samples an update trains on: one row per completion, ragged until collated. Made once per step
    (grpo.train.advantages), then `Policy.prepare` makes a new one with what the loss needs besides."""

    prompt_ids: list[list[int]]  # [B][P_i]
    completion_ids: list[list[int]]  # [B][T_i]
    old_logprobs: list[list[float]]  # [B][T_i] under the sampling policy (the trainer's, once recomputed)
    advantages: torch.Tensor  # [B]
    gradient_rows: list[int]  # [R] the rows the update computes (grpo.algo.loss.rows_with_gradient)
    ref_logprobs: list[torch.Tensor] | None = None  # [B][T_i], when a KL term is used
    importance_weights: list[torch.Tensor] | None = None  # [B][T_i] proximal/behaviour, off policy (algo.offpolicy)
    # Rows left out of the loss (truncated completions under algo.mask_truncated): no gradient, not in its normaliser.
    masked_rows: frozenset[int] = frozenset()

    def __len__(self) -> int:
        return len(self.completion_ids)

    @property
    def num_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)

    @property
    def loss_totals(self) -> BatchTotals:
        return BatchTotals.counting([len(c) for c in self.completion_ids], self.masked_rows)


@dataclass
class MicroBatch:
    """Rows that share a prompt (the samples of one group) point at one copy of it."""

    prompt_ids: torch.Tensor  # [g, P] the distinct prompts, left-padded
    prompt_mask: torch.Tensor  # [g, P]
    prompt_index: torch.Tensor  # [b] which prompt each row continues
    completion_ids: torch.Tensor  # [b, T] right-padded
    completion_mask: torch.Tensor  # [b, T] 1 on completion tokens
    old_logprobs: torch.Tensor  # [b, T]
    advantages: torch.Tensor  # [b]
    ref_logprobs: torch.Tensor | None = None  # [b, T]
    importance_weights: torch.Tensor | None = None  # [b, T]
    prefix: int = 0  # C: the distinct prompts' common beginning, which the packed pass runs once (0: none)


# Running the prompts' common beginning once adds an attention part to each layer of the packed pass:
# about what 8 tokens' products cost, so below that it is run with each prompt.
MIN_SHARED_TOKENS = 8


def collate(batch: TrainBatch, rows: list[int], pad_id: int, device: torch.device) -> MicroBatch:
    distinct: dict[tuple[int, ...], int] = {}
    prompt_index = [distinct.setdefault(tuple(batch.prompt_ids[r]), len(distinct)) for r in rows]
    prompts = list(distinct)
    prompt_len = max(len(p) for p in prompts)
    completion_len = max(max(len(batch.completion_ids[r]) for r in rows), 1)
    b = len(rows)
    prompt_ids = torch.full((len(prompts), prompt_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    for i, prompt in enumerate(prompts):
        prompt_ids[i, prompt_len - len(prompt) :] = torch.tensor(prompt)
        prompt_mask[i, prompt_len - len(prompt) :] = 1
    completion_ids = torch.full((b, completion_len), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((b, completion_len))
    old = torch.zeros((b, completion_len))
    ref = torch.zeros((b, completion_len)) if batch.ref_logprobs is not None else None
    weights = torch.zeros((b, completion_len)) if batch.importance_weights is not None else None
    for i, r in enumerate(rows):
        completion = batch.completion_ids[r]
        completion_ids[i, : len(completion)] = torch.tensor(completion, dtype=torch.long)
        completion_mask[i, : len(completion)] = 1
        old[i, : len(completion)] = torch.tensor(batch.old_logprobs[r])
        if ref is not None:
            ref[i, : len(completion)] = batch.ref_logprobs[r]
        if weights is not None:
            weights[i, : len(completion)] = batch.importance_weights[r]
    to = lambda t: t.to(device) if t is not None else None  # noqa: E731
    return MicroBatch(
        to(prompt_ids), to(prompt_mask), to(torch.tensor(prompt_index)), to(completion_ids), to(completion_mask),
        to(old), to(batch.advantages[rows].float()), to(ref), to(weights), shared_prefix(prompts, MIN_SHARED_TOKENS),
    )


class _Forward:
    """One forward pass of the model that yields, for the last `keep` positions (or the positions `keep`
    lists), either the logits [b, keep, V] or, when the output layer is split off (see
    `grpo.policy.head.split_head`), the final hidden states [b, keep, H]: the head is then applied a chunk
    at a time (grpo.policy.head)."""

    def __init__(self, model: torch.nn.Module, decoder: torch.nn.Module | None, real: RealTokens | None) -> None:
        self.model, self.decoder, self.real = model, decoder, real

    def needed_only(self, needed: torch.Tensor) -> contextlib.AbstractContextManager:
        """Within: the per-token layers run where `needed` [b, T] is true (grpo.policy.unpad), when they can."""
        return self.real.only(needed) if self.real is not None else contextlib.nullcontext()

    def __call__(self, keep: int | torch.Tensor, cache: DynamicCache | None = None, **inputs) -> torch.Tensor:
        if cache is not None:
            inputs |= cache_argument(self.decoder if self.decoder is not None else self.model, cache)
        if self.decoder is not None:
            hidden = self.decoder(**inputs).last_hidden_state
            return hidden[:, keep] if isinstance(keep, torch.Tensor) else hidden[:, -keep:]
        return self.model(**inputs, logits_to_keep=keep).logits


def _completion_outputs(forward: _Forward, mb: MicroBatch) -> torch.Tensor:
    """Every row as one sequence, prompt included: -> outputs [b, T, V|H] predicting each completion token."""
    completion_len = mb.completion_ids.shape[1]
    input_ids = torch.cat([mb.prompt_ids[mb.prompt_index], mb.completion_ids], dim=1)  # [b, P+T]
    attention_mask = torch.cat([mb.prompt_mask[mb.prompt_index], mb.completion_mask.long()], dim=1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    # Only the last T+1 positions are needed: the head never runs over the prompt.
    with forward.needed_only(attention_mask.bool()):
        return forward(
            completion_len + 1, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            use_cache=False,
        )[:, :-1]


def _completion_outputs_shared_prompt(forward: _Forward, mb: MicroBatch) -> torch.Tensor:
    """The same outputs, with each distinct prompt run once: its KV cache (with gradient) is expanded
    to the rows that continue it, then only completion tokens are run. Attention is causal, so this
    is the full forward computed without repeating the prompt G times."""
    cache = DynamicCache()
    prompt_positions = (mb.prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [g, P]
    first = forward(
        1, input_ids=mb.prompt_ids, attention_mask=mb.prompt_mask, position_ids=prompt_positions,
        cache=cache, use_cache=True,
    )[mb.prompt_index]  # [b, 1, V|H] predicts the first completion token
    completion_len = mb.completion_ids.shape[1]
    if completion_len == 1:
        return first
    cache.batch_select_indices(mb.prompt_index)  # indexing keeps the graph: gradients sum per prompt
    fed = mb.completion_ids[:, :-1]  # [b, T-1] each token predicts the next
    attention_mask = torch.cat([mb.prompt_mask[mb.prompt_index], mb.completion_mask[:, :-1].long()], dim=1)
    start = mb.prompt_mask.sum(-1)[mb.prompt_index]  # [b] first position after each prompt
    positions = start[:, None] + torch.arange(completion_len - 1, device=fed.device)  # [b, T-1]
    # Right padding: a fed token's output and keys are read only where the token after it is real.
    with forward.needed_only(mb.completion_mask[:, 1:].bool()):
        rest = forward(
            completion_len - 1, input_ids=fed, attention_mask=attention_mask, position_ids=positions,
            cache=cache, use_cache=True,
        )  # [b, T-1, V|H]
    return torch.cat([first, rest], dim=1)


def _completion_outputs_packed(forward: _Forward, mb: MicroBatch) -> torch.Tensor:
    """The same outputs from one pass over the micro-batch packed as one sequence: the prompts' common
    beginning once (`mb.prefix` tokens), each distinct prompt's own tokens once, then every row's fed completion
    tokens (grpo.policy.attention.PackedPrompts). Each weight's products run once over all of them, prompt and
    completion tokens alike."""
    prompts, prompt_len = mb.prompt_ids.shape
    rows, completion_len = mb.completion_ids.shape
    prefix, own_len = mb.prefix, prompt_len - mb.prefix  # C, S
    # Prompts are right-aligned at P, the longest P long: a prompt's own tokens are its last columns, so
    # columns C.. hold them right-aligned in S, and the first S columns of the mask say which are real.
    prompt_lengths = mb.prompt_mask.sum(-1)  # [g]
    beginning = mb.prompt_ids[prompt_lengths.argmax(), :prefix]  # [C] the longest prompt's first tokens
    own_ids, own_mask = mb.prompt_ids[:, prefix:], mb.prompt_mask[:, :own_len]  # [g, S]
    fed, fed_mask = mb.completion_ids[:, :-1], mb.completion_mask[:, :-1]  # [b, T-1] each token predicts the next
    packed = PackedPrompts.of(own_mask, mb.prompt_index, fed_mask, prefix)
    input_ids = torch.cat([beginning, own_ids.flatten(), fed.flatten()])[None]  # [1, C + g*S + b*(T-1)]
    prompt_positions = (mb.prompt_mask.cumsum(-1) - 1).clamp(min=0)[:, prefix:]  # [g, S] real tokens' are C..
    start = prompt_lengths[mb.prompt_index]  # [b] first position after each prompt
    fed_positions = start[:, None] + torch.arange(completion_len - 1, device=fed.device)  # [b, T-1]
    position_ids = torch.cat([torch.arange(prefix, device=fed.device), prompt_positions.flatten(),
                              fed_positions.flatten()])[None]  # [1, U]
    # The prompts' real tokens (their keys are read by every row), and a fed token where the one after it is.
    needed = torch.cat([own_mask.new_ones(prefix).bool(), own_mask.flatten().bool(),
                        mb.completion_mask[:, 1:].flatten().bool()])[None]  # [1, U]
    last_prompt_token = prefix + torch.arange(1, prompts + 1, device=fed.device) * own_len - 1  # [g]
    keep = torch.cat([last_prompt_token, packed.prompt_tokens + torch.arange(fed.numel(), device=fed.device)])
    with forward.needed_only(needed):
        outputs = forward(
            keep, input_ids=input_ids, position_ids=position_ids, attention_mask=packed.placeholder_mask(),
            packed=packed, use_cache=False,
        )[0]  # [g + b*(T-1), V|H]
    first = outputs[:prompts][mb.prompt_index][:, None]  # [b, 1, V|H] predicts the first completion token
    return torch.cat([first, outputs[prompts:].unflatten(0, (rows, completion_len - 1))], dim=1)  # [b, T, V|H]


def completion_logprobs(
    model: torch.nn.Module, mb: MicroBatch, temperature: float, with_entropy: bool = False, share_prompt: bool = True,
    pack: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """-> log-probs [b, T] of the completion tokens (at the sampling temperature), entropy [b, T] or None.
    `share_prompt`: each distinct prompt runs once for its rows; `pack`: in one pass with them, where the
    model's attention takes a packed micro-batch (else a prompt pass, then the rows from its KV cache)."""
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:  # transformers < 5
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    shared = share_prompt and len(mb.prompt_ids) < len(mb.completion_ids)
    split = split_head(model)
    # Not under checkpointing: its recomputation runs after the forward's context is left.
    forward = _Forward(model, split[0] if split else None, None if checkpointing else real_tokens(model))
    completion_len = mb.completion_ids.shape[1]
    # The norms in fused CPU kernels where they apply; not under checkpointing, which recomputes outside.
    with contextlib.nullcontext() if checkpointing else fused_rms_norms(model):
        if shared and pack and completion_len > 1 and packs_prompts(model, mb.prompt_ids.shape[1] + completion_len):
            outputs = _completion_outputs_packed(forward, mb)  # [b, T, V|H]; no KV cache, so checkpointing too
        elif shared and not checkpointing:  # gradient checkpointing turns off the KV cache this path needs
            outputs = _completion_outputs_shared_prompt(forward, mb)
        else:
            outputs = _completion_outputs(forward, mb)
    if split is None:
        return _logprobs_from_logits(outputs, mb.completion_ids, temperature, with_entropy)
    # Padding never reaches the head: only the completion tokens' hidden states do.
    real = mb.completion_mask.bool()  # [b, T]
    token_logprobs, token_entropy = chosen_token_logprobs(
        outputs[real], split[1], mb.completion_ids[real], temperature, with_entropy
    )  # [N], [N]
    logprobs = torch.zeros(real.shape, dtype=torch.float32, device=real.device).masked_scatter(real, token_logprobs)
    entropy = None
    if token_entropy is not None:
        entropy = torch.zeros(real.shape, dtype=torch.float32, device=real.device).masked_scatter(real, token_entropy)
    return logprobs, entropy


def _logprobs_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [b, T, V], targets [b, T] -> log-probs [b, T], entropy [b, T] or None."""
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits.div_(temperature)  # in place: one fewer [b, T, V] copy
    log_norm = torch.logsumexp(logits, dim=-1)  # [b, T]
    logprobs = logits.gather(-1, targets[..., None]).squeeze(-1) - log_norm
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = log_norm - (probs * logits).sum(-1)
    return logprobs, entropy


@dataclass
class PrepareStats:
    """What preparing a batch for the update measured: the sampler's log-probs against the trainer's,
    when recomputed; off policy, the importance weights (grpo.algo.offpolicy)."""

    logprob_mismatch: float | None = None  # mean |sampler - trainer| per token; None: not recomputed
    logprob_mismatch_max: float | None = None
    offpolicy: OffPolicyStats | None = None

    def metrics(self) -> dict[str, float]:
        m = {}
        if self.logprob_mismatch is not None:
            m = {keys.LOGPROB_MISMATCH: self.logprob_mismatch, keys.LOGPROB_MISMATCH_MAX: self.logprob_mismatch_max}
        if self.offpolicy is not None:
            m.update(self.offpolicy.metrics())
        return m


@dataclass
class UpdateResult:
    applied: bool
    metrics: dict[str, float] = field(default_factory=dict)  # the update's measures by their keys: actor/loss, ...
    skip_reason: str | None = None
    optimizer_steps: int = 0  # steps that changed the weights (all of them when applied)
    nonfinite: bool = False  # a non-finite loss or gradient, or weights left non-finite by the update


def micro_batches(batch: TrainBatch, size: int, rows: Sequence[int] | None = None) -> list[list[int]]:
    """Rows (all of them, or `rows`) in micro-batches of `size`, a group's samples (one prompt) side by
    side, so that each micro-batch runs a prompt once for all its samples (the shared-prompt forward);
    groups ordered by their longest row and rows within a group by length, so padding stays small. The
    loss is normalised over the whole batch, so the grouping does not change it."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row in range(len(batch)) if rows is None else rows:
        groups.setdefault(tuple(batch.prompt_ids[row]), []).append(row)
    length = lambda r: (len(batch.prompt_ids[r]) + len(batch.completion_ids[r]), r)  # noqa: E731
    ordered = sorted(groups.values(), key=lambda rows: max(length(r) for r in rows))
    order = [r for rows in ordered for r in sorted(rows, key=length)]
    return [order[i : i + size] for i in range(0, len(order), size)]


@dataclass
class Collective:
    """What one rank of many needs for its share of the update: the whole batch's sizes (the loss
    is normalised over them), how many forward/backward passes every rank makes (FSDP's collectives
    must line up, so a rank with fewer rows pads with passes of zero loss), and the switch that
    lets gradients reduce across ranks only on the last of them."""

    totals: BatchTotals  # of the rows in the loss (`TrainBatch.loss_totals`)
    num_tokens: int  # of every rank's rows, masked or not: what the entropy averages over
    computed_tokens: int  # of every rank's rows with a gradient (`TrainBatch.gradient_rows`): what metrics average over
    micro_batches: int
    set_gradient_sync: Callable[[bool], None]
    zero_loss: Callable[[], torch.Tensor]  # a loss of 0 that reaches every parameter


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
    check_stop: Callable[[], None] = lambda: None,
    collective: Collective | None = None,
) -> UpdateResult:
    """`updates` optimizer steps over the batch, each accumulating gradients over micro-batches.

    A step whose loss or gradient norm is not finite is not applied; its gradients are discarded.
    Only the rows with a gradient are computed (`batch.gradient_rows`): the loss's measures (clipping,
    ratio, KL) are means over their tokens, and the loss is normalised over the rows not masked
    (`batch.loss_totals`). The entropy is the whole batch's mean, masked rows included: exact on the rows
    computed, and on the others the sampled tokens' surprisal (-log p under the sampling distribution, whose expectation
    is that distribution's entropy), so that a collapse still shows when most groups' rewards agree.
    `check_stop` runs after every micro-batch and may raise to abandon the update before the next
    optimizer step (the weights then hold the last applied step, never a partial one).
    """
    device = next(model.parameters()).device
    totals = collective.totals if collective else batch.loss_totals
    all_tokens = max(collective.num_tokens if collective else batch.num_tokens, 1)
    computed = batch.gradient_rows
    own_tokens = sum(len(batch.completion_ids[r]) for r in computed)
    computed_tokens = collective.computed_tokens if collective else own_tokens  # every rank's
    if not computed_tokens:  # every rank alike: a step on zero gradients would still move AdamW by its momentum
        return UpdateResult(False, skip_reason="no learning signal")
    # Every rank reports the same measures, summed across ranks, whatever its rows.
    sums = dict.fromkeys((*measure_names(loss_cfg), keys.ENTROPY), 0.0)
    sums[keys.ROWS_COMPUTED], sums[keys.TOKENS_COMPUTED] = float(len(computed)), float(own_tokens)
    skipped = set(range(len(batch))).difference(computed)
    sums[keys.ENTROPY] = -sum(lp for r in skipped for lp in batch.old_logprobs[r]) / all_tokens
    steps_applied = 0
    model.train()
    chunks = micro_batches(batch, micro_batch_size, computed)
    passes = collective.micro_batches if collective else len(chunks)
    for update in range(updates):
        optimizer.zero_grad()
        loss_total = 0.0
        for index in range(passes):
            tick(update * passes + index, updates * passes, "micro-batches")
            if collective:
                collective.set_gradient_sync(index == passes - 1)
                if index >= len(chunks):  # this rank's rows are done: a pass that keeps the collectives in step
                    collective.zero_loss().backward()
                    continue
            mb = collate(batch, chunks[index], pad_id, device)
            logprobs, entropy = completion_logprobs(model, mb, temperature, with_entropy=update == 0)
            loss, metrics = policy_loss(
                logprobs, mb.old_logprobs, mb.advantages, mb.completion_mask, loss_cfg, totals, mb.ref_logprobs,
                mb.importance_weights,
            )
            loss.backward()
            try:
                check_stop()
            except BaseException:
                optimizer.zero_grad()
                raise
            loss_total += loss.item()
            weight = metrics.pop("tokens") / max(computed_tokens, 1)
            for key, value in metrics.items():
                sums[key] += weight * value / updates
            if entropy is not None:
                sums[keys.ENTROPY] += (entropy * mb.completion_mask).sum().item() / all_tokens
        grad_norm = optimizer.clip_grad_norm(max_grad_norm)
        sums[keys.LOSS] = sums.get(keys.LOSS, 0.0) + loss_total / updates
        sums[keys.GRAD_NORM] = sums.get(keys.GRAD_NORM, 0.0) + grad_norm / updates
        if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            optimizer.zero_grad()
            what = "loss" if not math.isfinite(loss_total) else "gradient norm"
            return UpdateResult(False, sums, f"non-finite {what} at update {update}; update not applied",
                                steps_applied, nonfinite=True)
        optimizer.step()
        steps_applied += 1
    optimizer.zero_grad()
    return UpdateResult(steps_applied == updates, sums, optimizer_steps=steps_applied)
