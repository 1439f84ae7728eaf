"""The engine's decode steps as one CUDA graph replays them: the whole batch with fixed shapes, finished rows
computing on, attention over whole KV buffers. On a CPU the same static steps run eagerly (the engine takes
them on a GPU only), so the form is checked here and the capture where a GPU is."""

import pytest
import torch

from grpo.policy.attention import additive
from grpo.policy.cache_keyword import cache_argument
from grpo.policy.models import build_char_tokenizer
from grpo.rollout.engines import SamplingParams, embedded
from grpo.rollout.engines.decode_step import DecodeStep
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rollout.engines.kv_cache import preallocated_cache
from tests.unit.rollout.engines.test_decode_step import grouped_query_model, left_padded

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (scripts/gpu_check.py runs the suite on one)"))]


def generate(engine, monkeypatch, static: bool):
    monkeypatch.setattr(embedded, "graphs_apply", lambda device: static)
    tokenizer = engine.tokenizer
    # rows that finish at different steps (a short budget for some, EOS for others at temperature 1)
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("1+1=", "what is 23+45? ", "7", "1+1=", "99")]
    return engine.generate(prompts, SamplingParams(14, 1.0), [3, 4, 5, 6, 7])


@pytest.mark.parametrize("device", DEVICES)
def test_static_steps_sample_what_the_shrinking_batch_samples(monkeypatch, device):
    tokenizer = build_char_tokenizer()
    model = grouped_query_model(tokenizer).to(device)
    model.config.eos_token_id = tokenizer.convert_tokens_to_ids("4")  # a common character: rows end early
    engine = EmbeddedEngine(model, tokenizer, batch_size=8)
    static = generate(engine, monkeypatch, True)
    assert engine.decode_form.endswith("replayed as a CUDA graph")
    shrinking = generate(engine, monkeypatch, False)
    assert not engine.decode_form.endswith("replayed as a CUDA graph")
    lengths = sorted(len(c.token_ids) for c in shrinking)
    assert lengths[0] < lengths[-1] == 14  # some rows finished while others went on
    assert [c.token_ids for c in static] == [c.token_ids for c in shrinking]
    for ours, theirs in zip(static, shrinking):
        # the same arithmetic over longer (masked) buffers and all rows: sums may round in another order
        torch.testing.assert_close(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs), atol=1e-4, rtol=0)
    assert [c.finish_reason for c in static] == [c.finish_reason for c in shrinking]


@pytest.mark.parametrize("device", DEVICES)
def test_static_steps_give_transformers_hidden_states(device):
    """`DecodeStep.static` over whole buffers and a mask of every position: transformers' hidden states, in
    fp32 within the summation order's rounding (its sums run over the masked positions' exact zeros too)."""
    tokenizer = build_char_tokenizer()
    decoder = grouped_query_model(tokenizer).to(device).get_decoder()
    step = DecodeStep(decoder, rows=3)
    prompts, steps = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]], 6
    ids, mask, positions = (x.to(device) for x in left_padded(tokenizer, prompts))
    caches = [preallocated_cache(ids.shape[1] + steps) for _ in range(2)]
    with torch.no_grad():
        for cache in caches:
            decoder(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_argument(decoder, cache),
                    use_cache=True)
        buffers = [(layer.key_buffer, layer.value_buffer) for layer in caches[1].layers]
        capacity = buffers[0][0].shape[2]
        bias = torch.full((len(prompts), capacity), torch.finfo(torch.float32).min, device=device)  # [R, C]
        bias[:, : ids.shape[1]] = additive(mask.bool(), torch.float32)
        tokens, next_position = torch.arange(20, 23, device=device), positions[:, -1] + 1
        write = torch.tensor([ids.shape[1]], device=device)
        for _ in range(steps):
            mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=-1)
            expected = decoder(input_ids=tokens[:, None], attention_mask=mask, position_ids=next_position[:, None],
                               **cache_argument(decoder, caches[0]), use_cache=True).last_hidden_state[:, -1]
            bias.index_fill_(1, write, 0)
            ours = step.static(tokens, next_position, write, bias, buffers)
            torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
            tokens, next_position, write = tokens + 1, next_position + 1, write + 1
