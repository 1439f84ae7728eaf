"""In-process generation with the training model itself: batched, KV-cached, a group's prompt prefilled once
and the distinct prompts' common beginning once (grpo.policy.attention.shared_prefix), the decode step taken
through the model's own modules where it has the form (grpo.rollout.engines.decode_step)."""

from __future__ import annotations

import logging

import torch

from grpo.policy.attention import shared_prefix
from grpo.policy.cache_keyword import cache_argument
from grpo.policy.head import output_logits, split_head
from grpo.policy.packed import Product, packed_linears
from grpo.progress import tick
from grpo.rollout.engines.decode_step import DecodeStep, llama_shaped
from grpo.rollout.engines.graphed import GraphedDecode, graphs_apply
from grpo.rollout.engines.in_process import InProcessEngine, out_of_memory
from grpo.rollout.engines.kv_cache import preallocated_cache
from grpo.rollout.types import Completion, GenerationCancelled, SamplingParams

log = logging.getLogger(__name__)


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator] | None,
    scratch: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] float32 -> (tokens [B], logprobs [B]) under the temperature/top-p sampling
    distribution. Row i draws its uniform from generators[i], so a row's sample does not depend on
    the other rows in the batch (inverse-CDF sampling).

    scratch: a float32 [>= B, V] buffer that a generation reuses at every step. Given, the log-probs are
    written there and `logits` (then the caller's own buffer) is overwritten, so the sampler allocates no
    [B, V] tensor: on 2 CPU cores a fresh one (12 MB at 64 rows) costs as much in page faults as the
    pass that fills it. The same values either way."""
    own = scratch is not None
    logprobs_out = scratch[: len(logits)] if own else None
    if params.temperature <= 0:
        logprobs = torch.log_softmax(logits, dim=-1, out=logprobs_out)
        tokens = logits.argmax(dim=-1)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits.div_(params.temperature) if own else logits / params.temperature
    logprobs = torch.log_softmax(scaled, dim=-1, out=logprobs_out)  # [B, V]
    if params.top_p < 1.0:
        sorted_lp, sorted_idx = logprobs.sort(dim=-1, descending=True)
        cumulative = sorted_lp.exp().cumsum(dim=-1)
        drop_sorted = cumulative - sorted_lp.exp() > params.top_p  # keep the token that crosses top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, sorted_idx, drop_sorted)
        logprobs = torch.log_softmax(logprobs.masked_fill(drop, float("-inf")), dim=-1)
    if generators is None:
        tokens = torch.multinomial(logprobs.exp(), 1).squeeze(-1)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    u = torch.stack([torch.rand((), generator=g, device=logits.device) for g in generators])  # [B]
    cdf = torch.exp(logprobs, out=logits if own else None).cumsum_(dim=-1)  # [B, V] non-decreasing
    # The first token whose cumulative probability reaches u: as many tokens as lie below u.
    tokens = torch.searchsorted(cdf, u[:, None]).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)  # [B]
    chosen = logprobs.gather(-1, tokens[:, None]).squeeze(-1)  # [B]
    possible = chosen.exp() > 0
    if not possible.all():  # u == 0 before a token of no probability, or u past the rounded total
        tokens = torch.where(possible, tokens, logprobs.argmax(-1))
        chosen = logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, chosen


def live_rows_in_place(live: torch.Tensor) -> torch.Tensor:
    """live [A] bool -> the rows to continue [L]: finished rows are dropped from the batch (later steps
    compute only live rows) by moving the last live rows into their places, so that of each layer's KV
    cache only those rows are copied (keeping the order would copy every row after the first finished one)."""
    rows = int(live.sum())
    keep = torch.arange(rows, device=live.device)  # [L]
    keep[(~live[:rows]).nonzero().squeeze(-1)] = live[rows:].nonzero().squeeze(-1) + rows
    return keep


# A prefill pass costs a fixed overhead (every layer's calls) besides its tokens' products: on 2 CPU cores
# about what 64 tokens' products take in SmolLM2-135M, so the distinct prompts' common beginning is prefilled
# once (its keys and values then copied to their rows) only where that saves more.
MIN_SHARED_TOKENS = 64


class EmbeddedEngine(InProcessEngine):
    decode_form = "none yet"  # how the last generation's decode steps ran, in words (benchmarks record it)
    cuda_graphs = True  # on a GPU, decode steps replayed as a CUDA graph (False: eager, bench/generation.py's reference)
    fused_kernels = True  # on a CPU, the decode step's per-token work in fused kernels where they apply (False: eager)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[Completion]:
        seeds = list(range(len(prompts))) if seeds is None else seeds
        with self.inference():
            split = split_head(self.model)  # of the model as merged for inference
            with packed_linears(self.model, self.batch_size, split[1] if split else None) as packed_head:
                # The engine's own decode step where the body has the form (made once: it lays out its products).
                step = (DecodeStep(split[0], self.batch_size, self.fused_kernels)
                        if split and llama_shaped(split[0]) else None)
                # (done, total) decode steps, for the progress display
                self._progress = (0, -(-len(prompts) // self.batch_size) * params.max_new_tokens)

                def one_batch(start: int, chunk: list[list[int]], chunk_seeds: list[int]) -> list[Completion]:
                    self._progress = (start // self.batch_size * params.max_new_tokens, self._progress[1])
                    return self._generate_batch(chunk, params, chunk_seeds, split, packed_head, step)

                return self.in_batches(prompts, seeds, one_batch)

    @torch.no_grad()  # not inference_mode: FSDP2 reuses the unsharded parameter buffers for training
    def _generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int],
        split: tuple[torch.nn.Module, torch.Tensor] | None, packed_head: Product | None, step: DecodeStep | None,
    ) -> list[Completion]:
        was_training = self.model.training
        self.model.eval()
        try:
            tokens, logprobs, finished_by_stop = self._decode(prompts, params, seeds, split, packed_head, step)
        finally:
            self.model.train(was_training)
        return [self.completion(row_tokens, row_logprobs, stopped, params)
                for row_tokens, row_logprobs, stopped in zip(tokens, logprobs, finished_by_stop)]

    def _decode(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int],
                split: tuple[torch.nn.Module, torch.Tensor] | None, packed_head: Product | None,
                step: DecodeStep | None):
        device = next(self.model.parameters()).device
        generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
        batch = len(prompts)
        # A group's samples share one prompt: each distinct prompt is prefilled once, and its KV
        # cache and last logits are then repeated for the rows that continue it.
        distinct: dict[tuple[int, ...], int] = {}
        prompt_index = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts], device=device)  # [B]
        unique = [list(p) for p in distinct]
        # The cache's positions: the shared beginning (C), then each prompt's own tokens left-padded (S).
        prefix = shared_prefix(unique, MIN_SHARED_TOKENS)
        own_len = max(len(p) for p in unique) - prefix
        pad_id = self.tokenizer.pad_token_id
        input_ids = torch.full((len(unique), own_len), pad_id, dtype=torch.long)  # [U, S] left-padded
        attention_mask = torch.zeros((len(unique), prefix + own_len), dtype=torch.long)  # [U, C+S]
        attention_mask[:, :prefix] = 1
        for i, prompt in enumerate(unique):
            input_ids[i, own_len - len(prompt) + prefix :] = torch.tensor(prompt[prefix:])
            attention_mask[i, prefix + own_len - len(prompt) + prefix :] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [U, C+S]
        cache = preallocated_cache(prefix + own_len + params.max_new_tokens)
        eos = torch.tensor(sorted(self.eos_ids), device=device)
        forward = self.model if split is None else split[0]  # the whole model, or its body without the head
        with_cache = cache_argument(forward, cache)  # named once: every decode step hands the same cache
        if step is not None and not step.fits(prefix + own_len + params.max_new_tokens):
            step = None  # a sliding window shorter than this generation
        self.decode_form = step.form if step else "transformers' forward"

        def head(hidden: torch.Tensor) -> torch.Tensor:  # [rows, H] -> logits [rows, V] in the model's dtype
            return packed_head(hidden) if packed_head else output_logits(hidden, split[1])

        def next_logits(**inputs: torch.Tensor) -> torch.Tensor:
            """-> logits [rows, V] after each row's last position, in the model's dtype; the output product
            through its packed form or `output_logits` where the head can be split off the body (faster
            forms on some CPUs)."""
            if split is None:
                return forward(**inputs, **with_cache, use_cache=True, logits_to_keep=1).logits[:, -1]
            if step is not None and inputs["input_ids"].shape[1] == 1:
                return head(step(inputs["input_ids"][:, 0], inputs["attention_mask"], inputs["position_ids"][:, 0],
                                 cache))
            return head(forward(**inputs, **with_cache, use_cache=True).last_hidden_state[:, -1])  # [rows, H]

        out_tokens: list[list[int]] = [[] for _ in range(batch)]
        out_logprobs: list[list[float]] = [[] for _ in range(batch)]
        stopped = [False] * batch
        active = torch.arange(batch, device=device)  # [A] original row of each live row
        if prefix:  # once, then its keys and values copied to every distinct prompt's row
            next_logits(input_ids=input_ids.new_tensor(unique[0][:prefix])[None], attention_mask=attention_mask[:1, :prefix],
                        position_ids=position_ids[:1, :prefix])
            cache.batch_select_indices(torch.zeros(len(unique), dtype=torch.long, device=device))
        logits = next_logits(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids[:, prefix:])  # [U, V]
        logits = logits[prompt_index].float()  # [A, V]
        # fp32 [B, V] buffers that every step reuses (the sampler's): the logits, where the model's are in
        # another dtype, and the log-probs.
        held, scratch = torch.empty_like(logits), torch.empty_like(logits)
        if len(unique) < batch:
            cache.batch_select_indices(prompt_index)
        attention_mask, position_ids = attention_mask[prompt_index], position_ids[prompt_index]  # [A, P]
        next_pos = position_ids[:, -1]  # [A]
        # On a GPU the decode steps replay one CUDA graph of the whole batch (finished rows keep computing).
        graphed = (self._graphed(step, head, cache, attention_mask, next_pos + 1)
                   if step and self.cuda_graphs and graphs_apply(device) else None)
        if graphed:
            self.decode_form = f"{step.form}, replayed as a CUDA graph"
        done_before, total = self._progress  # decode steps of the earlier batches of this call
        for position in range(params.max_new_tokens):
            if self.cancel.is_set():
                raise GenerationCancelled("generation cancelled")
            tick(done_before + position, total, "decode steps")
            tokens, token_logprobs = sample_next(logits, params, [generators[r] for r in active.tolist()], scratch)
            is_eos = torch.isin(tokens, eos)
            for row, token, lp, ended in zip(active.tolist(), tokens.tolist(), token_logprobs.tolist(), is_eos.tolist()):
                out_tokens[row].append(token)
                out_logprobs[row].append(lp)
                stopped[row] = ended
            if is_eos.all():
                break
            if is_eos.any():
                if graphed:  # the graph's batch keeps every row: only which of them are live changes
                    active, tokens = active[~is_eos], tokens[~is_eos]
                else:
                    keep = live_rows_in_place(~is_eos)
                    cache.batch_select_indices(keep)
                    active, tokens, attention_mask, next_pos = (active[keep], tokens[keep], attention_mask[keep],
                                                                next_pos[keep])
            if graphed:
                logits = graphed(active, tokens)  # [A, V]
            else:
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(active), 1)], dim=-1)
                next_pos = next_pos + 1
                logits = next_logits(input_ids=tokens[:, None], attention_mask=attention_mask,
                                     position_ids=next_pos[:, None])
            logits = logits if logits.dtype == torch.float32 else held[: len(logits)].copy_(logits)  # ours to overwrite
        return out_tokens, out_logprobs, stopped

    def _graphed(self, step: DecodeStep, head, cache, attention_mask: torch.Tensor,
                 next_position: torch.Tensor) -> GraphedDecode | None:
        """The batch's decode steps captured, or None where the capture fails: this engine's steps then run
        eagerly, said once. (Its warm-up step wrote only the position the first eager step writes again.)"""
        try:
            return GraphedDecode(step, head, cache, attention_mask, next_position)
        except RuntimeError as exc:
            if out_of_memory(exc):
                raise
            self.cuda_graphs = False
            log.warning("the decode step could not be captured as a CUDA graph (%s): its steps run eagerly, slower",
                        str(exc).splitlines()[0])
            return None
