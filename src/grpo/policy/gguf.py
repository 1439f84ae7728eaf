"""Reading a GGUF file and writing it as a Hugging Face model directory.

transformers' own GGUF loading took 5-7 s for the packaged SmolLM2-135M (AMD EPYC, 2 cores): gguf's reader
slices a numpy memmap per element of the 49,152-token vocabulary and the 48,900 merges, transformers parses
each value again in Python, and the Q4_1 weights are unpacked 16 rows at a time. `write_hf_directory` parses
the file with `struct` over one read, unpacks each tensor whole with numpy, and hands the values to
transformers' config, tokenizer and `save_pretrained`: 0.6 s, 1.4 s in a fresh process (bench/RESULTS.md),
and the directory transformers writes (tests/unit/policy/test_gguf.py compares the two). What it does not
cover (another architecture, tokenizer, tensor type or GGUF version) goes through transformers,
`write_hf_directory_with_transformers`.
"""

from __future__ import annotations

import functools
import logging
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

MetadataValue = int | float | bool | str | list  # a list holds MetadataValues

VERSIONS = (2, 3)  # gguf's reader's too; a big-endian file reads as another version, and goes to transformers
ALIGNMENT = 32  # llama.cpp's default, where general.alignment is absent
MAX_DIMS = 4

# Metadata value types: the fixed-width ones by struct format; 8 is a string, 9 an array.
SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9

# ggml tensor types this reader unpacks: (elements per block, bytes per block)
F32, F16, Q4_1, Q8_0 = 0, 1, 3, 8
BLOCKS = {F32: (1, 4), F16: (1, 2), Q4_1: (32, 20), Q8_0: (32, 34)}

# llama.cpp's tensor names for a llama, and transformers' (gguf.get_tensor_name_map's table, for this one model)
LLAMA_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LLAMA_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# a tokenizer's argument -> the tokenizer.ggml key of its id (transformers' get_gguf_tokenizer)
SPECIAL_TOKENS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
                  "pad_token": "padding_token_id"}


class MalformedGGUF(ValueError):
    """The file is not a GGUF file, or is cut short."""


class UnsupportedGGUF(Exception):
    """A well-formed file this reader does not convert; transformers does."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # torch order: ggml lists the fastest-moving dimension first
    ggml_type: int
    offset: int  # from the start of the file
    nbytes: int


@dataclass(frozen=True)
class GGUFFile:
    metadata: dict[str, MetadataValue]
    tensors: tuple[TensorInfo, ...]
    data: bytes  # the whole file


def read_gguf(path: Path) -> GGUFFile:
    """Header, metadata and tensor table. Raises MalformedGGUF for a file that is not one, UnsupportedGGUF for
    a version or tensor type this reader does not unpack."""
    data = path.read_bytes()
    if data[:4] != b"GGUF":
        raise MalformedGGUF("it does not start with the GGUF magic bytes")
    try:
        return _parse(data)
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedGGUF(f"its header is cut short or corrupt ({exc})") from None


def _parse(data: bytes) -> GGUFFile:
    version, tensor_count, kv_count = struct.unpack_from("<IQQ", data, 4)
    if version not in VERSIONS:
        raise UnsupportedGGUF(f"GGUF version {version}")
    pos = 24
    metadata: dict[str, MetadataValue] = {}
    for _ in range(kv_count):
        key, pos = _string(data, pos)
        (value_type,) = struct.unpack_from("<I", data, pos)
        metadata[key], pos = _value(data, pos + 4, value_type)
    entries = []
    for _ in range(tensor_count):
        name, pos = _string(data, pos)
        (n_dims,) = struct.unpack_from("<I", data, pos)
        if n_dims > MAX_DIMS:
            raise MalformedGGUF(f"tensor {name} has {n_dims} dimensions (ggml has at most {MAX_DIMS})")
        dims = struct.unpack_from(f"<{n_dims}Q", data, pos + 4)
        ggml_type, offset = struct.unpack_from("<IQ", data, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        entries.append((name, tuple(reversed(dims)), ggml_type, offset))
    alignment = metadata.get("general.alignment", ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        raise MalformedGGUF(f"general.alignment is {alignment!r}")
    start = -(-pos // alignment) * alignment
    tensors = []
    for name, shape, ggml_type, offset in entries:
        if ggml_type not in BLOCKS:
            raise UnsupportedGGUF(f"tensor {name} of ggml type {ggml_type}")
        block_elements, block_bytes = BLOCKS[ggml_type]
        if shape and shape[-1] % block_elements:
            raise MalformedGGUF(f"tensor {name} has rows of {shape[-1]}, not whole blocks of {block_elements}")
        nbytes = int(np.prod(shape, dtype=np.int64)) // block_elements * block_bytes
        if start + offset + nbytes > len(data):
            raise MalformedGGUF(f"tensor {name} runs past the end of the file ({len(data)} bytes)")
        tensors.append(TensorInfo(name, shape, ggml_type, start + offset, nbytes))
    return GGUFFile(metadata, tuple(tensors), data)


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, pos)
    end = pos + 8 + length
    if end > len(data):
        raise MalformedGGUF(f"a string at byte {pos} runs past the end of the file")
    return data[pos + 8:end].decode("utf-8"), end


def _value(data: bytes, pos: int, value_type: int) -> tuple[MetadataValue, int]:
    if value_type in SCALAR_FORMATS:
        fmt = "<" + SCALAR_FORMATS[value_type]
        return struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)
    if value_type == STRING:
        return _string(data, pos)
    if value_type != ARRAY:
        raise MalformedGGUF(f"a metadata value at byte {pos} has type {value_type}, which GGUF does not define")
    element_type, count = struct.unpack_from("<IQ", data, pos)
    pos += 12
    if element_type in SCALAR_FORMATS:  # the token types: one numpy read, not a value at a time
        dtype = np.dtype("<" + SCALAR_FORMATS[element_type])
        if pos + count * dtype.itemsize > len(data):
            raise MalformedGGUF(f"an array at byte {pos} runs past the end of the file")
        return np.frombuffer(data, dtype, count, pos).tolist(), pos + count * dtype.itemsize
    values = []
    for _ in range(count):  # strings (the vocabulary, the merges) or nested arrays: variable width
        value, pos = _string(data, pos) if element_type == STRING else _value(data, pos, element_type)
        values.append(value)
    return values, pos


def dequantize(gguf: GGUFFile, info: TensorInfo) -> np.ndarray:
    """The tensor in float32, bit for bit what gguf.quants.dequantize gives (the same float32 operations, in
    the same order, over the whole tensor at once)."""
    raw = np.frombuffer(gguf.data, np.uint8, info.nbytes, info.offset)
    if info.ggml_type == F32:
        values = raw.view("<f4").copy()  # the file's bytes are read-only; torch wants its own
    elif info.ggml_type == F16:
        values = raw.view("<f2").astype(np.float32)
    elif info.ggml_type == Q8_0:  # per 32 weights: fp16 scale d, then 32 int8 q; w = q * d
        blocks = raw.view(np.dtype([("d", "<f2"), ("q", "i1", 32)]))
        values = blocks["q"].astype(np.float32) * blocks["d"].astype(np.float32)[:, None]  # [blocks, 32]
    else:  # Q4_1, per 32 weights: fp16 scale d and minimum m, 16 bytes of nibbles, low ones first; w = d*q + m
        blocks = raw.view(np.dtype([("d", "<f2"), ("m", "<f2"), ("q", "u1", 16)]))
        nibbles = np.empty((len(blocks), 2, 16), np.uint8)  # [blocks, low/high, 16]
        np.bitwise_and(blocks["q"], 0x0F, out=nibbles[:, 0])
        np.right_shift(blocks["q"], 4, out=nibbles[:, 1])
        values = nibbles.reshape(-1, 32).astype(np.float32)  # [blocks, 32]
        values *= blocks["d"].astype(np.float32)[:, None]
        values += blocks["m"].astype(np.float32)[:, None]
    return values.reshape(info.shape)


def unpermute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp interleaves each head's rotary halves of q and k; transformers'
    LlamaTensorProcessor._reverse_permute_weights puts them back."""
    return weight.reshape(n_head, weight.shape[0] // n_head // 2, 2, *weight.shape[1:]).swapaxes(2, 1).reshape(
        weight.shape)


def llama_config(gguf: GGUFFile) -> dict[str, MetadataValue]:
    """The config dict transformers' load_gguf_checkpoint builds for a llama: its key table applied to the
    general.*, llama.* and tokenizer.ggml.*_token_id values."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    config: dict[str, MetadataValue] = {"tie_word_embeddings": all(t.name != "output.weight" for t in gguf.tensors)}
    for key, value in gguf.metadata.items():
        prefix, _, rest = key.partition(".")
        renamed = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
        if renamed is not None and renamed != -1:
            config[renamed] = value[0] if isinstance(value, list) and len(value) == 1 else value
    if "vocab_size" not in config:
        config["vocab_size"] = len(gguf.metadata["tokenizer.ggml.tokens"])
    return config


def write_hf_directory(gguf_path: Path, out: Path) -> None:
    """Writes config.json, generation_config.json, model.safetensors (float32) and the tokenizer's files into
    `out`. A file the fast reader does not convert goes through transformers, said in one warning; one that is
    not a GGUF file raises MalformedGGUF before anything is written."""
    try:
        gguf = read_gguf(gguf_path)
        model = _llama(gguf)
        tokenizer = _tokenizer(gguf)
    except UnsupportedGGUF as exc:
        log.warning("%s holds %s, which grpo's GGUF reader does not convert: converting it with transformers "
                    "(slower)", gguf_path.name, exc)
        write_hf_directory_with_transformers(gguf_path, out)
        return
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _llama(gguf: GGUFFile) -> LlamaForCausalLM:
    """The model transformers loads from this file: its config, and its weights unpacked in float32."""
    architecture = gguf.metadata.get("general.architecture")
    # transformers may load a llama named for mistral as a mistral; other architectures have other fixes
    if architecture != "llama" or "mistral" in str(gguf.metadata.get("general.name", "")):
        raise UnsupportedGGUF(f"architecture {architecture!r}")
    if gguf.metadata.get("tokenizer.ggml.model") != "gpt2":  # the only tokenizer this reader has been compared on
        raise UnsupportedGGUF(f"tokenizer {gguf.metadata.get('tokenizer.ggml.model')!r}")
    config = LlamaConfig.from_dict(llama_config(gguf))
    with torch.device("meta"):  # the names and shapes to check and save under; the weights come from the file
        model = LlamaForCausalLM(config)
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    if config.tie_word_embeddings:
        del shapes["lm_head.weight"]
    infos = {_hf_name(info.name): info for info in gguf.tensors}
    odd = [info.name for name, info in infos.items() if shapes.get(name) != info.shape]
    odd += [f"no {name}" for name in shapes.keys() - infos.keys()]
    if odd:  # transformers would drop such a tensor, or leave a missing one at random
        raise UnsupportedGGUF(f"tensors that are not LlamaForCausalLM's ({', '.join(sorted(odd)[:3])})")
    weights = {}
    for name, info in infos.items():
        weight = dequantize(gguf, info)
        if ".attn_q." in info.name:
            weight = unpermute(weight, config.num_attention_heads)
        elif ".attn_k." in info.name:
            weight = unpermute(weight, config.num_key_value_heads)
        weights[name] = torch.from_numpy(weight)
    model.load_state_dict(weights, strict=False, assign=True)  # strict=False: a tied lm_head.weight is not given
    model.tie_weights()  # assign replaced the embedding the head shared
    return model


def _hf_name(gguf_name: str) -> str:
    """transformers' name for a llama tensor of llama.cpp's; "" for one it does not have."""
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in LLAMA_BLOCK_NAMES and parts[3] == "weight":
        return f"model.layers.{parts[1]}.{LLAMA_BLOCK_NAMES[parts[2]]}.weight"
    if len(parts) == 2 and parts[0] in LLAMA_NAMES and parts[1] == "weight":
        return f"{LLAMA_NAMES[parts[0]]}.weight"
    return ""


def _tokenizer(gguf: GGUFFile) -> PreTrainedTokenizerBase:
    """transformers' get_gguf_tokenizer and convert_gguf_tokenizer (what AutoTokenizer does with a gguf_file),
    from the values read here."""
    try:  # transformers' own names, which move between its releases (5.17 has no GGUF_TOKENIZER_MAPPING)
        from transformers import TokenizersBackend
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer
    except ImportError as exc:
        raise UnsupportedGGUF(f"a tokenizer this transformers ({transformers.__version__}) converts by other "
                              f"names ({exc})") from None

    meta = gguf.metadata
    found = {group: {name: meta[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in meta}
             for group, renames in GGUF_TOKENIZER_MAPPING.items()}
    tokenizer_dict, init_kwargs = found["tokenizer"], found["tokenizer_config"]
    tokens = meta["tokenizer.ggml.tokens"]
    for name, key in SPECIAL_TOKENS.items():
        token_id = meta.get(f"tokenizer.ggml.{key}")
        init_kwargs[name] = tokens[token_id] if token_id is not None else None
    backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tokenizer_dict)
    return TokenizersBackend(tokenizer_object=backend, **init_kwargs)


def write_hf_directory_with_transformers(gguf_path: Path, out: Path) -> None:
    """transformers' GGUF loading: what the fast path does not cover, and the reference it is tested against."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    detach_quantizer(model)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


@contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within the block, gguf's file reader and tensor-name map are made once per argument. transformers
    parses the GGUF's metadata three times (tokenizer, config, weights) and rebuilds the name map for every
    module of the model: 24-27 s for the packaged SmolLM2, 5-10 s so (AMD EPYC, 2 cores). Both are read-only
    after they are made; where transformers stops looking them up on the `gguf` module, this changes nothing."""
    import gguf

    make_reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def reader(path: str | os.PathLike, mode: str = "r") -> object:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = make_reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = make_reader, name_map


def detach_quantizer(model: torch.nn.Module) -> None:
    """A GGUF-loaded model is dequantised but still flagged as quantised, which blocks saving."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
