"""The embedded engine: batching, KV cache and left padding must not change what a prompt generates,
and the log-probs it reports must be those a training forward pass computes."""

import pytest
import torch

from grpo.config import TinyModelConfig
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.policy.update import TrainBatch, collate, completion_logprobs
from grpo.rollout.engines import SampleStatus, SamplingParams
from grpo.rollout.engines.embedded import EmbeddedEngine, sample_next
from grpo.rollout.engines.transformers import TransformersEngine


def make_engine(batch_size=8, seed=0, engine=EmbeddedEngine):
    """An in-process engine (`engine`: its class) on a tiny model of its own, built from `seed`."""
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tokenizer, torch.float32)
    return engine(model, tokenizer, batch_size), tokenizer


def prompts_for(tokenizer, texts):
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_greedy_is_independent_of_batching_and_padding():
    engine, tok = make_engine()
    prompts = prompts_for(tok, ["1+1=", "what is 23+45? ", "7"])
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    together = engine.generate(prompts, params)
    alone = [engine.generate([p], params)[0] for p in prompts]
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    assert all(len(c.token_ids) == len(c.logprobs) for c in together)


@pytest.mark.parametrize("blocked_head", [False, True])
def test_sampled_logprobs_match_a_training_forward_pass(monkeypatch, blocked_head):
    import grpo.policy.head as head

    # Both forms of the output product, in generation and in the update (grpo.policy.head.blocked_product).
    monkeypatch.setattr(head, "_cpu_is_avx2_only", lambda: blocked_head)
    monkeypatch.setattr(head, "VOCAB_BLOCK", 7)  # several blocks of the tiny vocabulary, the last one short
    engine, tok = make_engine()
    # Repeated prompts (a group's samples) are prefilled once and continued from the shared cache.
    prompts = prompts_for(tok, ["abc", "hello world", "abc", "9+9=", "abc"])
    temperature = 0.7
    outs = engine.generate(prompts, SamplingParams(10, temperature), list(range(1, 1 + len(prompts))))
    batch = TrainBatch(prompts, [o.token_ids for o in outs], [o.logprobs for o in outs], torch.zeros(len(prompts)), [])
    mb = collate(batch, list(range(len(prompts))), tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        logprobs, _ = completion_logprobs(engine.model, mb, temperature)
    torch.testing.assert_close(logprobs * mb.completion_mask, mb.old_logprobs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_shared_beginning_prefilled_once_generates_what_each_prompt_alone_does(monkeypatch, temperature):
    from grpo.rollout.engines import embedded

    engine, tok = make_engine(batch_size=16)
    instructions = "Answer with the sum only, as digits, nothing else. "  # every prompt's first 51 tokens
    prompts = prompts_for(tok, [instructions + q for q in ["12+7=", "3+4=", "40+41=", "9+9=", "1+2+3="]])
    assert embedded.shared_prefix(prompts, embedded.MIN_SHARED_TOKENS) == len(instructions)
    grouped = [p for p in prompts for _ in range(3)]  # groups of samples: their prompts shared too
    params, seeds = SamplingParams(max_new_tokens=10, temperature=temperature), list(range(len(grouped)))
    shared = engine.generate(grouped, params, seeds)
    monkeypatch.setattr(embedded, "MIN_SHARED_TOKENS", 10**9)
    assert embedded.shared_prefix(prompts, embedded.MIN_SHARED_TOKENS) == 0
    whole = engine.generate(grouped, params, seeds)
    assert [o.token_ids for o in shared] == [o.token_ids for o in whole]
    for a, b in zip(shared, whole):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5)


def test_a_sample_depends_on_its_seed_not_on_its_batch():
    engine, tok = make_engine()
    prompts = prompts_for(tok, ["x", "y"]) * 3
    params = SamplingParams(8, 1.0)
    a = engine.generate(prompts, params, [5, 6, 7, 8, 9, 10])
    b = engine.generate(prompts, params, [5, 6, 7, 8, 9, 10])
    c = engine.generate(prompts, params, [11, 12, 13, 14, 15, 16])
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.token_ids for o in a] != [o.token_ids for o in c]
    # The same (prompt, seed) alone, in another batch, or in another order gives the same sample.
    alone = engine.generate(prompts[3:4], params, [8])
    reordered = engine.generate(prompts[::-1], params, [10, 9, 8, 7, 6, 5])
    engine.batch_size = 2
    chunked = engine.generate(prompts, params, [5, 6, 7, 8, 9, 10])
    assert alone[0].token_ids == a[3].token_ids
    assert [o.token_ids for o in reordered[::-1]] == [o.token_ids for o in a]
    assert [o.token_ids for o in chunked] == [o.token_ids for o in a]


def test_finish_reasons_and_statuses():
    engine, tok = make_engine()
    eos = tok.eos_token_id
    # An output layer that always prefers EOS: every completion stops at once and is empty.
    head = torch.nn.Linear(engine.model.config.hidden_size, len(tok), bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[eos] = 10.0
    engine.model.lm_head = head
    out = engine.generate(prompts_for(tok, ["a"]), SamplingParams(5, 0.0))[0]
    assert out.token_ids == [eos] and out.finish_reason == "stop" and out.status == SampleStatus.EMPTY


def test_truncated_when_max_new_tokens_is_reached():
    engine, tok = make_engine()
    head = torch.nn.Linear(engine.model.config.hidden_size, len(tok), bias=True)
    with torch.no_grad():
        head.bias.zero_()
        head.bias[tok.eos_token_id] = -100.0  # never stop
    engine.model.lm_head = head
    out = engine.generate(prompts_for(tok, ["a"]), SamplingParams(6, 1.0), [0])[0]
    assert len(out.token_ids) == 6 and out.finish_reason == "length" and out.status == SampleStatus.TRUNCATED


@pytest.mark.parametrize("engine_class", [EmbeddedEngine, TransformersEngine])
def test_stop_strings_cut_the_completion(engine_class):
    engine, tok = make_engine(engine=engine_class)
    outs = engine.generate(prompts_for(tok, ["a"]) * 4, SamplingParams(12, 1.0), [3, 4, 5, 6])
    stop = outs[0].text[2:4]
    cut = engine.generate(prompts_for(tok, ["a"]) * 4, SamplingParams(12, 1.0, stop=(stop,)), [3, 4, 5, 6])[0]
    assert cut.text.endswith(stop) and len(cut.text) <= 4 and cut.finish_reason == "stop"
    assert len(cut.token_ids) == len(cut.logprobs) < len(outs[0].token_ids)


def test_top_p_keeps_the_smallest_set_over_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    params = SamplingParams(1, temperature=1.0, top_p=0.7)
    seen = {int(sample_next(logits, params, [torch.Generator().manual_seed(s)])[0]) for s in range(200)}
    assert seen == {0, 1}
    token, logprob = sample_next(logits, params, [torch.Generator().manual_seed(0)])
    assert abs(logprob.exp().item() - (0.5 if token.item() == 0 else 0.3) / 0.8) < 1e-5


def test_a_draw_is_the_first_token_whose_cumulative_probability_reaches_its_uniform():
    torch.manual_seed(0)
    logits = torch.randn(16, 300) * 4  # [B, V]
    logits[:, 7] = float("-inf")  # a token of no probability is never drawn
    params = SamplingParams(1, temperature=0.7)
    tokens, logprobs = sample_next(logits, params, [torch.Generator().manual_seed(s) for s in range(16)])
    u = torch.stack([torch.rand((), generator=torch.Generator().manual_seed(s)) for s in range(16)])  # [B]
    cdf = torch.softmax(logits / 0.7, dim=-1).cumsum(-1)  # [B, V]
    assert torch.equal(tokens, (cdf < u[:, None]).sum(-1))
    assert torch.allclose(logprobs, torch.log_softmax(logits / 0.7, -1).gather(-1, tokens[:, None]).squeeze(-1))
    assert not (tokens == 7).any()


@pytest.mark.parametrize("params", [SamplingParams(1, temperature=0.7), SamplingParams(1, temperature=0.9, top_p=0.8),
                                    SamplingParams(1, temperature=0.0)])
def test_the_sampler_draws_the_same_into_a_reused_buffer(params):
    torch.manual_seed(0)
    logits = torch.randn(6, 300) * 4  # [B, V]
    scratch = torch.full((8, 300), float("nan"))  # a generation's buffer, for up to 8 rows
    seeds = [torch.Generator().manual_seed(s) for s in range(6)], [torch.Generator().manual_seed(s) for s in range(6)]
    fresh = sample_next(logits, params, seeds[0])
    reused = sample_next(logits.clone(), params, seeds[1], scratch)
    assert torch.equal(fresh[0], reused[0]) and torch.equal(fresh[1], reused[1])
    assert torch.isfinite(scratch[:6]).all() and scratch[6:].isnan().all()  # the log-probs went there


def raising_forward(model, exc: BaseException):
    """Raise from the decoder body, which every forward runs (the engine may apply the head itself)."""
    def hook(module, args, kwargs):
        raise exc

    return model.get_decoder().register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("exc", [torch.OutOfMemoryError("CUDA out of memory (simulated)"),
                                 RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB")])
def test_running_out_of_memory_fails_the_samples(exc):
    engine, tok = make_engine()
    raising_forward(engine.model, exc)
    outs = engine.generate(prompts_for(tok, ["a", "b"]), SamplingParams(4, 1.0))
    assert [o.status for o in outs] == [SampleStatus.FAILED] * 2
    assert str(exc) in outs[0].error


@pytest.mark.parametrize("exc", [RuntimeError("mat1 and mat2 shapes cannot be multiplied"), ValueError("a bug"),
                                 TypeError("a bug")])
def test_a_bug_in_generation_is_a_crash_not_failed_samples(exc):
    engine, tok = make_engine()
    raising_forward(engine.model, exc)
    with pytest.raises(type(exc), match=str(exc)):
        engine.generate(prompts_for(tok, ["a", "b"]), SamplingParams(4, 1.0))


def test_progress_counts_decode_steps_across_batches_without_going_back(monkeypatch):
    from grpo.rollout.engines import embedded

    engine, tok = make_engine(batch_size=2)
    prompts = prompts_for(tok, ["1+1=", "what is 23+45? ", "7", "abc", "hello", "9+9="])  # 3 batches
    ticks = []
    monkeypatch.setattr(embedded, "tick", lambda done, total, unit: ticks.append((done, total)))
    engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0), list(range(6)))
    done = [d for d, _ in ticks]
    assert {t for _, t in ticks} == {18} and done == sorted(done)  # 3 batches x 6 steps, never back
    assert done[-1] >= 12  # the last batch counts on from the first two
