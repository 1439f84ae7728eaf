"""The chunked head: the chosen tokens' log-probs, entropy and gradients equal the plain log-softmax's."""

import pytest
import torch

import grpo.policy.head as head
import grpo.policy.update as update
from grpo.config import TinyModelConfig
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from tests.unit.policy.test_update import group_batch


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_values_and_gradients_equal_autograd_through_the_full_logits(monkeypatch, temperature, dtype):
    monkeypatch.setattr(head, "CHUNK_TOKENS", 3)  # several chunks, the last one short
    torch.manual_seed(0)
    hidden = torch.randn(8, 5, dtype=dtype, requires_grad=True)  # [N, H]
    weight = torch.randn(11, 5, dtype=dtype, requires_grad=True)  # [V, H]
    targets = torch.randint(0, 11, (8,))
    upstream = torch.randn(8, dtype=torch.float32)

    logprobs, entropy = head.chosen_token_logprobs(hidden, weight, targets, temperature, with_entropy=True)
    (logprobs * upstream).sum().backward()
    chunked_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None

    full = torch.log_softmax((hidden @ weight.t()).float() / temperature, dim=-1)  # [N, V]
    expected = full.gather(-1, targets[:, None]).squeeze(-1)
    (expected * upstream).sum().backward()
    tolerance = dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logprobs, expected, **tolerance)
    torch.testing.assert_close(entropy, -(full.exp() * full).sum(-1), **tolerance)
    torch.testing.assert_close(chunked_grads[0], hidden.grad, **tolerance)
    torch.testing.assert_close(chunked_grads[1], weight.grad, **tolerance)
    # The forward pass never wrote into what the backward pass reads (a temperature applied twice).
    assert not torch.equal(chunked_grads[0], torch.zeros_like(chunked_grads[0]))


@pytest.mark.parametrize("blocked", [True, False])
def test_the_output_product_in_vocabulary_blocks_equals_the_plain_one(monkeypatch, blocked):
    monkeypatch.setattr(head, "_cpu_is_avx2_only", lambda: blocked)
    monkeypatch.setattr(head, "VOCAB_BLOCK", 4)  # 11 rows: blocks of 4, 4 and 3
    torch.manual_seed(0)
    hidden, weight = torch.randn(6, 5), torch.randn(11, 5)
    assert head.blocked_product(weight) is blocked
    torch.testing.assert_close(head.output_logits(hidden, weight), hidden @ weight.t())
    out = torch.full((8, 11), float("nan"))
    head.output_logits(hidden, weight, out=out[1:7])  # rows of a larger buffer, as the chunked head writes them
    torch.testing.assert_close(out[1:7], hidden @ weight.t())
    assert out[0].isnan().all() and out[7].isnan().all()


def test_the_blocked_product_is_a_rule_of_the_cpu_and_fp32_only(monkeypatch):
    monkeypatch.setattr(head, "_cpu_is_avx2_only", lambda: True)
    assert head.blocked_product(torch.zeros(2, 2))
    assert not head.blocked_product(torch.zeros(2, 2, dtype=torch.bfloat16))  # bf16 runs oneDNN's kernels
    monkeypatch.setattr(head, "_cpu_is_avx2_only", lambda: False)
    assert not head.blocked_product(torch.zeros(2, 2))


def test_no_entropy_asked_none_given():
    hidden, weight = torch.randn(4, 3), torch.randn(6, 3)
    _, entropy = head.chosen_token_logprobs(hidden, weight, torch.tensor([0, 1, 2, 5]), 1.0, with_entropy=False)
    assert entropy is None


@pytest.mark.parametrize("shared", [True, False])
def test_policy_logprobs_through_the_split_head_equal_the_models_own_logits(monkeypatch, shared):
    torch.manual_seed(0)
    tok = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tok, torch.float32)
    assert head.split_head(model) is not None  # a plain Llama head: the chunked path is taken
    mb = update.collate(group_batch(tok), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    results = {}
    for split in (True, False):
        if not split:
            monkeypatch.setattr(update, "split_head", lambda _model: None)
        model.zero_grad()
        logprobs, entropy = update.completion_logprobs(model, mb, 0.7, with_entropy=True, share_prompt=shared)
        weights = torch.linspace(-1, 1, logprobs.numel()).view_as(logprobs)  # [b, T] an uneven upstream gradient
        (logprobs * mb.completion_mask * weights).sum().backward()
        real = mb.completion_mask.bool()
        results[split] = logprobs[real], entropy[real], {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[True][1], results[False][1], atol=1e-5, rtol=1e-5)
    for name, grad in results[False][2].items():
        torch.testing.assert_close(results[True][2][name], grad, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("attribute", head.SCALED_HEAD_ATTRIBUTES)
def test_a_head_its_model_scales_or_caps_is_never_split_off(attribute):
    tok = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tok, torch.float32)
    setattr(model.config, attribute, 2.0)
    assert head.split_head(model) is None  # the model's own forward applies what a split head would skip
