"""The update's MLPs and projections on needed positions only: the same log-probs and gradients as the
padded forward, the padding's rows never computed, and nothing changed outside the update."""

import copy
import threading

import torch

from grpo.config import ModelConfig
from grpo.policy import unpad
from grpo.policy.models import load_model_and_tokenizer
from grpo.policy.update import collate, completion_logprobs
from tests.unit.policy.test_update import group_batch, logprobs_and_grads, tiny


def test_unpadded_update_gives_the_padded_log_probs_and_gradients():
    padded, tok = tiny()
    unpadded = copy.deepcopy(padded)
    assert unpad.install(unpadded) is not None and unpad.install(padded.model.embed_tokens) is None
    mb = collate(group_batch(tok), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    for shared in (True, False):
        values, grads = logprobs_and_grads(padded, mb, shared)
        values_u, grads_u = logprobs_and_grads(unpadded, mb, shared)
        torch.testing.assert_close(values_u, values, atol=1e-6, rtol=1e-6)
        for name, grad in grads.items():
            torch.testing.assert_close(grads_u[name], grad, atol=1e-6, rtol=1e-5)


def test_the_mlps_see_only_the_needed_rows():
    model, tok = tiny()
    unpad.install(model)
    seen = []
    model.model.layers[0].mlp.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    mb = collate(group_batch(tok), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    completion_logprobs(model, mb, temperature=1.0, share_prompt=True)
    # The prompt pass (2 prompts, all of it) and then the completions' needed positions alone: a token is
    # fed for the one after it, so a completion of n tokens needs n - 1 rows (13 tokens, 6 rows: 7).
    prompt_pass, completion_pass = seen
    assert prompt_pass[:-1] == mb.prompt_ids.shape
    assert completion_pass[:-1] == (int(mb.completion_mask[:, 1:].sum()),)


def test_outside_the_update_and_on_other_threads_the_model_is_untouched():
    model, tok = tiny()
    real = unpad.install(model)
    ids = torch.tensor([[5, 6, 7, 8]])
    plain = model(input_ids=ids).logits
    seen = []
    with real.only(torch.tensor([[True, False, False, True]])):
        other = threading.Thread(target=lambda: seen.append(model(input_ids=ids).logits))
        other.start()
        other.join()
    torch.testing.assert_close(seen[0], plain, atol=0, rtol=0)
    torch.testing.assert_close(model(input_ids=ids).logits, plain, atol=0, rtol=0)


def test_a_copied_model_has_its_own_positions_and_loading_installs_them():
    model, _ = load_model_and_tokenizer(ModelConfig(name="tiny", dtype="float32"), torch.device("cpu"))
    real = getattr(model, unpad.ATTRIBUTE)
    copied = copy.deepcopy(model)
    assert isinstance(getattr(copied, unpad.ATTRIBUTE), unpad.RealTokens)
    assert getattr(copied, unpad.ATTRIBUTE) is not real


def test_gradient_checkpointing_turns_it_off():
    model, tok = load_model_and_tokenizer(ModelConfig(name="tiny", dtype="float32", gradient_checkpointing=True),
                                          torch.device("cpu"))
    seen = []
    model.model.layers[0].mlp.register_forward_hook(lambda m, args, out: seen.append(args[0].dim()))
    mb = collate(group_batch(tok), list(range(6)), tok.pad_token_id, torch.device("cpu"))
    completion_logprobs(model, mb, temperature=1.0)
    assert seen and all(dim == 3 for dim in seen)  # never gathered to [N, H]
