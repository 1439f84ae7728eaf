"""Generation through transformers' own `generate` on the policy's model, in-process (rollout.engine=transformers).

Slower than the embedded engine (each row prefills its own prompt, and transformers does its per-step work),
but it is transformers' decoding loop, KV cache and masks: it runs whatever model transformers generates
with, and it is the reference the embedded engine's output is checked against
(tests/unit/rollout/engines/test_transformers.py).

The draw is grpo's. `generate` samples with the global random generator, which would tie a sample to its
batch and to whoever else draws from it; here every row draws from its own seeded generator
(grpo.rollout.seeds) with the sampler the embedded engine uses, as the last logits processor, and
`generate` takes that token greedily.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import (
    GenerationConfig,
    GenerationMixin,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from grpo.rollout.engines.embedded import sample_next
from grpo.rollout.engines.in_process import InProcessEngine
from grpo.rollout.types import Completion, GenerationCancelled, SamplingParams


class SeededDraw(LogitsProcessor):
    """Draws row i's next token with generators[i]: -> scores that leave only that token, and its log-prob
    under the sampling distribution kept for each step."""

    def __init__(self, params: SamplingParams, generators: list[torch.Generator]) -> None:
        self.params, self.generators = params, generators
        self.logprobs: list[torch.Tensor] = []  # one [B] per step

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:  # scores [B, V]
        tokens, logprobs = sample_next(scores.float(), self.params, self.generators)  # [B], [B]
        self.logprobs.append(logprobs)
        return torch.full_like(scores, float("-inf")).scatter_(-1, tokens[:, None], 0.0)


class Cancelled(StoppingCriteria):
    """Every row ends at the next token once `event` is set (a stop signal)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


@contextmanager
def plain_generation_config(model: GenerationMixin) -> Iterator[None]:
    """`generate` fills what a call leaves unset from the model's generation config: a checkpoint's
    repetition penalty, say, would change the distribution drawn from, and so the log-probs."""
    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = saved


class TransformersEngine(InProcessEngine):
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[Completion]:
        seeds = list(range(len(prompts))) if seeds is None else seeds
        with self.inference():
            return self.in_batches(prompts, seeds, lambda _, chunk, chunk_seeds: self._generate_batch(
                chunk, params, chunk_seeds))

    @torch.no_grad()  # not inference_mode: FSDP2 reuses the unsharded parameter buffers for training
    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]) -> list[Completion]:
        # The causal LM itself: a LoRA-wrapped policy's adapters sit inside it, and its generation config is
        # the one generate reads.
        model = next(m for m in self.model.modules() if isinstance(m, GenerationMixin))
        device = next(model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.tokenizer.pad_token_id, dtype=torch.long)  # [B, P] left-padded
        attention_mask = torch.zeros_like(input_ids)  # [B, P]
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt):] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt):] = 1
        draw = SeededDraw(params, [torch.Generator(device=device).manual_seed(seed) for seed in seeds])
        config = GenerationConfig(max_new_tokens=params.max_new_tokens, do_sample=False,
                                  eos_token_id=sorted(self.eos_ids), pad_token_id=self.tokenizer.pad_token_id)
        was_training = model.training
        model.eval()
        try:
            with plain_generation_config(model):
                # synced_gpus off: under torchrun the weights are gathered for the rollout (Policy.unsharded), so
                # a rank's forwards communicate nothing and it may stop when its own rows are done.
                sequences = model.generate(
                    input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), generation_config=config,
                    logits_processor=LogitsProcessorList([draw]),
                    stopping_criteria=StoppingCriteriaList([Cancelled(self.cancel)]), synced_gpus=False)  # [B, P+T]
        finally:
            model.train(was_training)
        if self.cancel.is_set():
            raise GenerationCancelled("generation cancelled")
        generated = sequences[:, width:].tolist()  # [B][T]: a row that ended is padded after its EOS
        logprobs = torch.stack(draw.logprobs[: len(generated[0])], dim=1).tolist()  # [B][T]
        completions = []
        for row_tokens, row_logprobs in zip(generated, logprobs):
            end = next((t + 1 for t, token in enumerate(row_tokens) if token in self.eos_ids), None)
            completions.append(self.completion(row_tokens[:end], row_logprobs[:end], end is not None, params))
        return completions
