"""Plan past this machine: per-phase step time and the bytes each step communicates, measured here on a
small random model as one process and as two ranks (FSDP2 on gloo), then projected to Qwen2.5-0.5B, 1.5B
and 7B on 8 and 64 H100s from the constants below.

    python bench/scaling.py [--steps 8] [--out bench_runs/scaling]
    python bench/scaling.py --mfu     # on a CUDA GPU: the update's MFU per model (TRAIN_MFU)

Measured: three `grpo train` runs of the same config (one process, two ranks under torchrun, and two
ranks again with every torch.distributed collective counted by phase); the count is checked against
`fsdp_step_bytes`, the formula the projection then applies to Qwen's sizes. Projected: arithmetic from
the constants below; of those only TRAIN_MFU was reported as measured on a GPU (not reproduced since).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import torch

if TYPE_CHECKING:
    from transformers import Qwen2Config, Qwen2ForCausalLM

# --- Assumptions: every projected figure is arithmetic from these ---------------------------------
PEAK_FLOPS = 989e12  # H100 SXM dense bf16 tensor-core peak, FLOP/s
# Model-FLOPs utilisation of the trainer's forward and backward passes: reported as measured once with
# `--mfu`'s code on an H100 lent to one session (torch 2.11, SDPA, one micro-batch, no FSDP; not
# reproduced since). A flat 40% holds for 7B only: for the small models the fp32 log-softmax over 151,936 logits and kernel overheads weigh.
TRAIN_MFU = {"Qwen2.5-0.5B": 0.063, "Qwen2.5-1.5B": 0.142, "Qwen2.5-7B": 0.383}
GPU_BYTES = 80e9 * 0.9  # H100 80 GB, a tenth kept for the CUDA context, fragmentation and NCCL buffers
GPUS_PER_NODE = 8
NVLINK_BUS = 450e9  # bytes/s per GPU inside a node (NVLink 4: 900 GB/s counting both directions)
IB_BUS = 400e9 / 8  # bytes/s per GPU across nodes: one 400 Gb/s InfiniBand NIC per GPU bounds the ring
# vLLM decode throughput per GPU (bf16, one replica per GPU) with REF_CONCURRENCY sequences in flight:
# assumed round figures, not measured. Below that concurrency decoding is memory-bound, so a decode
# step takes as long with fewer sequences: generation cannot go faster than COMPLETION_TOKENS steps.
VLLM_TOKENS_PER_S = {"Qwen2.5-0.5B": 12_000, "Qwen2.5-1.5B": 9_000, "Qwen2.5-7B": 5_000}
REF_CONCURRENCY = 64
# A GSM8K-like step: 64 prompts x 8 samples, 150 prompt and 300 completion tokens each.
PROMPTS, SAMPLES, PROMPT_TOKENS, COMPLETION_TOKENS = 64, 8, 150, 300
MICRO_BATCH = 8  # algo.micro_batch_size: rows per forward/backward pass
ACT_BYTES = 34  # bf16 activations kept for backward, per token, layer and hidden unit (Korthikanti et al.
# 2022 with flash attention, no recomputation)
LOGIT_BYTES = 16  # per completion token and vocabulary entry: bf16 logits, fp32 log-softmax, gradients
GPU_COUNTS = (8, 64)

# Public config.json dimensions; weights are random (meta device): only sizes are needed.
QWEN = {
    "Qwen2.5-0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, tie_word_embeddings=True),
    "Qwen2.5-1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, tie_word_embeddings=True),
    "Qwen2.5-7B": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, tie_word_embeddings=False),
}
QWEN_VOCAB = 151936

# The measured config: `tiny` widened so the update is not all overhead; bf16 compute so all-gathers
# travel in the compute dtype and reduce-scatters in fp32 as on GPUs; old log-probs recomputed, as with
# a server engine (the projection's vLLM); micro-batches of 4 so each rank accumulates over 2 passes.
SMALL = ["model.dtype=bfloat16", "model.tiny.hidden_size=256", "model.tiny.num_layers=4",
         "model.tiny.intermediate_size=1024", "algo.recompute_old_logprobs=true", "algo.micro_batch_size=4",
         "checkpoint.every_steps=0", "checkpoint.save_final=false"]
# (loop phase, collective) -> the term of fsdp_step_bytes it is checked against
TERMS = {("rollout", "all_gather_single"): "rollout all-gather",
         ("advantages", "all_gather_single"): "old log-probs all-gather",
         ("update", "all_gather_single"): "update all-gather",
         ("update", "reduce_scatter_single"): "update reduce-scatter"}


def fsdp_step_bytes(layers: int, root: int, passes: int, compute_bytes: int, forwards: int = 2) -> dict[str, int]:
    """Payload bytes FSDP2 moves in one step of this loop as built (the full tensor each collective
    assembles or reduces; in a ring each GPU sends and receives (n-1)/n of it). `layers` and `root`:
    parameter elements in the decoder layers' groups and in the root's (embeddings, final norm, head).

    Rollout and the old log-probs each gather every group once (`Policy.unsharded`). Each update pass
    makes `forwards` model calls, each gathering every group: one where the micro-batch runs packed (the
    grouped eager attention, CPU's default, and the packed SDPA, GPUs'), two on the shared-prompt path
    (prompt, then completions: any other attention); backward re-gathers a layer once per call (it is resharded after
    each) and the root once. The last pass reduce-scatters fp32 gradients, a layer's once per call and
    the root's once."""
    full = (layers + root) * compute_bytes
    backward = forwards * layers + root
    return {"rollout all-gather": full, "old log-probs all-gather": full,
            "update all-gather": passes * (forwards * full + backward * compute_bytes),
            "update reduce-scatter": backward * 4}


def group_sizes(model: torch.nn.Module, world: int) -> tuple[int, int, int]:
    """-> (elements in all decoder layers, in the root, in the largest group), as FSDP2 groups them
    (`grpo.policy.sharding.shard`), each parameter's first dimension padded to a multiple of `world`."""
    def padded(params: Iterator[torch.nn.Parameter]) -> int:
        return sum(math.ceil(p.shape[0] / world) * world * p[0].numel() for p in params)

    layer_types = set(model._no_split_modules)
    layers = [m for m in model.modules() if type(m).__name__ in layer_types]
    in_layers = {id(p) for m in layers for p in m.parameters()}
    sizes = [padded(m.parameters()) for m in layers]
    root = padded(p for p in model.parameters() if id(p) not in in_layers)  # a tied head is counted once
    return sum(sizes), root, max(root, *sizes)


# --- Measured --------------------------------------------------------------------------------------

def count_collectives(into: Path, overrides: list[str]) -> int:
    """Under torchrun: `grpo train` with the collectives FSDP2 and the loop call wrapped, adding each
    one's payload to its step and phase; rank 0 writes {step: {phase: {collective: bytes}}}."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from grpo import cli
    from grpo.train import loop
    from grpo.train import timing as phases

    where = ["start"]  # "step:phase" while a step runs
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    payloads: dict[str, Callable[..., torch.Tensor | int]] = {
        "all_gather_single": lambda out, *a, **k: out,  # FSDP2 parameter gathers
        "reduce_scatter_single": lambda *a, **k: k["input"] if "input" in k else a[1],  # FSDP2 gradients
        "all_reduce": lambda t, *a, **k: t,  # the loop's reduced scalars, the gradient norm
        "broadcast": lambda t, *a, **k: t,  # rank 0's decisions (objects)
        "all_gather": lambda out, t, *a, **k: t.numel() * t.element_size() * len(out),  # gathered objects
    }
    for name, payload in payloads.items():
        def counted(*args, _name=name, _payload=payload, _call=getattr(c10d, name), **kwargs):
            size = _payload(*args, **kwargs)
            counts[where[0]][_name] += size if isinstance(size, int) else size.numel() * size.element_size()
            return _call(*args, **kwargs)
        setattr(c10d, name, counted)  # callers inside torch.distributed look names up here,
        setattr(dist, name, counted)  # FSDP2 and grpo.dist through the package

    timed = phases.PhaseTimer.phase
    run_step = loop.TrainingLoop._train_step

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        with timed(self, name):
            step, outer = where[0].split(":")[0], where[0]
            where[0] = f"{step}:{name}"
            try:
                yield
            finally:
                where[0] = outer

    def train_step(self, step: int) -> None:
        where[0] = f"{step}:other"  # outside a named phase: broadcasts of rank 0's decisions
        try:
            run_step(self, step)
        finally:
            where[0] = "between steps"  # checkpoints, start and end

    phases.PhaseTimer.phase, loop.TrainingLoop._train_step = phase, train_step
    status = cli.main(["train", "--config", "tiny", *overrides])
    if dist.get_rank() == 0:
        into.write_text(json.dumps(counts, indent=1))
    return status


def train(out: Path, name: str, ranks: int, steps: int, count: bool = False) -> list[dict]:
    """One `grpo train` run of the measured config -> its metrics.jsonl lines. One thread per rank
    (torchrun's default), the single process included: each rank stands for one GPU."""
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [f"run_dir={run_dir}", f"train.steps={steps}", *SMALL]
    if ranks == 1:
        command = [sys.executable, "-m", "grpo", "train", "--config", "tiny", *overrides]
    else:
        entry = [__file__, "--count-into", str(out / "counts.json")] if count else ["-m", "grpo", "train",
                                                                                    "--config", "tiny"]
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                   *entry, *overrides]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def measure(out: Path, steps: int) -> None:
    from grpo.config import load_config
    from grpo.policy.constants import PACKING_ATTENTIONS
    from grpo.policy.models import DTYPES, load_model_and_tokenizer

    one, two = train(out, "one", 1, steps), train(out, "two", 2, steps)
    counted_lines = train(out, "count", 2, steps, count=True)
    counts = json.loads((out / "counts.json").read_text())
    cfg = load_config("tiny", SMALL)
    model, _ = load_model_and_tokenizer(cfg.model, torch.device("cpu"))
    layers, root, _ = group_sizes(model, 2)
    compute_bytes = DTYPES[cfg.model.dtype].itemsize
    packed = model.config._attn_implementation in PACKING_ATTENTIONS  # a micro-batch in one model call
    print(f"measured here: random Llama {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params "
          f"({cfg.model.tiny.num_layers} layers, hidden {cfg.model.tiny.hidden_size}), {cfg.model.dtype} compute, "
          f"{steps} steps, median of steps 2-{steps}, one CPU thread per rank, gloo")
    print(f"\n{'phase':<28}{'1 process s':>12}{'2 ranks s':>12}{'2 ranks / 1':>13}")
    for label, key in [("rollout (generation)", "rollout"), ("old log-probs (advantages)", "advantages"),
                       ("update", "update"), ("weight sync", "sync"), ("whole step", "step")]:
        a, b = (statistics.median(line.get(f"time/{key}_s", 0.0) for line in lines[1:]) for lines in (one, two))
        ratio = f"{b / a:12.2f}x" if a > 1e-3 else f"{'-':>13}"  # the embedded engine syncs nothing
        print(f"{label:<28}{a:12.3f}{b:12.3f}{ratio}")

    # Bytes: every step's count against the formula for that step's passes (groups split across ranks).
    matched, terms, control = 0, defaultdict(list), []
    for line in counted_lines:
        measured = defaultdict(int)
        for where, by_collective in counts.items():
            if where.startswith(f"{line['step']}:"):
                for collective, size in by_collective.items():
                    term = TERMS.get((where.split(":")[1], collective))
                    measured[term or "control"] += size
        rows = math.ceil(line["groups/trained"] / 2) * cfg.rollout.samples_per_problem
        expected = fsdp_step_bytes(layers, root, math.ceil(rows / cfg.algo.micro_batch_size), compute_bytes,
                                   forwards=1 if packed else 2)
        if line.get("update/skip_reason") is not None:  # no update, no old log-probs
            expected = {"rollout all-gather": expected["rollout all-gather"]}
        matched += all(measured.get(t, 0) == expected.get(t, 0) for t in {*expected, *TERMS.values()})
        for term in TERMS.values():
            terms[term].append((measured.get(term, 0), expected.get(term, 0)))
        control.append(measured["control"])
    print(f"\nbytes per step, 2 ranks (payload: the full tensor each collective assembles or reduces), mean of "
          f"{len(counted_lines)} steps")
    print(f"{'':<28}{'counted':>12}{'formula':>12}")
    for term, pairs in terms.items():
        print(f"{term:<28}{statistics.mean(m for m, _ in pairs):12,.0f}{statistics.mean(e for _, e in pairs):12,.0f}")
    print(f"{'control (scalars, objects)':<28}{statistics.mean(control):12,.0f}{'-':>12}")
    print(f"formula = count on {matched} of {len(counted_lines)} steps (layers {layers:,} + root {root:,} elements, "
          f"padded for 2 ranks)")


# --- Projected -------------------------------------------------------------------------------------

def ring_seconds(payload: float, gpus: int) -> float:
    """An all-gather or reduce-scatter in a ring: each GPU sends (n-1)/n of the payload over its link
    (an all-reduce is both: twice that). Past one node the InfiniBand NIC is the slowest link."""
    return (gpus - 1) / gpus * payload / (NVLINK_BUS if gpus <= GPUS_PER_NODE else IB_BUS)


def qwen(name: str, device: str = "meta") -> Qwen2ForCausalLM:
    """Random weights (none at all on the meta device, where only sizes exist)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.device(device):
        return Qwen2ForCausalLM(Qwen2Config(vocab_size=QWEN_VOCAB, **QWEN[name]))


def matmul_params(model: Qwen2ForCausalLM) -> int:
    """Weights each token is multiplied by: all but an untied input embedding, which is a lookup."""
    config = model.config
    return sum(p.numel() for p in model.parameters()) - (
        0 if config.tie_word_embeddings else config.vocab_size * config.hidden_size)


def project(name: str, gpus: int) -> dict[str, float]:
    model = qwen(name)
    config = model.config
    layers, root, largest = group_sizes(model, 1)
    params = layers + root
    hidden, depth, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    rows = PROMPTS * SAMPLES / gpus  # each GPU's share; groups are never split
    passes = math.ceil(rows / MICRO_BATCH)
    # Qwen2 on a GPU attends with the packed SDPA (grpo.policy.attention): one model call a micro-batch.
    fsdp = sum(fsdp_step_bytes(layers, root, passes, compute_bytes=2, forwards=1).values())
    sync = 2 * params  # bf16 weights into each GPU's colocated vLLM replica, which holds 1/n of them already

    # FLOPs: 2 per weight per token forward, 4 backward; the old log-probs are one more forward. Both
    # run each prompt once per group (shared-prompt path). Attention's own FLOPs (~1% here) are left out.
    tokens = PROMPTS * PROMPT_TOKENS + PROMPTS * SAMPLES * COMPLETION_TOKENS
    compute = (6 + 2) * matmul_params(model) * tokens / (gpus * PEAK_FLOPS * TRAIN_MFU[name])
    decode_step = REF_CONCURRENCY / VLLM_TOKENS_PER_S[name] * max(1.0, rows / REF_CONCURRENCY)
    generate = COMPLETION_TOKENS * decode_step  # prefill of 150-token prompts neglected
    fsdp_s, sync_s = ring_seconds(fsdp, gpus), ring_seconds(sync, gpus)
    # Not built yet, for comparison past a node: HSDP, FSDP inside each node over NVLink and the nodes'
    # replicas all-reducing their fp32 gradient shards over InfiniBand (each reduce-scatter, once more).
    nodes = max(gpus // GPUS_PER_NODE, 1)
    shard_grads = fsdp_step_bytes(layers, root, passes, 2)["update reduce-scatter"] / min(gpus, GPUS_PER_NODE)
    hsdp_s = ring_seconds(fsdp, min(gpus, GPUS_PER_NODE)) + 2 * (nodes - 1) / nodes * shard_grads / IB_BUS
    return {"params": params, "passes": passes, "fsdp": fsdp, "sync": sync, "compute": compute, "fsdp_s": fsdp_s,
            "sync_s": sync_s, "generate": generate,
            # FSDP2 prefetches the next group's all-gather during this one's compute: the update takes
            # the longer of the two. Sync, generation and the update follow one another.
            "step": sync_s + generate + max(compute, fsdp_s),
            "hsdp_s": hsdp_s, "hsdp_step": sync_s + generate + max(compute, hsdp_s),
            "min_gpus": min_gpus(params, largest, hidden, depth, vocab, config)}


def peak_bytes(gpus: int, params: int, largest: int, hidden: int, depth: int, vocab: int, kv_per_token: int) -> float:
    """Per GPU at the heavier of the update and generation, as built."""
    rows = PROMPTS * SAMPLES / gpus
    # fp32 sharded weights (Adam's master copy), two fp32 moments and fp32 sharded gradients: 16 B/param.
    state = 16 * params / gpus
    # With gradient sync off between micro-batches FSDP2 keeps every gradient unsharded, in fp32. (One
    # process, no FSDP: bf16 weights and grads, fp32 master, moments and grads: 20 B/param, the same.)
    accumulated = 4 * params if rows > MICRO_BATCH else 0
    gathered = 2 * 2 * largest  # bf16: the group computing and the next one prefetched
    tokens = MICRO_BATCH * (PROMPT_TOKENS + COMPLETION_TOKENS)
    activations = tokens * ACT_BYTES * hidden * depth + MICRO_BATCH * COMPLETION_TOKENS * LOGIT_BYTES * vocab
    update = state + accumulated + gathered + activations
    generation = state + 2 * params + rows * (PROMPT_TOKENS + COMPLETION_TOKENS) * kv_per_token  # bf16 copy, KV
    return max(update, generation)


def min_gpus(params: int, largest: int, hidden: int, depth: int, vocab: int, config: Qwen2Config) -> int | None:
    """The fewest GPUs (a power of two, up to 64) whose memory holds the training state and its working set."""
    kv_per_token = 2 * depth * config.num_key_value_heads * (hidden // config.num_attention_heads) * 2
    return next((g for g in (1, 2, 4, 8, 16, 32, 64)
                 if peak_bytes(g, params, largest, hidden, depth, vocab, kv_per_token) <= GPU_BYTES), None)


def print_projection() -> None:
    print(f"\nprojected: H100 80 GB, {PEAK_FLOPS / 1e12:.0f} TFLOP/s bf16 at the MFU measured, NVLink "
          f"{NVLINK_BUS / 1e9:.0f} GB/s per GPU in a node, InfiniBand {IB_BUS * 8 / 1e9:.0f} Gb/s per GPU across; "
          f"step: {PROMPTS} prompts x {SAMPLES} samples, {PROMPT_TOKENS} + {COMPLETION_TOKENS} tokens, micro-batch "
          f"{MICRO_BATCH}; GB are payload per GPU per step")
    print(f"{'model':<14}{'params':>7}{'GPUs':>6}{'passes':>7}{'FSDP GB':>9}{'sync GB':>9}{'compute s':>10}"
          f"{'FSDP s':>8}{'sync s':>8}{'generate s':>11}{'step s':>8}{'min GPUs':>9}")
    steps = {}
    for name in QWEN:
        for gpus in GPU_COUNTS:
            p = steps[name, gpus] = project(name, gpus)
            fewest = p["min_gpus"] or f">{GPU_COUNTS[-1]}"
            print(f"{name:<14}{p['params'] / 1e9:6.2f}B{gpus:6d}{p['passes']:7d}{p['fsdp'] / 1e9:9.1f}"
                  f"{p['sync'] / 1e9:9.1f}{p['compute']:10.2f}{p['fsdp_s']:8.2f}{p['sync_s']:8.2f}"
                  f"{p['generate']:11.2f}{p['step']:8.2f}{fewest:>9}")
    low, high = GPU_COUNTS
    print(f"\n{high} / {low} GPUs, step time: " + ", ".join(
        f"{name} {steps[name, high]['step'] / steps[name, low]['step']:.2f}x" for name in QWEN))
    print(f"{high} GPUs as HSDP (not built; FSDP in a node, gradients all-reduced across): " + ", ".join(
        f"{name} comm {steps[name, high]['hsdp_s']:.2f} s, step {steps[name, high]['hsdp_step']:.2f} s"
        for name in QWEN))


def measure_mfu() -> None:
    """Where a CUDA GPU is: the update's forward and backward (grpo's shared-prompt path, packed by the packed
    SDPA as `auto` runs it) over one GSM8K-shaped micro-batch of each model, random bf16 weights, one GPU -> the
    MFU that TRAIN_MFU records (recorded before 2026-11-26 with the two-pass form)."""
    from grpo.policy.attention import use_packed_sdpa
    from grpo.policy.update import TrainBatch, collate, completion_logprobs

    device, rng = torch.device("cuda"), torch.Generator().manual_seed(0)
    print(f"{torch.cuda.get_device_name()}: forward + backward of {MICRO_BATCH} rows sharing a {PROMPT_TOKENS}-token "
          f"prompt, {COMPLETION_TOKENS} completion tokens each, bf16, no FSDP")
    for name in QWEN:
        model = qwen(name, "cuda").to(torch.bfloat16)
        use_packed_sdpa(model)
        prompt = torch.randint(QWEN_VOCAB, (PROMPT_TOKENS,), generator=rng).tolist()
        completions = [torch.randint(QWEN_VOCAB, (COMPLETION_TOKENS,), generator=rng).tolist()
                       for _ in range(MICRO_BATCH)]
        batch = TrainBatch([prompt] * MICRO_BATCH, completions, [[0.0] * COMPLETION_TOKENS] * MICRO_BATCH,
                           torch.zeros(MICRO_BATCH), gradient_rows=list(range(MICRO_BATCH)))
        mb = collate(batch, list(range(MICRO_BATCH)), 0, device)

        def forward_backward(model: torch.nn.Module = model) -> None:
            completion_logprobs(model, mb, 1.0)[0].sum().backward()
            model.zero_grad(set_to_none=True)

        for _ in range(2):  # warm-up: kernels chosen, memory pooled
            forward_backward()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            forward_backward()
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / 5
        flops = 6 * matmul_params(model) * (PROMPT_TOKENS + MICRO_BATCH * COMPLETION_TOKENS)
        print(f"{name:<14}{seconds * 1e3:8.1f} ms  MFU {flops / seconds / PEAK_FLOPS:6.1%} (recorded {TRAIN_MFU[name]:.1%})  "
              f"peak memory {torch.cuda.max_memory_allocated() / 1e9:.1f} GB")
        del model, forward_backward
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", default="bench_runs/scaling")
    parser.add_argument("--mfu", action="store_true", help="only measure the update's MFU on this CUDA GPU")
    parser.add_argument("--count-into", type=Path, help=argparse.SUPPRESS)  # the counting run's ranks
    args, overrides = parser.parse_known_args()
    if args.count_into:
        sys.exit(count_collectives(args.count_into, overrides))
    if args.mfu:
        return measure_mfu()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    measure(out, args.steps)
    print_projection()


if __name__ == "__main__":
    main()
