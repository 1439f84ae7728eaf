"""The policy's log-probs: recomputed ones line up with the batch's rows, and the probe reference
matches the sampler."""

import torch

from grpo.algo.loss import rows_with_gradient
from grpo.config import load_config
from grpo.policy.policy import Policy
from grpo.policy.update import TrainBatch, micro_batches
from grpo.rollout.engines import SamplingParams
from grpo.rollout.engines.embedded import EmbeddedEngine


def tiny_policy(*overrides: str) -> Policy:
    torch.manual_seed(0)
    return Policy(load_config("tiny", list(overrides)), torch.device("cpu"))


def sampled_batch(policy: Policy, temperature: float, advantages: list[float] | None = None) -> TrainBatch:
    """Completions of different lengths from the embedded engine, with the sampler's log-probs (and advantages 0
    unless given)."""
    tok = policy.tokenizer
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ("1+2=", "what is 7*8?", "9")]
    engine = EmbeddedEngine(policy.model, tok)
    rows = [p for p in prompts for _ in range(3)]
    completions = engine.generate(rows, SamplingParams(max_new_tokens=12, temperature=temperature),
                                  list(range(3, 3 + len(rows))))
    advantages = torch.tensor(advantages) if advantages is not None else torch.zeros(len(rows))  # [B]
    batch = TrainBatch(rows, [c.token_ids for c in completions], [c.logprobs for c in completions], advantages,
                       rows_with_gradient(advantages, policy.loss_cfg.kl_coef))
    order = [r for rows in micro_batches(batch, 4) for r in rows]
    assert order != sorted(order)  # micro-batches reorder the rows: results must come back in place
    return batch


def test_recomputed_old_logprobs_match_the_sampler_row_by_row():
    policy = tiny_policy("rollout.temperature=0.7", "algo.micro_batch_size=4")
    batch = sampled_batch(policy, temperature=0.7)
    sampler = [list(lp) for lp in batch.old_logprobs]
    prepared, metrics = policy.prepare(batch, recompute_old=True)
    assert batch.old_logprobs == sampler  # the batch given is left as it was
    for mine, theirs in zip(prepared.old_logprobs, sampler):
        assert len(mine) == len(theirs)
        assert max(abs(a - b) for a, b in zip(mine, theirs)) < 1e-4
    assert metrics.logprob_mismatch < 1e-4 and metrics.logprob_mismatch_max < 1e-4
    assert set(metrics.metrics()) == {"rollout/logprob_mismatch", "rollout/logprob_mismatch_max"}


def test_sequence_logprobs_are_the_greedy_samplers_at_temperature_one():
    policy = tiny_policy()
    prompt = policy.tokenizer("12+34=", add_special_tokens=False)["input_ids"]
    (greedy,) = EmbeddedEngine(policy.model, policy.tokenizer).generate([prompt], SamplingParams(6, temperature=0.0))
    reference = policy.sequence_logprobs(prompt + greedy.token_ids)
    assert len(reference) == len(prompt) + len(greedy.token_ids) - 1
    tail = reference[len(prompt) - 1:]
    assert max(abs(a - b) for a, b in zip(tail, greedy.logprobs)) < 1e-4


def test_revision_changes_with_every_weight_change_and_version_only_with_updates(tmp_path):
    policy = tiny_policy()
    batch = sampled_batch(policy, temperature=1.0, advantages=[1.0, -1.0, 0.0] * 3)
    assert (policy.version, policy.revision) == (0, 0)
    assert policy.update(batch).applied
    assert (policy.version, policy.revision) == (1, 1)
    policy.save_model(tmp_path / "m" / "model")
    policy.save_state(tmp_path / "m" / "policy")
    policy.load_state(tmp_path / "m")
    assert (policy.version, policy.revision) == (1, 2)


def test_off_policy_prepare_keeps_the_behaviour_log_probs_apart_and_weights_each_token():
    policy = tiny_policy("rollout.temperature=0.7", "algo.micro_batch_size=4", "rollout.max_staleness=1",
                         "algo.importance_cap=1.5")
    batch = sampled_batch(policy, temperature=0.7)
    behaviour = [list(lp) for lp in batch.old_logprobs]
    with torch.no_grad():  # the policy moved on since it sampled: the samples are one version behind
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    prepared, metrics = policy.prepare(batch, recompute_old=True)
    proximal = prepared.old_logprobs
    assert [len(w) for w in prepared.importance_weights] == [len(row) for row in behaviour]
    for weights, prox, behav in zip(prepared.importance_weights, proximal, behaviour):
        expected = [min(float(torch.tensor(p - b, dtype=torch.float64).exp()), 1.5) for p, b in zip(prox, behav)]
        assert weights.tolist() == [float(torch.tensor(e, dtype=torch.float32)) for e in expected]
    assert metrics.offpolicy.kl > 0 and metrics.offpolicy.importance_weight_max > 1.5
    assert 0 < metrics.offpolicy.importance_capped_frac < 1


def test_on_policy_prepare_adds_no_importance_weights():
    policy = tiny_policy("rollout.temperature=0.7", "algo.micro_batch_size=4")
    batch = sampled_batch(policy, temperature=0.7)
    prepared, metrics = policy.prepare(batch, recompute_old=True)
    assert prepared.importance_weights is None and metrics.offpolicy is None
    assert not any(k.startswith("offpolicy/") for k in metrics.metrics())


def test_the_loss_gets_the_configured_ratio_level():
    assert tiny_policy().loss_cfg.ratio_level == "token"
    assert tiny_policy("algo.ratio_level=sequence").loss_cfg.ratio_level == "sequence"
