"""The KV cache goes to a forward under the name that forward reads, through PEFT's wrapper too."""

import inspect
import warnings

import pytest
import torch
from transformers import DynamicCache

from grpo.config import TinyModelConfig
from grpo.policy.cache_keyword import cache_argument
from grpo.policy.models import build_char_tokenizer, build_tiny_model


class OldForward(torch.nn.Module):
    def forward(self, input_ids, past_key_values=None, use_cache=None):  # transformers before 5.2x
        return input_ids


def test_a_forward_that_reads_past_key_values_gets_it():
    cache = DynamicCache()
    assert cache_argument(OldForward(), cache) == {"past_key_values": cache}


def test_the_installed_transformers_gets_the_name_its_forward_reads():
    model = build_tiny_model(TinyModelConfig(), build_char_tokenizer(), torch.float32)
    (name,) = cache_argument(model, DynamicCache())
    assert name in inspect.signature(type(model).forward).parameters
    assert name in inspect.signature(type(model.model).forward).parameters


def test_peft_passes_the_wrapped_models_name_through():
    peft = pytest.importorskip("peft")
    model = build_tiny_model(TinyModelConfig(), build_char_tokenizer(), torch.float32)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    cache = DynamicCache()
    assert cache_argument(wrapped, cache) == cache_argument(model, cache)
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped(ids, **cache_argument(wrapped, cache), use_cache=True)
    assert cache.get_seq_length() == 3  # the cache handed over is the one filled
    assert not [w for w in caught if "past_key_values" in str(w.message)]
