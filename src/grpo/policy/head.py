"""Log-probs and entropy of the chosen tokens straight from the last hidden states, a chunk of tokens
at a time, so the full-vocabulary logits never exist in fp32 for the whole micro-batch.

The plain way (`model(...).logits.float()`, then log-softmax) holds the bf16 logits, their fp32 copy,
the softmax's temporaries and, in the backward pass, an fp32 gradient of the same [tokens, vocab]
size: about 1 GiB for 1,300 tokens of a 49k vocabulary. Here the forward keeps only the model-dtype
logits (what the lm_head produced anyway, and all that the gradient needs), and the backward turns
each chunk of them into its gradient and multiplies it out through the lm_head at once.

The logits themselves (here and in generation) come from `output_logits`, which on an AVX2 CPU computes
the same product a block of the vocabulary at a time (see `blocked_product`).
"""

from __future__ import annotations

import functools

import torch
from torch.distributed.fsdp import FSDPModule

from grpo.policy.constants import HEAD_CHUNK_TOKENS as CHUNK_TOKENS  # tokens per chunk

VOCAB_BLOCK = 1024  # output-embedding rows per product in the blocked form
SCALED_HEAD_ATTRIBUTES = ("final_logit_softcapping", "logit_scale", "logits_scaling", "lm_head_multiplier",
                          "dim_model_base")


@functools.cache
def _cpu_is_avx2_only() -> bool:
    return torch.backends.cpu.get_cpu_capability() == "AVX2"


def blocked_product(weight: torch.Tensor) -> bool:
    """Whether `output_logits` runs as vocabulary blocks. On an AVX2-only CPU (AMD EPYC family 25 model 1,
    torch 2.13's MKL, fp32) the product [N, H] x [H, V] with V = 49,152 runs at about half the speed of the
    same dot products as [1024, H] x [H, N] blocks, each transposed back into its columns of the logits:
    1.2x to 2.5x faster at N = 8 to 256 in two runs (bench/head.py). Not measured on AVX-512, AMX or
    GPUs, where the plain product stays. A rule of the machine, not a timing taken at start: every process
    of a run (a resume included) must compute the same logits to the last bit."""
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and _cpu_is_avx2_only()


def output_logits(hidden: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """hidden [N, H], weight [V, H] -> logits hidden @ weight.T [N, V] (into `out` when given)."""
    if not blocked_product(weight):
        return torch.matmul(hidden, weight.t(), out=out)
    n, vocab = hidden.shape[0], weight.shape[0]
    out = torch.empty((n, vocab), dtype=hidden.dtype, device=hidden.device) if out is None else out
    block = torch.empty((min(VOCAB_BLOCK, vocab), n), dtype=hidden.dtype, device=hidden.device)  # [B, N]
    for start in range(0, vocab, VOCAB_BLOCK):
        rows = weight[start : start + VOCAB_BLOCK]  # [b, H]
        torch.mm(rows, hidden.t(), out=block[: len(rows)])
        out[:, start : start + len(rows)].copy_(block[: len(rows)].t())
    return out


def split_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.Tensor] | None:
    """The decoder body and the output embedding's weight, where the logits are plainly
    hidden @ weight.T; None where they are not, or the weight is not whole here (FSDP shards it
    with the root module, and only the root's forward gathers it)."""
    if isinstance(model, FSDPModule):
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wraps the model
    config = base.config
    # Models whose CausalLM scales or caps the head's input or output (Gemma 2/3, Cohere, Granite, Falcon-H1, MiniCPM).
    if any(getattr(config, name, None) for name in SCALED_HEAD_ATTRIBUTES):
        return None
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.bias is not None:  # an adapted or biased head: as it is
        return None
    return base.get_decoder(), head.weight


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [c, V] in the model's dtype -> fp32 logits / temperature [c, V]: a copy, except in fp32 at
    temperature 1, where it is the logits themselves (the forward only reads them; the backward spends them)."""
    if temperature == 1.0:
        return logits.float()
    return logits.to(torch.float32, copy=True).div_(temperature)


def _log_norm_and_entropy(scaled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """scaled [c, V] fp32 -> (log Z [c], entropy [c]) from one pass of exponentials: log Z formed as
    torch.logsumexp forms it (the maximum, the exponentials of the differences, their sum; the same bits), and
    the entropy log Z - sum_v p_v s_v from the same exponentials, the sum as one dot product per row."""
    peak = scaled.amax(dim=-1, keepdim=True)  # [c, 1]
    peak.masked_fill_(peak.abs() == float("inf"), 0)  # as logsumexp: a row of infinities is not shifted
    exps = torch.sub(scaled, peak).exp_()  # [c, V]
    total = exps.sum(dim=-1)  # [c]
    log_norm = total.log().add_(peak.squeeze(-1))
    return log_norm, log_norm - torch.bmm(exps[:, None, :], scaled[:, :, None]).view(-1) / total


class _ChosenTokenLogprobs(torch.autograd.Function):
    """hidden [N, H], weight [V, H], targets [N] -> log p(target) [N] at `temperature`, and the
    distribution's entropy [N] (no gradient)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, with_entropy: bool):
        n = hidden.shape[0]
        logits = torch.empty((n, weight.shape[0]), dtype=hidden.dtype, device=hidden.device)  # [N, V]
        logprobs = torch.empty(n, dtype=torch.float32, device=hidden.device)  # [N]
        entropy = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        log_norm = torch.empty(n, dtype=torch.float32, device=hidden.device)  # [N] log Z, which the backward reuses
        for start in range(0, n, CHUNK_TOKENS):
            rows = slice(start, start + CHUNK_TOKENS)
            output_logits(hidden[rows], weight, out=logits[rows])
            scaled = _scaled(logits[rows], temperature)  # [c, V]
            if with_entropy:
                log_norm[rows], entropy[rows] = _log_norm_and_entropy(scaled)
            else:
                log_norm[rows] = torch.logsumexp(scaled, dim=-1)
            logprobs[rows] = scaled.gather(-1, targets[rows, None]).squeeze(-1) - log_norm[rows]
        ctx.save_for_backward(hidden, weight, targets, logits, log_norm)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_entropy):
        hidden, weight, targets, logits, log_norm = ctx.saved_tensors
        temperature = ctx.temperature
        for start in range(0, hidden.shape[0], CHUNK_TOKENS):
            rows = slice(start, start + CHUNK_TOKENS)
            # softmax as exp(s - log Z) with the forward's log Z: no pass for the maximum or the sum. In place:
            # _scaled's copy, or (fp32 at temperature 1) the logits themselves, spent now.
            probs = _scaled(logits[rows], temperature).sub_(log_norm[rows, None]).exp_()  # [c, V]
            # d log p(t) / d logits = (onehot(t) - softmax) / temperature, formed in fp32 and written once into
            # the logits' buffer in their dtype.
            probs.scatter_add_(-1, targets[rows, None], torch.full_like(probs[:, :1], -1.0))
            torch.mul(probs, (grad_logprobs[rows] / -temperature)[:, None], out=logits[rows])
        # Two whole matmuls, as the lm_head's own backward would do them (the same rounding). In vocabulary
        # blocks the weight's runs no faster (bench/head.py), unlike the logits.
        grad_hidden = logits @ weight if ctx.needs_input_grad[0] else None  # [N, H]
        grad_weight = logits.t() @ hidden if ctx.needs_input_grad[1] else None  # [V, H]
        return grad_hidden, grad_weight, None, None, None


def chosen_token_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [N, H] (the final norm applied), weight [V, H] the output embedding, targets [N] ->
    (log-probs [N] fp32 with gradient, entropy [N] fp32 or None)."""
    temperature = temperature if temperature > 0 else 1.0
    logprobs, entropy = _ChosenTokenLogprobs.apply(hidden, weight, targets, temperature, with_entropy)
    return logprobs, entropy if with_entropy else None
