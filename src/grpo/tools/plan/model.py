"""The memory model: a run's peak memory by phase, a pure function of its config, the model's architecture
and the prompt length. Nothing here probes the machine or reads a file (grpo.tools.plan.machine does).

The prediction is a sum of components (weights, fp32 master weights, AdamW state, gradients, activations,
the logits of a micro-batch, the KV cache, the runtime's own baseline), each a count from the architecture
times a per-element cost. The costs that depend on how the trainer computes (how many activation tensors a
decoder layer keeps for backward, how many logits copies the loss makes) are in `Costs`, measured against
peak RSS on this CPU with bench/plan.py, so a change to the update is a recalibration, not a new model; the
implementation's own constants (the head's chunk, the attention it runs) are imported from
grpo.policy.constants, the module the trainer takes them from.
On CPU the prediction is resident memory (RSS); on CUDA it is the trainer's GPU memory (allocated tensors
plus the CUDA context), and with a server on the same GPU, what the server's memory fraction leaves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from grpo.config import RunConfig
from grpo.policy.constants import (
    GROUPED_EAGER,
    HEAD_CHUNK_TOKENS,
    LLAMA_SHAPED_MODELS,
    PACKED_SDPA,
    PACKING_ATTENTIONS,
    PLAIN_EAGER_MODELS,
)
from grpo.precision import with_concrete_dtype
from grpo.rollout.engines.registry import ENGINES, serves
from grpo.rollout.server.backend import kv_bytes_per_token

GIB = 2**30
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

LORA_ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Costs:
    """Per-element costs of the trainer's computation, calibrated against measured peaks (bench/plan.py)."""

    runtime_cpu_bytes: float = 0.45 * GIB  # Python, torch, transformers, grpo and the tokenizer, resident
    runtime_cuda_bytes: float = 0.50 * GIB  # the CUDA context and its kernels, outside torch's allocator
    # What one decoder layer keeps for backward, per token, is counted tensor by tensor (`layer_token_bytes`);
    # this scales the count to what is measured (autograd's own buffers, the allocator's rounding).
    activation_scale: float = 1.4
    # Eager attention keeps its softmax [heads, query, key] in fp32 and in the model's dtype.
    attention_score_bytes: float = 6.0
    # The loss's logits of one micro-batch (grpo.policy.head): [completion tokens, vocab] in the model's dtype,
    # kept for backward (which turns them into their own gradient in place) ...
    logits_dtype_copies: float = 1.0
    # ... and, a chunk of HEAD_CHUNK_TOKENS at a time, fp32 temporaries of [chunk, vocab]: the scaled logits,
    # the log-sum-exp's and the softmax's (for the entropy, and the backward's gradient).
    head_chunk_fp32_copies: float = 3.0
    # Generation: fp32 copies of [rows, vocab] per decode step (the sampler's buffers for the logits and the
    # log-probs, reused at every step; the first step's logits).
    decode_logits_fp32_copies: float = 3.0


COSTS = Costs()


@dataclass(frozen=True)
class Architecture:
    """A Llama-style decoder's sizes, from its config.json (or the tiny model's config section)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied_embeddings: bool
    file_dtype: str | None  # the weights' dtype on disk; None: built in memory (tiny)
    model_type: str = "llama"  # transformers' name for the architecture

    @classmethod
    def from_config_json(cls, config: dict, file_dtype: str | None) -> Architecture:
        config = config.get("text_config", config)
        heads = config["num_attention_heads"]
        return cls(
            vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"], num_layers=config["num_hidden_layers"],
            num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            tied_embeddings=bool(config.get("tie_word_embeddings", False)), file_dtype=file_dtype,
            model_type=config.get("model_type", "llama"),
        )

    @property
    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer in one decoder layer, by module name."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, \
            self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def layer_params(self) -> int:
        return sum(a * b for a, b in self.linear_shapes.values()) + 2 * self.hidden_size

    @property
    def params(self) -> int:
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return embeddings + self.num_layers * self.layer_params + self.hidden_size

    def lora_params(self, rank: int, targets: list[str]) -> int:
        adapted = LORA_ADAPTED if "all-linear" in targets else [n for n in LORA_ADAPTED if n in targets]
        shapes = self.linear_shapes
        return self.num_layers * sum(rank * (shapes[n][0] + shapes[n][1]) for n in adapted)

    def lora_base_params(self, targets: list[str]) -> int:
        """The weights of the adapted layers: what generation's merged copies take."""
        adapted = LORA_ADAPTED if "all-linear" in targets else [n for n in LORA_ADAPTED if n in targets]
        return self.num_layers * sum(a * b for n, (a, b) in self.linear_shapes.items() if n in adapted)


@dataclass(frozen=True)
class Component:
    name: str
    bytes: float
    note: str = ""


@dataclass(frozen=True)
class Phase:
    name: str  # load | generation | update
    components: tuple[Component, ...]

    @property
    def bytes(self) -> float:
        return sum(c.bytes for c in self.components)


@dataclass(frozen=True)
class Plan:
    device: str  # cpu | cuda
    architecture: Architecture
    params: int
    trainable: int
    prompt_tokens: int
    phases: tuple[Phase, ...]
    server_note: str | None = None  # what a server on the same GPU takes

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.bytes)

    @property
    def peak_bytes(self) -> float:
        return self.peak.bytes


def plan_memory(cfg: RunConfig, device: str, arch: Architecture, prompt_len: int, costs: Costs = COSTS) -> Plan:
    """The run's peak memory by phase: a pure function of the config, the architecture and the prompt length."""
    cfg = with_concrete_dtype(cfg, device)
    m, r, a = cfg.model, cfg.rollout, cfg.algo
    w = BYTES[m.dtype]
    lora = m.lora.rank > 0
    params = arch.params
    trainable = arch.lora_params(m.lora.rank, m.lora.target_modules) if lora else params
    # LoRA's adapters are fp32 (PEFT upcasts them); a full model trains its own weights.
    trained_bytes = 4 if lora else w
    master = trainable * 4 if (m.dtype != "float32" and cfg.actor.fp32_master_weights and not lora) else 0
    optimizer_element = 4 if (master or trained_bytes == 4) else trained_bytes
    runtime = costs.runtime_cuda_bytes if device == "cuda" else costs.runtime_cpu_bytes
    weights = params * w + (trainable * 4 if lora else 0)
    resident = [Component("runtime baseline", runtime, "interpreter, libraries" + (", CUDA context" if device == "cuda"
                                                                                    else "")),
                Component("weights", weights, f"{params / 1e6:.1f}M parameters in {m.dtype}"
                          + (f" + {trainable / 1e6:.2f}M LoRA in float32" if lora else ""))]
    if master:
        resident.append(Component("master weights", master, "fp32 copies of the trained weights"))
    if cfg.algo.kl_coef > 0 and not lora:
        resident.append(Component("reference model", params * w, "algo.kl_coef > 0: a frozen copy"))

    file_bytes = params * BYTES.get(arch.file_dtype or "", 0) if (arch.file_dtype and device == "cpu") else 0
    load = Phase("load", tuple(resident + ([Component("weights file", file_bytes, "memory-mapped while loading")]
                                           if file_bytes else [])))

    optimizer = Component("optimizer state", trainable * 2 * optimizer_element,
                          f"AdamW moments in {'float32' if optimizer_element == 4 else m.dtype}")
    steady = resident + [optimizer]
    T, P = r.max_new_tokens, prompt_len
    gen_rows = min(r.generation_batch_size, r.problems_per_step * r.samples_per_problem)
    attention = attention_for(cfg, device, arch)
    eager = attention in ("eager", GROUPED_EAGER)
    gen: list[Component] = []
    if not serves(r.engine):  # auto may pick vLLM on a GPU: planned as embedded, the larger
        kv = gen_rows * (P + T) * kv_bytes_per_token(arch.num_layers, arch.num_kv_heads, arch.head_dim, m.dtype)
        gen.append(Component("KV cache", kv, f"{gen_rows} rows x {P + T} tokens"))
        prompts = min(gen_rows, r.problems_per_step)  # each distinct prompt is prefilled once
        prefill = prompts * P * (arch.hidden_size + arch.intermediate_size) * w * 2
        if eager:
            prefill += prompts * arch.num_heads * P * P * costs.attention_score_bytes
        gen.append(Component("prefill activations", prefill, "one layer's, no gradient"))
        gen.append(Component("decode logits", gen_rows * arch.vocab_size * 4 * costs.decode_logits_fp32_copies,
                             f"{gen_rows} rows x {arch.vocab_size} vocabulary, fp32"))
        if lora:
            gen.append(Component("merged LoRA weights", arch.lora_base_params(m.lora.target_modules) * w,
                                 "adapted layers merged for generation"))
        if device == "cpu" and m.dtype == "bfloat16":  # grpo.policy.packed
            shapes = arch.linear_shapes
            packed = arch.num_layers * sum(a * b for a, b in shapes.values()) + arch.vocab_size * arch.hidden_size
            note = "linear layers and head laid out for oneDNN"
            if attention == GROUPED_EAGER and arch.model_type in LLAMA_SHAPED_MODELS and not lora:
                # The engine's decode step lays q, k and v out once more, as one product (its decode_step).
                packed += arch.num_layers * sum(a * b for a, b in (shapes["q_proj"], shapes["k_proj"], shapes["v_proj"]))
                note += ", q/k/v once more as one"
            gen.append(Component("packed weights", packed * w, note))
    generation = Phase("generation", tuple(steady + gen))

    rows_per_step = r.problems_per_step * r.samples_per_problem
    b = min(a.micro_batch_size, rows_per_step)
    activations = activation_components(cfg, arch, b, P, attention, costs)
    grads = trainable * (4 if (master or trained_bytes == 4) else w)
    if b == rows_per_step:
        # One micro-batch: its backward makes the gradients as it frees the activations, so the peak holds
        # the larger of the two, not both.
        gradients = Component("gradients", max(0.0, grads - sum(c.bytes for c in activations)),
                              "made while the activations are freed (one micro-batch): beyond them")
    else:
        gradients = Component("gradients", grads, "accumulated over micro-batches" + (", fp32" if master else ""))
    update = Phase("update", tuple(steady + [gradients, *activations]))
    return Plan(device, arch, params, trainable, prompt_len, (load, generation, update), _server_note(cfg, device))


def layer_token_bytes(cfg: RunConfig, arch: Architecture, kv_per_token: float, attention: str) -> float:
    """Bytes one decoder layer keeps for backward per token, `kv_per_token` being the key/value positions its
    row holds per token it runs (completions attend to their prompt's cache too):
    two RMSNorms (fp32 input and normalised copy, and the dtype output), rotated queries and the attention
    output, keys and values (expanded to every query head by eager and SDPA on CPU, not by grouped_eager),
    the MLP's gate, its activation, up and their product; with LoRA, PEFT's fp32 copy of each adapted
    layer's input."""
    w = BYTES[cfg.model.dtype]
    h, i, q = arch.hidden_size, arch.intermediate_size, arch.num_heads * arch.head_dim
    kv = arch.num_kv_heads * arch.head_dim if attention == GROUPED_EAGER else q
    total = 2 * h * (8 + w) + 2 * q * w + 2 * kv * w * kv_per_token + 4 * i * w
    if cfg.model.lora.rank > 0:
        targets = cfg.model.lora.target_modules
        adapted = LORA_ADAPTED if "all-linear" in targets else [n for n in LORA_ADAPTED if n in targets]
        total += sum(arch.linear_shapes[n][0] for n in adapted) * 4
    return total


def activation_components(cfg: RunConfig, arch: Architecture, rows: int, prompt_len: int, attention: str,
                          costs: Costs = COSTS) -> list[Component]:
    """What one micro-batch's forward keeps for its backward, and its logits."""
    w = BYTES[cfg.model.dtype]
    eager = attention in ("eager", GROUPED_EAGER)
    T, P = cfg.rollout.max_new_tokens, prompt_len
    heads, layers = arch.num_heads, arch.num_layers
    # A micro-batch holds whole groups (a group split at its edges adds one prompt); each distinct prompt runs
    # once for its group's rows, whose completions attend to it and to the completion so far.
    G = cfg.rollout.samples_per_problem
    prompts = min(cfg.rollout.problems_per_step, -(-rows // G) + (1 if rows % G else 0))
    shared_scores = (prompts * P * P + rows * T * (P + T)) * heads * costs.attention_score_bytes if eager else 0
    if cfg.model.gradient_checkpointing:
        # Each layer keeps only its input, and one layer at a time recomputes its activations in backward.
        # The grouped eager and the packed SDPA attention run the micro-batch packed (grpo.policy.attention.
        # PackedPrompts): the prompts once; any other runs every row's prompt and completion in full (no KV
        # cache to share).
        packed = attention in PACKING_ATTENTIONS
        tokens = prompts * P + rows * T if packed else rows * (P + T)
        per_token = layer_token_bytes(cfg, arch, 1.0, attention)
        kept = layers * tokens * arch.hidden_size * w + tokens * per_token
        scores = (shared_scores if packed else rows * heads * (P + T) ** 2 * costs.attention_score_bytes) if eager else 0
        note = (f"{prompts} prompts x {P} + {rows} rows x {T} tokens" if packed else f"{rows} rows x {P + T} tokens") \
            + ", layer inputs kept, one layer recomputed"
    else:
        kept = layers * (prompts * P * layer_token_bytes(cfg, arch, 1.0, attention)
                         + rows * T * layer_token_bytes(cfg, arch, (P + T) / T, attention))
        scores = layers * shared_scores
        note = f"{prompts} prompts x {P} + {rows} rows x {T} tokens, {layers} layers"
    logits = rows * T * arch.vocab_size * w * costs.logits_dtype_copies \
        + min(HEAD_CHUNK_TOKENS, rows * T) * arch.vocab_size * 4 * costs.head_chunk_fp32_copies
    if cfg.model.lora.rank == 0:  # the head's weight gradient, made whole before it is accumulated
        logits += arch.vocab_size * arch.hidden_size * w
    out = [Component("activations", kept * costs.activation_scale, note)]
    if scores:
        out.append(Component("attention scores", scores * costs.activation_scale,
                             "eager attention's softmax, kept for backward"))
    out.append(Component("logits", logits, f"{rows} rows x {T} tokens x {arch.vocab_size} vocabulary"))
    return out


def attention_for(cfg: RunConfig, device: str, arch: Architecture) -> str:
    """The attention the trainer will run (grpo.policy.models picks the same)."""
    attn = cfg.model.attn_implementation
    if attn != "auto":
        return attn
    plain = arch.model_type in PLAIN_EAGER_MODELS
    if device != "cpu":
        return PACKED_SDPA if plain else "sdpa"
    return GROUPED_EAGER if plain else "eager"


def _server_note(cfg: RunConfig, device: str) -> str | None:
    engine = cfg.rollout.engine
    if not serves(engine) or cfg.rollout.server.urls:
        return None
    if device == "cuda":
        fraction = server_fraction(cfg)
        return f"the {engine} server takes {fraction:.0%} of the GPU (rollout.server.memory_fraction)"
    kv = cfg.rollout.server.kv_cache_gib
    return (f"the {engine} server is a process of its own: its weights and KV cache "
            f"({f'{kv:g} GiB' if kv is not None else 'its default'}, rollout.server.kv_cache_gib) come on top")


def server_fraction(cfg: RunConfig) -> float:
    return cfg.rollout.server.memory_fraction or ENGINES[cfg.rollout.engine].gpu_fraction


def suggestion(cfg: RunConfig, plan: Plan, room: float, device: str, gpu_total: float | None = None) -> str:
    """The knob to change, and to what, so that the peak fits in `room` bytes; `gpu_total`, the GPU's memory,
    sizes a same-GPU server's memory fraction (on CUDA)."""
    cfg = with_concrete_dtype(cfg, device)
    r, a = cfg.rollout, cfg.algo
    peak = plan.peak
    options: list[str] = []
    if peak.name == "generation" and r.generation_batch_size > 1:
        fixed = peak.bytes - sum(c.bytes for c in peak.components
                                 if c.name in ("KV cache", "prefill activations", "decode logits"))
        per_row = (peak.bytes - fixed) / min(r.generation_batch_size, r.problems_per_step * r.samples_per_problem)
        rows = int((room - fixed) // per_row) if per_row > 0 else 0
        if rows >= 1:
            options.append(f"rollout.generation_batch_size={rows} (from {r.generation_batch_size})")
    if peak.name == "update":
        for size in range(a.micro_batch_size - 1, 0, -1):  # the largest that fits
            trial = replace(cfg, algo=replace(a, micro_batch_size=size))
            if plan_memory(trial, device, plan.architecture, plan.prompt_tokens).peak_bytes <= room:
                options.append(f"algo.micro_batch_size={size} (from {a.micro_batch_size})")
                break
    m = cfg.model
    if not m.gradient_checkpointing and peak.name == "update":
        trial = replace(cfg, model=replace(m, gradient_checkpointing=True))
        if plan_memory(trial, device, plan.architecture, plan.prompt_tokens).peak_bytes <= room:
            options.append("model.gradient_checkpointing=true")
    if m.lora.rank == 0:
        trial = replace(cfg, model=replace(m, lora=replace(m.lora, rank=16)))
        if plan_memory(trial, device, plan.architecture, plan.prompt_tokens).peak_bytes <= room:
            options.append("model.lora.rank=16")
    if cfg.actor.fp32_master_weights and m.dtype != "float32" and m.lora.rank == 0:
        trial = replace(cfg, actor=replace(cfg.actor, fp32_master_weights=False))
        if plan_memory(trial, device, plan.architecture, plan.prompt_tokens).peak_bytes <= room:
            options.append("actor.fp32_master_weights=false")
    if device == "cuda" and gpu_total and serves(r.engine) and not r.server.urls:
        fraction = math.floor((1 - peak.bytes / gpu_total) * 100) / 100
        if fraction > 0.05:
            options.insert(0, f"rollout.server.memory_fraction={fraction:g} (from {server_fraction(cfg):g})")
    options.extend(_attention_and_length_options(cfg, plan, room, device))
    if not options:
        return "a smaller model (no knob of this run's fits it)"
    return "set " + " or ".join(options)


def _attention_and_length_options(cfg: RunConfig, plan: Plan, room: float, device: str) -> list[str]:
    """Another attention implementation, or the longest answer budget, with which the run fits."""
    def fits(trial: RunConfig) -> bool:
        return plan_memory(trial, device, plan.architecture, plan.prompt_tokens).peak_bytes <= room

    m, r, options = cfg.model, cfg.rollout, []
    for attention in ("sdpa", "flash_attention_2") if device == "cuda" else ("sdpa",):
        if m.attn_implementation != attention and fits(replace(cfg, model=replace(m, attn_implementation=attention))):
            options.append(f"model.attn_implementation={attention}")
            break
    low, high = 0, r.max_new_tokens - 1  # the largest budget that fits, by bisection
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(replace(cfg, rollout=replace(r, max_new_tokens=mid))) else (low, mid - 1)
    if low >= 1:
        options.append(f"rollout.max_new_tokens={low} (from {r.max_new_tokens})")
    return options


@dataclass(frozen=True)
class Available:
    """The memory a run may take, and where the figure comes from (for the report)."""

    bytes: float
    source: str


def render(plan: Plan, available: Available | None) -> list[str]:
    """The plan as text: each phase's components and total, the peak, and what is available."""
    arch = plan.architecture
    unit = "GPU memory (allocated + CUDA context)" if plan.device == "cuda" else "resident memory (RSS)"
    lines = [f"model: {arch.num_layers} layers, hidden {arch.hidden_size}, vocabulary {arch.vocab_size}, "
             f"{plan.params / 1e6:.1f}M parameters ({plan.trainable / 1e6:.2f}M trained); "
             f"prompts up to {plan.prompt_tokens} tokens", f"predicted peak {unit} by phase, on {plan.device}:"]
    for phase in plan.phases:
        lines.append(f"  {phase.name:<11} {phase.bytes / GIB:7.2f} GiB")
        for c in phase.components:
            lines.append(f"    {c.name:<20} {c.bytes / GIB:7.3f} GiB  {c.note}")
    lines.append(f"peak: {plan.peak_bytes / GIB:.2f} GiB ({plan.peak.name})")
    if plan.server_note:
        lines.append(plan.server_note)
    if available is not None:
        verdict = "fits" if plan.peak_bytes <= available.bytes else "does NOT fit"
        lines.append(f"available: {available.bytes / GIB:.2f} GiB ({available.source}): {verdict}")
    return lines


