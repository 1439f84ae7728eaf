"""How far the quickstart's generation and update are from what this machine can do, measured in one run.

    PYTHONPATH=src python bench/roofline.py [--steps 3] [--warmup 1] [--dtype auto|bfloat16|float32]
                                            [--metrics RUN_DIR/metrics.jsonl] [--quick] [--out bench/RESULTS.md]

First the machine's own limits at the model's shapes (SmolLM2-135M-Instruct, the quickstart's model):
- matmul throughput (GFLOP/s) in the run's precision (`--dtype`; `auto` is what the quickstart picks on this
  machine: bf16 where its products are faster, else fp32; grpo.precision), for one decoder layer's projections
  (q, k, v, o, gate, up, down) and the output head, at the decode batch (the step's 8 x 8 = 64 sequences, one
  token each) and at the update's micro-batch (32 rows of prompt + completion tokens), forward and (for the
  update) the two backward products of each (dX = dY W, dW = dY^T X); each shape timed alone, the limit being
  a token's FLOPs over the time of its products, each layer's projections counted once per layer and the head
  once (until 2026-11-26 the layer's were counted once, so the head, 8x one layer's FLOPs, set the limit); the
  head's logits in the form grpo computes them here (vocabulary blocks on an AVX2 CPU in fp32, bench/head.py);
- memory bandwidth: a large copy (bytes read + written per second), against which a decode step's
  traffic (every weight read once per step, plus the KV cache) is set.
Then the quickstart itself, `--steps` timed steps after `--warmup` (or the lines of an existing
metrics.jsonl): generation and update in tokens/s and as a fraction of the limit. FLOPs are counted per
token: 2N forward, 6N forward+backward, N the weights of the matmuls a token goes through (the head only
on completion tokens, as grpo's chunked head), plus attention (4 x context x hidden per layer forward); the
update's only over the rows it computes (those of non-zero advantage: `actor/tokens_computed`).
Generation is the prefill of the step's distinct prompts (their tokens at the prefill's rows) and the
decode steps (the generated tokens at the decode batch); until 2026-11-26 its FLOPs left the prefill out
while its time held it. Decoding alone is generation less the prefill, which this script times by itself
(the model's forward over the 8 prompts, in grpo's precision). The limit of a phase is max(its FLOPs / the
measured matmul throughput, its bytes / the measured bandwidth): a fraction of 1.0 would be a phase that
runs every matmul at the speed of the matmul alone.

Then where a generation's time goes (torch's profiler over one generation of the first step's prompts; the decode
step's fused CPU kernels, grpo.policy.kernels, run outside torch's operations and are counted there), and,
beside the limits, the decoder's products at the decode batch with every layer's own weights: the limit's
products reuse one layer's weights, which stay in the CPU's caches; a decode step reads each from memory.

`--quick` times fewer repetitions (a smoke check). Print the CPU model and its flags; nothing here is a
figure for another machine. Measure alone: anything else running divides the cores.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from shared import REPO, Work, machine, norm_form, prompts, time_op  # bench/shared.py (bench/ is the script's folder)

MODEL = "smollm2-135m-instruct"
FLAGS_SHOWN = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "fma")


@dataclass
class Shapes:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    layers: int
    vocab: int

    @classmethod
    def of(cls, model_dir: str) -> "Shapes":
        c = json.loads((Path(model_dir) / "config.json").read_text())
        return cls(c["hidden_size"], c["intermediate_size"], c["num_attention_heads"],
                   c.get("num_key_value_heads", c["num_attention_heads"]), c["num_hidden_layers"], c["vocab_size"])

    def projections(self) -> list[tuple[str, int, int]]:
        """(name, in features, out features) of one decoder layer's matmuls."""
        kv = self.hidden // self.heads * self.kv_heads
        return [("q", self.hidden, self.hidden), ("k", self.hidden, kv), ("v", self.hidden, kv),
                ("o", self.hidden, self.hidden), ("gate", self.hidden, self.intermediate),
                ("up", self.hidden, self.intermediate), ("down", self.intermediate, self.hidden)]

    @property
    def body_weights(self) -> int:  # matmul weights a token goes through in the decoder layers
        return self.layers * sum(i * o for _, i, o in self.projections())

    @property
    def head_weights(self) -> int:
        return self.hidden * self.vocab


def matmul_limit(shapes: Shapes, rows: int, dtype: torch.dtype, backward: bool, repeats: int) -> float:
    """GFLOP/s of the model's products at `rows` tokens, forward (and backward): every layer's projections
    (one layer's timed, counted `layers` times) and the head."""
    from grpo.policy.head import output_logits
    from grpo.policy.packed import packed_product, packs

    flops, seconds = 0.0, 0.0
    for name, fan_in, fan_out in [*shapes.projections(), ("head", shapes.hidden, shapes.vocab)]:
        count = 1 if name == "head" else shapes.layers
        x = torch.randn(rows, fan_in, dtype=dtype)
        w = torch.randn(fan_out, fan_in, dtype=dtype)
        dy = torch.randn(rows, fan_out, dtype=dtype)
        # Each product in the form grpo computes it on this machine: generation's bf16 weights laid out for
        # oneDNN (grpo.policy.packed), the update's as stored, the head's in blocks where that is faster
        # (grpo.policy.head.blocked_product).
        if not backward and packs(w):
            products = [functools.partial(packed_product(w, None, rows), x)]
        else:
            products = [lambda: output_logits(x, w) if name == "head" else F.linear(x, w)]
        if backward:
            products += [lambda: dy @ w, lambda: dy.t() @ x]  # dX [rows, in], dW [out, in]
        for product in products:
            seconds += count * time_op(product, repeats)
            flops += count * 2.0 * rows * fan_in * fan_out
    return flops / seconds / 1e9


def streamed_decode_limit(shapes: Shapes, rows: int, dtype: torch.dtype, repeats: int) -> float:
    """GFLOP/s of a decode step's products as the step meets them: every layer's own weights, so each is
    read from memory rather than from a cache that one layer's weights, timed alone, would fit in."""
    from grpo.policy.packed import packed_product, packs

    weights = [torch.randn(fan_out, fan_in, dtype=dtype) for _ in range(shapes.layers)
               for _, fan_in, fan_out in shapes.projections()]
    inputs = {fan_in: torch.randn(rows, fan_in, dtype=dtype) for _, fan_in, _ in shapes.projections()}
    # As generation runs them (grpo.policy.packed).
    products = [(packed_product(w, None, rows) if packs(w) else functools.partial(F.linear, weight=w),
                 inputs[w.shape[1]]) for w in weights]
    seconds = time_op(lambda: [product(x) for product, x in products], repeats)
    return sum(2.0 * rows * w.numel() for w in weights) / seconds / 1e9


def bandwidth(repeats: int) -> float:
    """GB/s of a 512 MiB copy, counting the bytes read and written."""
    src = torch.ones(256 * 2**20, dtype=torch.float16)
    dst = torch.empty_like(src)
    seconds = time_op(lambda: dst.copy_(src), repeats)
    return 2 * src.numel() * src.element_size() / seconds / 1e9


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return " ".join(f for f in FLAGS_SHOWN if f in flags) or "none of " + ", ".join(FLAGS_SHOWN)


def prompt_ids(tokenizer, count: int) -> list[list[int]]:
    """The quickstart's first `count` prompts' token ids, chat-templated as grpo renders them."""
    # As grpo.tasks.prompts.encode_prompt does: the template's text, then its tokens. (transformers 5's
    # tokenize=True returns a BatchEncoding, whose len() is its 2 keys: the prompts counted as 2 tokens.)
    texts = [tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=False)
             for r in prompts(Work(), count)]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def mean_prompt_tokens(model_dir: str) -> float:
    """Of the quickstart's first 64 prompts."""
    from transformers import AutoTokenizer

    return statistics.fmean(map(len, prompt_ids(AutoTokenizer.from_pretrained(model_dir), 64)))


def quickstart_metrics(steps: int, warmup: int, dtype: str, work_dir: Path) -> list[dict]:
    run_dir = work_dir / "quickstart"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [f"model.dtype={dtype}", f"train.steps={warmup + steps}", "eval.before_training=false",
                 "eval.after_training=false",
                 "checkpoint.every_steps=0", "checkpoint.every_minutes=0", "checkpoint.save_final=false",
                 "logging.tensorboard=false"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    with open(work_dir / "quickstart.log", "w") as log:
        subprocess.run([sys.executable, "-m", "grpo", "train", "--config", "quickstart", "--run-dir", str(run_dir),
                        *overrides], check=True, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()][warmup:]


def phase_figures(lines: list[dict], shapes: Shapes, prompt_tokens: float, rows: int, dtype_bytes: int) -> dict:
    """Per step, medians: generated tokens, generation and update seconds, their FLOPs and bytes."""
    timed = [x for x in lines if "time/update_s" in x] or lines
    tokens = statistics.median(x["perf/generated_tokens"] for x in timed)
    generate_s = statistics.median(x["time/generate_s"] for x in timed)
    update_s = statistics.median(x["time/update_s"] for x in timed) if "time/update_s" in timed[0] else float("nan")
    per_sequence = tokens / rows
    context = prompt_tokens + per_sequence / 2  # mean context a completion token attends to
    attention = 4 * context * shapes.hidden * shapes.layers  # QK^T and AV, forward, per token
    forward_per_token = 2 * (shapes.body_weights + shapes.head_weights) + attention
    decode_flops = tokens * forward_per_token
    # Generation and the update run each distinct prompt once (8 per step); the prefill's head only on its last token.
    prompts_per_step = rows / 8
    prefill_flops = prompts_per_step * (prompt_tokens * (2 * shapes.body_weights + 2 * prompt_tokens * shapes.hidden
                                                         * shapes.layers) + 2 * shapes.head_weights)
    # The update computes only the rows of non-zero advantage (grpo.policy.update.rows_with_gradient): their
    # tokens, and the prompts of the groups whose rewards differ (all of a group's rows, for 0/1 rewards).
    trained = statistics.median(x.get("actor/tokens_computed", x["perf/generated_tokens"]) for x in timed)
    trained_prompts = statistics.median(prompts_per_step * (1 - x.get("groups/zero_std_frac", 0.0)) for x in timed)
    update_tokens = trained + trained_prompts * prompt_tokens
    update_flops = 3 * (update_tokens * (2 * shapes.body_weights + attention) + trained * 2 * shapes.head_weights)
    # A decode step reads every weight once for all its sequences, and each sequence's KV cache; a generation
    # takes as many steps as its longest completion (until 2026-11-28 the mean, fewer where lengths differ).
    decode_steps = statistics.median(x.get("response/length_max", per_sequence) for x in timed)
    kv_per_token = 2 * shapes.layers * shapes.hidden // shapes.heads * shapes.kv_heads * dtype_bytes
    generate_bytes = decode_steps * (shapes.body_weights + shapes.head_weights) * dtype_bytes \
        + tokens * context * kv_per_token
    return {"tokens": tokens, "generate_s": generate_s, "update_s": update_s, "decode_flops": decode_flops,
            "prefill_flops": prefill_flops, "update_flops": update_flops, "generate_bytes": generate_bytes,
            "update_tokens": update_tokens}


def load_quickstart_model(dtype: str, count: int):
    """(model, tokenizer, the first `count` prompts' token ids) as grpo loads and renders them."""
    from grpo.config import load_config
    from grpo.policy.models import load_model_and_tokenizer

    cfg = load_config("quickstart", [f"model.dtype={dtype}"])
    model, tokenizer = load_model_and_tokenizer(cfg.model, torch.device("cpu"))
    model.eval()
    return model, tokenizer, prompt_ids(tokenizer, count)


def prefill_seconds(model, tokenizer, ids: list[list[int]], repeats: int) -> tuple[float, int]:
    """(median seconds, rows) of the quickstart's prefill timed alone: the model over the prompts
    left-padded to the longest, into a KV cache, keeping the last logits."""
    from grpo.policy.cache_keyword import cache_argument
    from grpo.rollout.engines.kv_cache import preallocated_cache

    count = len(ids)
    length = max(map(len, ids))
    input_ids = torch.full((count, length), tokenizer.pad_token_id)  # [8, P]
    attention_mask = torch.zeros(count, length, dtype=torch.long)  # [8, P]
    for row, prompt in enumerate(ids):
        input_ids[row, length - len(prompt):], attention_mask[row, length - len(prompt):] = torch.tensor(prompt), 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

    def prefill() -> None:
        with torch.no_grad():
            model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                  **cache_argument(model, preallocated_cache(length + 1)), use_cache=True, logits_to_keep=1)

    return time_op(prefill, repeats), count * length


def generation_profile(model, tokenizer, ids: list[list[int]], samples: int, max_new_tokens: int,
                       temperature: float) -> tuple[list[str], str]:
    """Where one generation of the quickstart's first step goes (its prompts, `samples` each, the engine as
    the quickstart builds it), by torch's profiler after one unprofiled generation: (rows of a table, the
    form of its decode steps in words)."""
    from torch.profiler import profile

    from grpo.policy.head import VOCAB_BLOCK
    from grpo.rollout.engines import SamplingParams
    from grpo.rollout.engines.embedded import EmbeddedEngine

    engine = EmbeddedEngine(model, tokenizer, batch_size=len(ids) * samples)
    batch = [p for p in ids for _ in range(samples)]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
    seeds = list(range(len(batch)))
    started = time.perf_counter()
    engine.generate(batch, params, seeds)
    unprofiled = time.perf_counter() - started
    hidden, vocab = model.config.hidden_size, model.config.vocab_size
    with profile(record_shapes=True) as prof:
        started = time.perf_counter()
        completions = engine.generate(batch, params, seeds)
        profiled = time.perf_counter() - started
    seconds: dict[str, float] = {}
    flops: dict[str, float] = {}
    for event in prof.key_averages(group_by_input_shape=True):
        shapes = [s for s in event.input_shapes if isinstance(s, list)]
        linear = None  # (rows, fan in, fan out) of a product
        if event.key == "aten::mm" and len(shapes) >= 2 and len(shapes[0]) == 2 and len(shapes[1]) == 2:
            linear = shapes[0][0], shapes[0][1], shapes[1][1]
        elif event.key == "mkldnn::_linear_pointwise" and len(shapes) >= 2:  # x [..., in], laid-out weight [out, in]
            linear = math.prod(shapes[0][:-1]), shapes[0][-1], shapes[1][0]
        if linear:
            n, k, m = linear
            # The head as one product [N, H] x [H, V], or in vocabulary blocks [1024, H] x [H, N].
            head = m == vocab or (n == VOCAB_BLOCK and k == hidden and m <= len(batch))
            kind = "products: head" if head else ("products: prefill" if n > len(batch) else "products: decode steps")
            flops[kind] = flops.get(kind, 0.0) + 2.0 * n * k * m * event.count
        elif event.key in ("aten::bmm", "aten::_softmax"):
            kind = "attention (its products, softmax)"
        elif event.key in ("aten::index", "aten::index_put_", "aten::_index_put_impl_"):
            kind = "KV cache rows (repeat, drop)"
        elif shapes and shapes[0] and shapes[0][-1] == vocab:
            kind = "sampler (whole-vocabulary ops)"
        elif event.key == "aten::copy_":
            kind = "copies"
        else:
            kind = "other operations (norms, rotary, activations, adds, views)"
        seconds[kind] = seconds.get(kind, 0.0) + event.self_cpu_time_total / 1e6
    tokens = sum(len(c.token_ids) for c in completions)
    rows = [f"Where a generation goes: the quickstart's first {len(ids)} prompts x {samples} samples, "
            f"{tokens} tokens, temperature {temperature}; {unprofiled:.2f} s unprofiled; torch's profiler:", "",
            "| part | seconds | share | GFLOP/s |", "|---|---:|---:|---:|"]
    total = sum(seconds.values())
    for kind, value in sorted(seconds.items(), key=lambda kv: -kv[1]):
        rate = f"{flops[kind] / value / 1e9:,.0f}" if kind in flops else ""
        rows.append(f"| {kind} | {value:.2f} | {value / total:.0%} | {rate} |")
    rows.append(f"| all operations (profiled) | {total:.2f} | 100% | |")
    # Not an operation of torch's: Python between them, and the fused CPU kernels where the step runs them.
    rows.append(f"| outside torch's operations (Python; fused CPU kernels) | {max(profiled - total, 0.0):.2f} | | |")
    return rows, engine.decode_form


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed quickstart steps")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before them")
    parser.add_argument("--metrics", help="read this metrics.jsonl (all its lines) instead of running the quickstart")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float32"),
                        help="the quickstart's model.dtype, and the precision whose limits are measured; a bf16 "
                             "product on a CPU without bf16 instructions is ~100x slower than fp32's: measuring "
                             "it there takes an hour")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions: a smoke check, not a figure")
    parser.add_argument("--work-dir", default=str(REPO / "bench_runs" / "roofline"))
    parser.add_argument("--out", help="append a dated section with the machine and the tables to this file")
    args = parser.parse_args()
    from grpo.config import load_config
    from grpo.policy.models import resolve_model_source
    from grpo.precision import concrete_dtype

    cfg = load_config("quickstart", [])
    dtype_name = concrete_dtype(args.dtype, "cpu")
    dtype = getattr(torch, dtype_name)
    shapes = Shapes.of(resolve_model_source(MODEL))
    rows = cfg.rollout.problems_per_step * cfg.rollout.samples_per_problem  # sequences decoded together
    repeats = 3 if args.quick else 20
    started = datetime.datetime.now(datetime.timezone.utc)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)

    if args.metrics:
        lines = [json.loads(x) for x in Path(args.metrics).read_text().splitlines()]
    else:
        print("the quickstart's steps ...", flush=True)
        lines = quickstart_metrics(args.steps, args.warmup, dtype_name, work_dir)
    prompt_tokens = mean_prompt_tokens(resolve_model_source(MODEL))
    figures = phase_figures(lines, shapes, prompt_tokens, rows, dtype_bytes=dtype.itemsize)
    update_rows = int(cfg.algo.micro_batch_size * (prompt_tokens / cfg.rollout.samples_per_problem
                                                   + figures["tokens"] / rows))

    print("the machine's limits at the model's shapes ...", flush=True)
    model, tokenizer, prompt_ids = load_quickstart_model(dtype_name, cfg.rollout.problems_per_step)
    prefill_s, prefill_rows = prefill_seconds(model, tokenizer, prompt_ids, repeats)
    limits = {f"decode {dtype_name}": matmul_limit(shapes, rows, dtype, backward=False, repeats=repeats),
              f"prefill {dtype_name}": matmul_limit(shapes, prefill_rows, dtype, backward=False, repeats=repeats),
              f"update {dtype_name}": matmul_limit(shapes, update_rows, dtype, backward=True, repeats=repeats)}
    limit_rows = {"decode": rows, "prefill": prefill_rows, "update": update_rows}
    streamed = streamed_decode_limit(shapes, rows, dtype, max(3, repeats // 4))
    stream = bandwidth(repeats)

    decode_limit_s = max(figures["decode_flops"] / (limits[f"decode {dtype_name}"] * 1e9),
                         figures["generate_bytes"] / (stream * 1e9))
    prefill_limit_s = figures["prefill_flops"] / (limits[f"prefill {dtype_name}"] * 1e9)
    generate_limit_s = decode_limit_s + prefill_limit_s
    generate_flops = figures["decode_flops"] + figures["prefill_flops"]
    decode_s = figures["generate_s"] - prefill_s
    update_limit_s = figures["update_flops"] / (limits[f"update {dtype_name}"] * 1e9)
    header = (f"Roofline of the quickstart, {started:%Y-%m-%d %H:%M} UTC, {machine()}; flags: {cpu_flags()}; "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads"
              + ("; --quick (not a figure)" if args.quick else ""))
    out = [
        "| limit at the model's shapes | value |", "|---|---:|",
        *(f"| matmul, {k} ({limit_rows[k.split()[0]]} rows) | {v:,.0f} GFLOP/s |" for k, v in limits.items()),
        f"| (not a limit: the decoder's products at {rows} rows with every layer's own weights, as a decode step "
        f"reads them) | {streamed:,.0f} GFLOP/s |",
        f"| memory bandwidth (512 MiB copy) | {stream:,.1f} GB/s |",
        "",
        f"| phase ({dtype_name} weights, model.dtype={args.dtype}) | per step | tokens/s | achieved | limit | fraction of the limit |",
        "|---|---:|---:|---:|---:|---:|",
        f"| generation ({figures['tokens']:.0f} tokens, and {prefill_rows} prompt tokens' prefill) "
        f"| {figures['generate_s']:.2f} s | {figures['tokens'] / figures['generate_s']:.0f} "
        f"| {generate_flops / figures['generate_s'] / 1e9:,.0f} GFLOP/s "
        f"| {generate_limit_s:.2f} s | {generate_limit_s / figures['generate_s']:.0%} |",
        f"| - of which decoding (less the prefill, timed alone: {prefill_s:.2f} s) | {decode_s:.2f} s "
        f"| {figures['tokens'] / decode_s:.0f} | {figures['decode_flops'] / decode_s / 1e9:,.0f} GFLOP/s "
        f"| {decode_limit_s:.2f} s | {decode_limit_s / decode_s:.0%} |",
        f"| update ({figures['update_tokens']:.0f} tokens through the body) | {figures['update_s']:.2f} s "
        f"| {figures['tokens'] / figures['update_s']:.0f} "
        f"| {figures['update_flops'] / figures['update_s'] / 1e9:,.0f} GFLOP/s "
        f"| {update_limit_s:.2f} s | {update_limit_s / figures['update_s']:.0%} |"
        if not math.isnan(figures["update_s"]) else
        f"| update: none ran (no step had a group with rewards that differ) | | | | {update_limit_s:.2f} s | |",
    ]
    print("where a generation's time goes ...", flush=True)
    profile_rows, form = generation_profile(model, tokenizer, prompt_ids, cfg.rollout.samples_per_problem,
                                            cfg.rollout.max_new_tokens, cfg.rollout.temperature)
    out += ["", f"Decode steps (the same code as the quickstart's): {form}; the update's {norm_form(model)}.", "",
            *profile_rows]
    print("\n" + header + "\n\n" + "\n".join(out))
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join([f"## Roofline: {started:%Y-%m-%d %H:%M} UTC", "", header, "", *out, "",
                               f"`python bench/roofline.py --steps {args.steps} --warmup {args.warmup} --dtype {args.dtype}`", ""]) + "\n")
        print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
