"""The update phase: shared-prompt log-probs equal the full forward, and updates move the policy the right way."""

from dataclasses import replace

import pytest
import torch

from grpo import metric_keys as keys
from grpo.algo.loss import LossConfig, rows_with_gradient
from grpo.config import ActorConfig, TinyModelConfig
from grpo.policy import unpad, update
from grpo.policy.attention import packs_prompts, use_grouped_eager, use_packed_sdpa
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from grpo.policy.optim import MasterWeightAdamW
from grpo.policy.update import TrainBatch, collate, completion_logprobs, micro_batches, update_policy


def tiny(seed=0, attn="eager"):
    torch.manual_seed(seed)
    tok = build_char_tokenizer()
    return build_tiny_model(TinyModelConfig(), tok, torch.float32, attn), tok


def group_batch(tok, advantages=(1.0, -1.0, 0.5, -0.5, 1.0, 0.0), beginning=""):
    # Two groups of three samples; prompts of different lengths (after a `beginning` both share), completions
    # of different lengths.
    prompts = [tok(beginning + p, add_special_tokens=False)["input_ids"] for p in ("what is 1+2?", "7*8=")]
    completions = [[20, 21, 22], [23], [24, 25], [30, 31, 32, 33], [34, 35], [36]]
    prompt_ids = [prompts[0]] * 3 + [prompts[1]] * 3
    advantages = torch.tensor(advantages)  # [6]
    return TrainBatch(prompt_ids, completions, [[-1.0] * len(c) for c in completions], advantages,
                      rows_with_gradient(advantages, kl_coef=0.0))


def test_collate_keeps_one_copy_of_each_prompt():
    model, tok = tiny()
    mb = collate(group_batch(tok), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    assert mb.prompt_ids.shape[0] == 2 and mb.prompt_index.tolist() == [0, 0, 0, 1, 1, 1]
    assert mb.completion_mask.sum().item() == 13


def logprobs_and_grads(model, mb, shared, pack=True):
    model.zero_grad()
    logprobs, _ = completion_logprobs(model, mb, temperature=0.7, share_prompt=shared, pack=pack)
    (logprobs * mb.completion_mask).sum().backward()
    return logprobs * mb.completion_mask, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_shared_prompt_logprobs_and_gradients_equal_the_full_forward():
    model, tok = tiny()  # plain eager attention: the two-pass form (a prompt pass, then the rows)
    mb = collate(group_batch(tok), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    (shared_values, shared_grads), (values, grads) = (logprobs_and_grads(model, mb, shared) for shared in (True, False))
    torch.testing.assert_close(shared_values, values, atol=1e-5, rtol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-5, rtol=1e-4)


PACKING_ATTENTIONS = {"grouped-eager": ("eager", use_grouped_eager), "packed-sdpa": ("sdpa", use_packed_sdpa)}


BEGINNING = "Answer in digits. "  # both prompts' first 18 tokens: run once in the packed pass


@pytest.mark.parametrize("beginning", ["", BEGINNING], ids=["own-prompts", "a-shared-beginning"])
@pytest.mark.parametrize("unpadded", [True, False], ids=["needed-positions-only", "padded"])
@pytest.mark.parametrize("head_split", [True, False], ids=["head-split", "logits-from-the-model"])
@pytest.mark.parametrize("attention", PACKING_ATTENTIONS)
def test_the_packed_micro_batch_gives_the_log_probs_and_gradients_of_both_other_forms(unpadded, head_split, attention,
                                                                                       beginning, monkeypatch):
    implementation, switch = PACKING_ATTENTIONS[attention]
    model, tok = tiny(attn=implementation)
    if unpadded:
        unpad.install(model)
    if not head_split:
        monkeypatch.setattr(update, "split_head", lambda model: None)
    mb = collate(group_batch(tok, beginning=beginning), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    assert mb.prefix == len(beginning)
    full = logprobs_and_grads(model, mb, shared=False)  # the model's own attention (eager, or transformers' SDPA)
    assert switch(model) and packs_prompts(model, 64)
    cached = logprobs_and_grads(model, mb, shared=True, pack=False)  # a prompt pass, then the rows
    seen = []
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    packed = logprobs_and_grads(model, mb, shared=True)
    assert len(seen) == 1, "the prompts and the completions went through one product"
    if unpadded:  # the prompts' real tokens (the shared beginning once), and the fed tokens whose next token is real
        prompt_tokens = int(mb.prompt_mask.sum()) - mb.prefix * (len(mb.prompt_ids) - 1)
        assert seen[0][:-1] == (prompt_tokens + int(mb.completion_mask[:, 1:].sum()),)
    for values, grads in (full, cached):
        torch.testing.assert_close(packed[0], values, atol=1e-5, rtol=1e-5)
        for name, grad in grads.items():
            torch.testing.assert_close(packed[1][name], grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attention", PACKING_ATTENTIONS)
def test_under_gradient_checkpointing_the_micro_batch_still_runs_packed_and_exact(attention):
    implementation, switch = PACKING_ATTENTIONS[attention]
    model, tok = tiny(attn=implementation)
    switch(model)
    mb = collate(group_batch(tok), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    model.train()
    full = logprobs_and_grads(model, mb, shared=False)
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    seen = []
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    checkpointed = logprobs_and_grads(model, mb, shared=True)
    # One packed pass of prompts and completions (2 prompts, 6 rows: 2*P + 6*(T-1) positions), recomputed in backward.
    packed_positions = 2 * mb.prompt_ids.shape[1] + 6 * (mb.completion_ids.shape[1] - 1)
    assert seen == [torch.Size([1, packed_positions, model.config.hidden_size])] * 2
    torch.testing.assert_close(checkpointed[0], full[0], atol=1e-5, rtol=1e-5)
    for name, grad in full[1].items():
        torch.testing.assert_close(checkpointed[1][name], grad, atol=1e-5, rtol=1e-4)


def test_a_sliding_window_shorter_than_the_sequence_is_not_packed():
    model, _ = tiny()
    use_grouped_eager(model)
    model.config.sliding_window = 16
    assert packs_prompts(model, 16) and not packs_prompts(model, 17)


def test_single_token_completions_use_only_the_prompt_pass():
    model, tok = tiny()
    batch = TrainBatch([[5, 6, 7]] * 2, [[9], [10]], [[-1.0], [-1.0]], torch.tensor([1.0, -1.0]), [0, 1])
    mb = collate(batch, [0, 1], tok.pad_token_id, torch.device("cpu"))
    a, _ = completion_logprobs(model, mb, 1.0, share_prompt=True)
    b, _ = completion_logprobs(model, mb, 1.0, share_prompt=False)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_micro_batches_cover_every_row_once_grouped_by_length():
    _, tok = tiny()
    batch = group_batch(tok)
    chunks = micro_batches(batch, 4)
    assert sorted(r for c in chunks for r in c) == list(range(6)) and [len(c) for c in chunks] == [4, 2]


def test_an_update_raises_the_logprob_of_positive_advantage_samples():
    model, tok = tiny()
    batch = group_batch(tok)
    mb = collate(batch, list(range(6)), tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        before, _ = completion_logprobs(model, mb, 1.0)
    batch = replace(batch, old_logprobs=[before[i, : len(c)].tolist() for i, c in enumerate(batch.completion_ids)])
    optimizer = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
    result = update_policy(model, optimizer, batch, LossConfig(), updates=1, micro_batch_size=4,
                           max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)
    assert result.applied and result.metrics[keys.GRAD_NORM] > 0
    with torch.no_grad():
        after, _ = completion_logprobs(model, mb, 1.0)
    seq_change = ((after - before) * mb.completion_mask).sum(1)  # [6]
    assert seq_change[0] > 0 and seq_change[4] > 0  # advantage +1
    assert seq_change[1] < 0 and seq_change[3] < 0  # advantage -1 and -0.5


def test_a_nan_loss_is_not_applied():
    model, tok = tiny()
    before = {n: p.clone() for n, p in model.named_parameters()}
    optimizer = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
    model.get_input_embeddings().register_forward_hook(lambda module, args, out: out * float("nan"))
    result = update_policy(model, optimizer, group_batch(tok), LossConfig(), updates=1, micro_batch_size=4,
                           max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)
    assert not result.applied and result.nonfinite and "non-finite" in result.skip_reason
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


ONE_GROUP_AGREED = [1.0, -1.0, 0.0, 0.0, 0.0, 0.0]  # the second group's rewards all agreed


def on_policy(model, tok, batch):
    """The batch with its old log-probs set to the model's own (the ratio starts at 1)."""
    mb = collate(batch, list(range(len(batch))), tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        logprobs, _ = completion_logprobs(model, mb, 1.0)
    return replace(batch, old_logprobs=[logprobs[i, : len(c)].tolist() for i, c in enumerate(batch.completion_ids)])


def recording_gradients(model, optimizer) -> list[dict[str, torch.Tensor]]:
    """The list every optimizer step appends the model's gradients to, as it takes them."""
    gradients, apply = [], optimizer.step
    optimizer.step = lambda: (gradients.append({n: p.grad.clone() for n, p in model.named_parameters()}), apply())
    return gradients


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_rows_of_zero_advantage_are_not_computed_and_the_step_is_the_one_over_every_row(level):
    def step(compute_every_row):
        model, tok = tiny()
        batch = on_policy(model, tok, group_batch(tok, ONE_GROUP_AGREED))
        rows_seen = []
        model.get_input_embeddings().register_forward_hook(lambda module, args, out: rows_seen.append(args[0].numel()))
        if compute_every_row:
            batch = replace(batch, gradient_rows=list(range(len(batch))))
        optimizer = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
        gradients = recording_gradients(model, optimizer)
        result = update_policy(model, optimizer, batch, LossConfig(ratio_level=level), updates=2, micro_batch_size=2,
                               max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)
        return result, gradients, sum(rows_seen)

    (skipping, gradients, tokens_fed), (every_row, reference, all_tokens_fed) = step(False), step(True)
    assert skipping.applied and every_row.applied
    assert tokens_fed < all_tokens_fed / 2  # two rows of six, and one prompt of two
    assert (skipping.metrics[keys.ROWS_COMPUTED], skipping.metrics[keys.TOKENS_COMPUTED]) == (2, 4)
    assert (every_row.metrics[keys.ROWS_COMPUTED], every_row.metrics[keys.TOKENS_COMPUTED]) == (6, 13)
    assert skipping.metrics[keys.LOSS] == pytest.approx(every_row.metrics[keys.LOSS], rel=1e-5, abs=1e-7)
    assert len(gradients) == len(reference) == 2  # both optimizer steps, the second off policy (ratio != 1)
    for computed, every in zip(gradients, reference):
        for name, gradient in every.items():  # the rounding of other sums (gradients up to 0.15 here)
            torch.testing.assert_close(computed[name], gradient, atol=2e-6, rtol=1e-4)


def without_rows(batch: TrainBatch, rows: set[int]) -> TrainBatch:
    kept = [r for r in range(len(batch)) if r not in rows]
    pick = lambda values: [values[r] for r in kept] if values is not None else None  # noqa: E731
    return TrainBatch(pick(batch.prompt_ids), pick(batch.completion_ids), pick(batch.old_logprobs),
                      batch.advantages[kept], list(range(len(kept))), pick(batch.ref_logprobs))


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("micro_batch_size", [1, 4], ids=["accumulated-over-rows", "two-micro-batches"])
@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean", "seq_sum_norm"])
def test_masked_rows_make_the_steps_of_the_batch_without_them(loss_agg, micro_batch_size, level):
    """Truncated rows under algo.mask_truncated (1: a middle length, 3: the longest) are out of the gradient and of
    the normaliser: both optimizer steps (the second off policy) are those of the batch that never had them, however
    the rows are split into micro-batches, with a KL term that would otherwise reach every row."""
    cfg = LossConfig(loss_agg=loss_agg, max_new_tokens=4, kl_coef=0.05, ratio_level=level)

    def steps(masking: bool):
        model, tok = tiny()
        batch = on_policy(model, tok, group_batch(tok))
        batch = replace(batch, ref_logprobs=[torch.tensor(lp) - 0.1 for lp in batch.old_logprobs])
        masked = frozenset({1, 3})
        if masking:
            batch = replace(batch, masked_rows=masked, gradient_rows=rows_with_gradient(batch.advantages, 0.05, masked))
        else:
            batch = without_rows(batch, masked)
        optimizer = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
        gradients = recording_gradients(model, optimizer)
        result = update_policy(model, optimizer, batch, cfg, updates=2, micro_batch_size=micro_batch_size,
                               max_grad_norm=0.0, temperature=1.0, pad_id=tok.pad_token_id)
        return result, gradients

    (masked, gradients), (without, reference) = steps(True), steps(False)
    assert masked.applied and without.applied
    assert masked.metrics[keys.ROWS_COMPUTED] == without.metrics[keys.ROWS_COMPUTED] == 4
    assert masked.metrics[keys.LOSS] == pytest.approx(without.metrics[keys.LOSS], rel=1e-5, abs=1e-7)
    assert len(gradients) == len(reference) == 2
    for computed, expected in zip(gradients, reference):
        for name, gradient in expected.items():
            torch.testing.assert_close(computed[name], gradient, atol=2e-6, rtol=1e-4)


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_at_sequence_level_micro_batches_make_the_steps_of_one_batch(loss_agg):
    """GSPO's ratio is per row, so splitting the rows into micro-batches (each normalised by the whole batch's
    totals) leaves both optimizer steps as they are: the second, off policy, clipping some rows at 3e-4/4e-4."""
    cfg = LossConfig(3e-4, 4e-4, loss_agg, ratio_level="sequence")

    def steps(micro_batch_size: int):
        model, tok = tiny()
        batch = on_policy(model, tok, group_batch(tok))
        optimizer = MasterWeightAdamW(model, ActorConfig(lr=1e-2))
        gradients = recording_gradients(model, optimizer)
        result = update_policy(model, optimizer, batch, cfg, updates=2, micro_batch_size=micro_batch_size,
                               max_grad_norm=0.0, temperature=1.0, pad_id=tok.pad_token_id)
        return result, gradients

    one, reference = steps(6)
    assert one.applied and 0 < one.metrics[keys.CLIP_FRAC] < 1  # the second step clips some rows, not all
    for micro_batch_size in (1, 2):
        split, gradients = steps(micro_batch_size)
        assert split.metrics[keys.LOSS] == pytest.approx(one.metrics[keys.LOSS], rel=1e-5, abs=1e-7)
        assert split.metrics[keys.CLIP_FRAC] == pytest.approx(one.metrics[keys.CLIP_FRAC])
        for computed, expected in zip(gradients, reference, strict=True):
            for name, gradient in expected.items():
                torch.testing.assert_close(computed[name], gradient, atol=2e-6, rtol=1e-4)


def test_an_update_whose_every_row_is_masked_is_skipped_and_leaves_the_weights():
    model, tok = tiny()
    batch = replace(group_batch(tok), masked_rows=frozenset(range(6)), gradient_rows=[])
    before = {n: p.clone() for n, p in model.named_parameters()}
    result = update_policy(model, MasterWeightAdamW(model, ActorConfig(lr=1e-2)), batch, LossConfig(), updates=1,
                           micro_batch_size=4, max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)
    assert not result.applied and result.optimizer_steps == 0
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())


def test_the_update_measures_average_over_the_rows_it_computed():
    model, tok = tiny()
    batch = on_policy(model, tok, group_batch(tok, ONE_GROUP_AGREED))
    result = update_policy(model, MasterWeightAdamW(model, ActorConfig(lr=1e-2)), batch, LossConfig(), updates=1,
                           micro_batch_size=4, max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)
    # On policy the ratio is 1 at every computed token: its mean is 1, not the computed share of the tokens.
    assert result.metrics[keys.RATIO_MEAN] == pytest.approx(1.0, abs=1e-5)


def test_the_entropy_covers_the_rows_not_computed_by_their_sampled_surprisal():
    model, tok = tiny()
    batch = on_policy(model, tok, group_batch(tok, ONE_GROUP_AGREED))
    for row in (2, 3, 4, 5):  # as sampled: -log p of each token under the sampling distribution
        batch.old_logprobs[row] = [-5.0] * len(batch.completion_ids[row])
    mb = collate(batch, [0, 1], tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        _, entropy = completion_logprobs(model, mb, 1.0, with_entropy=True)
    exact = (entropy * mb.completion_mask).sum().item()
    result = update_policy(model, MasterWeightAdamW(model, ActorConfig(lr=1e-2)), batch, LossConfig(), updates=1,
                           micro_batch_size=4, max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)
    skipped_tokens = sum(len(batch.completion_ids[r]) for r in (2, 3, 4, 5))
    assert result.metrics[keys.ENTROPY] == pytest.approx((exact + 5.0 * skipped_tokens) / batch.num_tokens, rel=1e-5)


def test_an_update_with_no_row_of_non_zero_advantage_is_skipped_and_leaves_the_weights():
    model, tok = tiny()
    batch = group_batch(tok, advantages=[0.0] * 6)
    before = {n: p.clone() for n, p in model.named_parameters()}
    result = update_policy(model, MasterWeightAdamW(model, ActorConfig(lr=1e-2)), batch, LossConfig(), updates=1,
                           micro_batch_size=4, max_grad_norm=1.0, temperature=1.0, pad_id=tok.pad_token_id)
    assert not result.applied and result.skip_reason == "no learning signal"
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
