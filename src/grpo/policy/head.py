"""Log-probs and entropy of the chosen tokens straight from the last hidden states, a chunk of tokens
at a time, so the full-vocabulary logits never exist in fp32 for the whole micro-batch.

The plain way (`model(...).logits.float()`, then log-softmax) holds the bf16 logits, their fp32 copy,
the softmax's temporaries and, in the backward pass, an fp32 gradient of the same [tokens, vocab]
size: about 1 GiB for 1,300 tokens of a 49k vocabulary. Here the forward keeps only the model-dtype
logits (what the lm_head produced anyway, and all that the gradient needs), and the backward turns
each chunk of them into its gradient and multiplies it out through the lm_head at once.
"""

from __future__ import annotations

import torch

from grpo.policy.constants import HEAD_CHUNK_TOKENS as CHUNK_TOKENS  # tokens per chunk


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [c, V] in the model's dtype -> fp32 logits / temperature [c, V], never written into the saved logits."""
    if temperature == 1.0:
        return logits.float()  # a copy from bf16; in fp32 the logits themselves, only read
    return logits.to(torch.float32, copy=True).div_(temperature)


class _ChosenTokenLogprobs(torch.autograd.Function):
    """hidden [N, H], weight [V, H], targets [N] -> log p(target) [N] at `temperature`, and the
    distribution's entropy [N] (no gradient)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature: float, with_entropy: bool):
        n = hidden.shape[0]
        logits = torch.empty((n, weight.shape[0]), dtype=hidden.dtype, device=hidden.device)  # [N, V]
        logprobs = torch.empty(n, dtype=torch.float32, device=hidden.device)  # [N]
        entropy = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        for start in range(0, n, CHUNK_TOKENS):
            rows = slice(start, start + CHUNK_TOKENS)
            torch.matmul(hidden[rows], weight.t(), out=logits[rows])
            scaled = _scaled(logits[rows], temperature)  # [c, V]
            log_norm = torch.logsumexp(scaled, dim=-1)  # [c]
            logprobs[rows] = scaled.gather(-1, targets[rows, None]).squeeze(-1) - log_norm
            if with_entropy:  # log Z - sum_v p_v s_v, the sum as one dot product per row (no [c, V] product)
                probs = torch.softmax(scaled, dim=-1)  # [c, V]
                entropy[rows] = log_norm - torch.bmm(probs[:, None, :], scaled[:, :, None]).view(-1)
        ctx.save_for_backward(hidden, weight, targets, logits)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_entropy):
        hidden, weight, targets, logits = ctx.saved_tensors
        temperature = ctx.temperature
        for start in range(0, hidden.shape[0], CHUNK_TOKENS):
            rows = slice(start, start + CHUNK_TOKENS)
            if temperature == 1.0:  # straight from the model's dtype, one pass
                probs = torch.softmax(logits[rows], dim=-1, dtype=torch.float32)  # [c, V]
            else:
                probs = torch.softmax(_scaled(logits[rows], temperature), dim=-1)
            # d log p(t) / d logits = (onehot(t) - softmax) / temperature, formed in fp32 and written once into
            # the logits' buffer (spent now) in their dtype.
            probs.scatter_add_(-1, targets[rows, None], torch.full_like(probs[:, :1], -1.0))
            torch.mul(probs, (grad_logprobs[rows] / -temperature)[:, None], out=logits[rows])
        # Two whole matmuls, as the lm_head's own backward would do them (the same rounding).
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
