"""The transformers engine: transformers' own generate, drawing grpo's seeded samples. With the same seeds it
draws what the embedded engine draws, its log-probs are a training forward pass's, and it keeps the engine
contract (statuses, stop strings, failures, a stop signal) on its own."""

import pytest
import torch

from grpo.config import load_config
from grpo.policy.policy import Policy
from grpo.policy.update import TrainBatch, collate, completion_logprobs
from grpo.rollout.engines import GenerationCancelled, SampleStatus, SamplingParams
from grpo.rollout.engines.embedded import EmbeddedEngine
from grpo.rollout.engines.in_process import make_in_process
from grpo.rollout.engines.registry import ENGINES
from grpo.rollout.engines.transformers import TransformersEngine
from tests.unit.rollout.engines.test_embedded import make_engine, prompts_for, raising_forward

TEXTS = ["abc", "hello world", "abc", "9+9=", "abc"]  # a group's repeated prompt among others


@pytest.mark.parametrize("params", [SamplingParams(12, temperature=0.0), SamplingParams(12, temperature=0.7),
                                    SamplingParams(12, temperature=1.0, top_p=0.8)])
def test_it_draws_what_the_embedded_engine_draws_from_the_same_seeds(params):
    engine, tok = make_engine(batch_size=3, engine=TransformersEngine)
    embedded = EmbeddedEngine(engine.model, tok, batch_size=8)
    prompts = prompts_for(tok, TEXTS)
    seeds = list(range(1, 1 + len(prompts)))
    mine, theirs = engine.generate(prompts, params, seeds), embedded.generate(prompts, params, seeds)
    assert [c.token_ids for c in mine] == [c.token_ids for c in theirs]
    assert [c.status for c in mine] == [c.status for c in theirs]
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5)


def test_sampled_logprobs_are_a_training_forward_passes_whatever_the_models_generation_config_says():
    engine, tok = make_engine(engine=TransformersEngine)
    # A checkpoint's defaults: generate would apply them to what it draws from, unless told otherwise.
    engine.model.generation_config.repetition_penalty = 3.0
    engine.model.generation_config.min_new_tokens = 10
    prompts = prompts_for(tok, TEXTS)
    temperature = 0.7
    outs = engine.generate(prompts, SamplingParams(10, temperature), list(range(1, 1 + len(prompts))))
    batch = TrainBatch(prompts, [o.token_ids for o in outs], [o.logprobs for o in outs], torch.zeros(len(prompts)), [])
    mb = collate(batch, list(range(len(prompts))), tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        logprobs, _ = completion_logprobs(engine.model, mb, temperature)
    torch.testing.assert_close(logprobs * mb.completion_mask, mb.old_logprobs, atol=1e-4, rtol=1e-4)
    assert engine.model.generation_config.repetition_penalty == 3.0  # put back


def test_a_sample_depends_on_its_seed_not_on_its_batch():
    engine, tok = make_engine(engine=TransformersEngine)
    prompts = prompts_for(tok, ["x", "hello y"]) * 3
    params = SamplingParams(8, 1.0)
    seeds = [5, 6, 7, 8, 9, 10]
    together = engine.generate(prompts, params, seeds)
    assert [o.token_ids for o in together] != [o.token_ids for o in engine.generate(prompts, params, [11] * 6)]
    reordered = engine.generate(prompts[::-1], params, seeds[::-1])
    engine.batch_size = 2
    chunked = engine.generate(prompts, params, seeds)
    alone = engine.generate(prompts[3:4], params, [8])
    assert [o.token_ids for o in reordered[::-1]] == [o.token_ids for o in chunked] == [o.token_ids for o in together]
    assert alone[0].token_ids == together[3].token_ids


def eos_biased(engine, tok, bias: float) -> None:
    """An output layer whose only preference is for (or against) EOS."""
    head = torch.nn.Linear(engine.model.config.hidden_size, len(tok), bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[tok.eos_token_id] = bias
    engine.model.lm_head = head


def test_an_answer_that_stops_at_once_is_empty_and_one_that_never_stops_is_truncated():
    engine, tok = make_engine(engine=TransformersEngine)
    eos_biased(engine, tok, 10.0)
    out = engine.generate(prompts_for(tok, ["a"]), SamplingParams(5, 0.0))[0]
    assert out.token_ids == [tok.eos_token_id] and out.finish_reason == "stop" and out.status == SampleStatus.EMPTY
    eos_biased(engine, tok, -100.0)
    out = engine.generate(prompts_for(tok, ["a"]), SamplingParams(6, 1.0), [0])[0]
    assert len(out.token_ids) == len(out.logprobs) == 6
    assert out.finish_reason == "length" and out.status == SampleStatus.TRUNCATED


def test_rows_that_end_early_keep_their_eos_and_nothing_after_it():
    engine, tok = make_engine(engine=TransformersEngine)
    outs = engine.generate(prompts_for(tok, ["a"]) * 8, SamplingParams(40, 1.0), list(range(8)))
    stopped = [o for o in outs if o.finish_reason == "stop"]
    assert stopped and len({len(o.token_ids) for o in outs}) > 1  # rows of one batch ended apart
    assert all(o.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in o.token_ids[:-1] for o in stopped)
    assert all(len(o.token_ids) == len(o.logprobs) for o in outs)


def test_running_out_of_memory_fails_the_samples_and_a_bug_is_a_crash():
    engine, tok = make_engine(engine=TransformersEngine)
    hook = raising_forward(engine.model, torch.OutOfMemoryError("CUDA out of memory (simulated)"))
    outs = engine.generate(prompts_for(tok, ["a", "b"]), SamplingParams(4, 1.0))
    assert [o.status for o in outs] == [SampleStatus.FAILED] * 2 and "simulated" in outs[0].error
    hook.remove()
    raising_forward(engine.model, ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        engine.generate(prompts_for(tok, ["a", "b"]), SamplingParams(4, 1.0))


def test_a_stop_signal_abandons_the_generation():
    engine, tok = make_engine(engine=TransformersEngine)
    engine.cancel.set()
    with pytest.raises(GenerationCancelled):
        engine.generate(prompts_for(tok, ["a", "b"]), SamplingParams(4, 1.0))
    assert engine.model.training  # put back as it was


def test_the_registry_builds_it_for_a_lora_policy_and_its_pinned_copy_draws_the_same():
    torch.manual_seed(0)
    policy = Policy(load_config("tiny", ["rollout.engine=transformers", "model.lora.rank=4"]), torch.device("cpu"))
    engine = make_in_process(ENGINES["transformers"], policy, 4, cancel=None)
    assert type(engine) is TransformersEngine
    prompts = prompts_for(policy.tokenizer, TEXTS)
    params = SamplingParams(8, 1.0)
    seeds = list(range(len(prompts)))
    adapted = EmbeddedEngine(policy.model, policy.tokenizer).generate(prompts, params, seeds)
    pinned = engine.pinned(policy)
    assert type(pinned) is TransformersEngine and pinned.model is not policy.model
    for out in (engine.generate(prompts, params, seeds), pinned.generate(prompts, params, seeds)):
        assert [c.token_ids for c in out] == [c.token_ids for c in adapted]
