"""The preallocated KV cache: the same keys, values and samples as transformers' DynamicCache, rows
dropped and repeated as the engine does, and a full cache refused."""

import pytest
import torch
from transformers import DynamicCache

from grpo.rollout.engines import SamplingParams, embedded
from grpo.rollout.engines.embedded import live_rows_in_place
from grpo.rollout.engines.kv_cache import preallocated_cache
from tests.unit.rollout.engines.test_embedded import make_engine, prompts_for


def test_updates_and_row_selection_match_the_dynamic_cache():
    torch.manual_seed(0)
    ours, theirs = preallocated_cache(10), DynamicCache()
    steps = [torch.randn(2, 3, 4, 5), torch.randn(2, 3, 1, 5)]  # prefill of 2 prompts, then one token
    for layer in (0, 1):
        for cache in (ours, theirs):
            cache.update(steps[0] + layer, -steps[0], layer)
    for cache in (ours, theirs):
        cache.batch_select_indices(torch.tensor([0, 0, 1, 1]))  # each prompt continued twice
    for cache in (ours, theirs):
        for layer in (0, 1):
            cache.update(torch.randn(4, 3, 1, 5).fill_(layer), torch.zeros(4, 3, 1, 5), layer)
        cache.batch_select_indices(torch.tensor([1, 3]))  # two rows finished
    assert ours.get_seq_length() == theirs.get_seq_length() == 5
    for mine, reference in zip(ours.layers, theirs.layers):
        torch.testing.assert_close(mine.keys, reference.keys, atol=0, rtol=0)
        torch.testing.assert_close(mine.values, reference.values, atol=0, rtol=0)


def test_finished_rows_are_replaced_by_the_last_live_rows():
    live = torch.tensor([True, False, True, False, True, True, False])
    keep = live_rows_in_place(live)
    assert keep.tolist() == [0, 4, 2, 5]  # rows 0 and 2 stay; the finished 1 and 3 take the live 4 and 5
    assert live_rows_in_place(torch.tensor([True, True])).tolist() == [0, 1]
    assert live_rows_in_place(torch.tensor([False, True])).tolist() == [1]


def test_an_in_place_selection_copies_only_the_rows_that_move():
    cache = preallocated_cache(6)
    keys = torch.arange(4.0)[:, None, None, None].expand(4, 1, 2, 3).contiguous()  # row i holds i
    cache.update(keys, -keys, 0)
    buffer = cache.layers[0].key_buffer
    cache.batch_select_indices(torch.tensor([0, 3, 2]))
    layer = cache.layers[0]
    assert layer.key_buffer.data_ptr() == buffer.data_ptr()  # the same memory, its first rows
    assert layer.keys[:, 0, 0, 0].tolist() == [0, 3, 2] and layer.values[:, 0, 0, 0].tolist() == [0, -3, -2]
    cache.batch_select_indices(torch.tensor([1, 1, 0, 2]))  # more rows than the buffer holds: a new one
    assert cache.layers[0].keys[:, 0, 0, 0].tolist() == [3, 3, 0, 2]


@pytest.mark.parametrize("repeat", [False, True])
def test_the_buffers_are_zero_past_the_filled_part_whatever_rows_move(repeat):
    """The engine's decode step multiplies whole value buffers: past the filled part they must add nothing."""
    cache = preallocated_cache(7)
    cache.update(torch.randn(4, 3, 4, 5) + 9, torch.randn(4, 3, 4, 5) + 9, 0)  # a prefill
    if repeat:
        cache.batch_select_indices(torch.tensor([0, 1, 1, 0, 2]))  # more rows than the buffer: a new one
    rows = len(cache.layers[0].keys)
    cache.update(torch.randn(rows, 3, 1, 5) + 9, torch.randn(rows, 3, 1, 5) + 9, 0)  # a decode step
    cache.batch_select_indices(torch.tensor([3, 1, 2]))  # in place: row 0 takes row 3
    layer = cache.layers[0]
    for buffer in (layer.key_buffer, layer.value_buffer):
        assert buffer.shape == (3, 3, 7, 5)
        assert (buffer[:, :, :5] != 0).all() and (buffer[:, :, 5:] == 0).all()


def test_a_full_cache_is_refused():
    cache = preallocated_cache(4)
    cache.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2), 0)
    with pytest.raises(ValueError, match="cannot take position 5"):
        cache.update(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), 0)


def test_a_reserved_position_joins_the_filled_part_and_a_full_cache_reserves_none():
    cache = preallocated_cache(4)
    cache.update(torch.ones(2, 1, 3, 2), torch.ones(2, 1, 3, 2), 0)
    layer = cache.layers[0]
    assert layer.reserve() == 3  # the fused decode step writes its keys and values there itself
    assert layer.length == 4 and layer.keys.shape == layer.values.shape == (2, 1, 4, 2)
    with pytest.raises(ValueError, match="cannot take position 5"):
        layer.reserve()
    assert layer.length == 4


def test_the_engine_samples_what_it_sampled_with_the_dynamic_cache(monkeypatch):
    engine, tok = make_engine()
    prompts = prompts_for(tok, ["1+1=", "what is 23+45? ", "7"]) * 3
    params = SamplingParams(max_new_tokens=16, temperature=1.0)
    ours = engine.generate(prompts, params, list(range(len(prompts))))
    monkeypatch.setattr(embedded, "preallocated_cache", lambda capacity: DynamicCache())
    theirs = engine.generate(prompts, params, list(range(len(prompts))))
    assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]
    assert [c.logprobs for c in ours] == [c.logprobs for c in theirs]
    assert len({len(c.token_ids) for c in ours}) > 1  # rows finished at different steps and were dropped
