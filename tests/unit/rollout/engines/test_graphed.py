"""The engine's decode steps as one CUDA graph replays them: the whole batch with fixed shapes, finished rows
computing on, attention over whole KV buffers. On a CPU the same static steps run eagerly (the engine takes
them on a GPU only), so the form is checked here and the capture where a GPU is."""

import pytest
import torch

from grpo.policy.models import build_char_tokenizer
from grpo.rollout.engines import SamplingParams, embedded
from grpo.rollout.engines.embedded import EmbeddedEngine
from tests.unit.rollout.engines.test_decode_step import grouped_query_model

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
