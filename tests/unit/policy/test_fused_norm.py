"""The update's RMSNorms in the fused kernel: swapped in only where it applies and only within, the update's
log-probs and gradients those of transformers' norms within bf16 rounding."""

import contextlib

import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from grpo.policy import fused_norm, update
from grpo.policy.fused_norm import fused_rms_norms
from grpo.policy.models import build_char_tokenizer
from grpo.policy.update import TrainBatch, collate, completion_logprobs
from tests.unit.policy.test_kernels import bf16, needs_kernels
from tests.unit.rollout.engines.test_decode_step import grouped_query_model


@needs_kernels
def test_only_bf16_transformers_norms_are_swapped_and_only_within():
    tokenizer = build_char_tokenizer()
    model = grouped_query_model(tokenizer, bf16)
    norms = [m for m in model.modules() if type(m).__name__ == "LlamaRMSNorm"]
    with fused_rms_norms(model) as swapped:
        assert swapped == len(norms) == 5  # 2 layers x 2, and the final norm
        assert all("forward" in vars(m) for m in norms)
        with torch.no_grad():
            fp32_input = norms[0](torch.randn(2, 32))  # another input than the update's: the module's own forward
        assert fp32_input.dtype == torch.float32
    assert not any("forward" in vars(m) for m in norms)
    with fused_rms_norms(grouped_query_model(tokenizer)) as swapped:  # fp32
        assert swapped == 0


@needs_kernels
def test_the_updates_log_probs_and_gradients_are_within_rounding_of_transformers_norms(monkeypatch):
    tokenizer = build_char_tokenizer()
    model = grouped_query_model(tokenizer, bf16).train()
    for module in model.modules():
        if type(module).__name__ == "LlamaRMSNorm":
            torch.nn.init.normal_(module.weight, 1.0, 0.2)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("1+1=", "what is 23+45? ")]
    completions = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    batch = TrainBatch([prompts[0]] * 2 + [prompts[1]] * 2, completions, [[0.0] * len(c) for c in completions],
                       torch.ones(4), gradient_rows=[0, 1, 2, 3])
    mb = collate(batch, [0, 1, 2, 3], tokenizer.pad_token_id, torch.device("cpu"))
    swaps = []

    def counted(model):
        swaps.append(1)
        return fused_rms_norms(model)

    results = []
    for norms in (counted, lambda model: contextlib.nullcontext()):
        monkeypatch.setattr(update, "fused_rms_norms", norms)
        model.zero_grad(set_to_none=True)
        logprobs, _ = completion_logprobs(model, mb, 0.7)
        (logprobs * mb.completion_mask).sum().backward()
        results.append((logprobs.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert swaps
    (fused_lp, fused_grads), (eager_lp, eager_grads) = results
    torch.testing.assert_close(fused_lp, eager_lp, atol=0.05, rtol=0)
    for name, grad in eager_grads.items():
        scale = grad.float().abs().max().item()
        assert (fused_grads[name].float() - grad.float()).abs().max().item() <= 0.05 * scale + 1e-6, name


def test_a_norm_of_another_kind_or_precision_is_not_taken():
    assert fused_norm.fuses(LlamaRMSNorm(8).to(bf16))
    assert not fused_norm.fuses(LlamaRMSNorm(8))  # fp32
    own = type("LlamaRMSNorm", (torch.nn.Module,), {})()  # a class of that name, not transformers'
    own.weight = torch.nn.Parameter(torch.ones(8, dtype=bf16))
    assert not fused_norm.fuses(own)
