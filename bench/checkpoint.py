"""A checkpoint's save through the page cache and past it (grpo.rundir.direct), in alternating rounds.

    python bench/checkpoint.py [--model smollm2-135m-instruct] [--rounds 4] [--dir DIR]

The quickstart's checkpoint: its model as `dtype: auto` loads it (bf16 on a CPU that has it: model/, ~270
MB) and MasterWeightAdamW's fp32 weights and AdamW moments after one step on a small batch (policy/, ~1.6
GB), saved by CheckpointStore.save (the manifest's CRC32s, fsync, rename) into a new directory, the
previous one deleted (checkpoint.keep_last: 1). "page cache": torch.distributed.checkpoint's own files, the
manifest reading every file back, as before grpo.rundir.direct; "past it": the policy state written with
O_DIRECT, its CRC32s taken as written. Rounds alternate A B B A ... in one process (this machine's speed
drifts); prints each save's seconds and CPU seconds (this process's user + system, so not the kernel's
writeback threads), the medians and their ratios.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from grpo.config import ActorConfig, CheckpointConfig, ModelConfig
from grpo.policy import state
from grpo.policy.models import load_model_and_tokenizer
from grpo.policy.optim import MasterWeightAdamW
from grpo.rundir.checkpoints import CheckpointStore, capture_rng

from shared import machine  # bench/shared.py (bench/ is the script's folder)

WAYS = {"page cache": False, "past it": True}  # -> state.save's `direct`


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--rounds", type=int, default=4, help="saves each way, after one untimed warm-up each")
    parser.add_argument("--dir", type=Path, default=None, help="where to save (default: a new folder in $TMPDIR)")
    args = parser.parse_args()

    device = torch.device("cpu")
    model, tok = load_model_and_tokenizer(ModelConfig(name=args.model, dtype=args.dtype, device="cpu"), device)
    optimizer = MasterWeightAdamW(model, ActorConfig())
    ids = torch.randint(0, model.config.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0))
    model(ids).logits.float().logsumexp(-1).mean().backward()  # [4, 32, V] -> a scalar
    optimizer.step()  # AdamW's moments exist, as in every checkpoint after step 0
    optimizer.zero_grad()

    root = Path(tempfile.mkdtemp(prefix="grpo-bench-checkpoint-", dir=args.dir))
    store = CheckpointStore(root, CheckpointConfig(keep_last=1))
    step = 0

    def save(direct: bool) -> tuple[float, float, dict[str, int]]:
        nonlocal step
        step += 1

        def write(directory: Path):
            model.save_pretrained(directory / "model")
            tok.save_pretrained(directory / "model")
            return state.save(model, optimizer, directory / "policy", sharded=False, direct=direct)

        wall, cpu = time.perf_counter(), time.process_time()
        info = store.save(step, write, {"step": step, "rng": capture_rng()}, healthy=True, score=None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        sizes: dict[str, int] = {}
        for name, entry in info.meta["files"].items():
            part = name.split("/")[0] if "/" in name else name
            sizes[part] = sizes.get(part, 0) + entry["size"]
        return wall, cpu, sizes

    try:
        names = list(WAYS)
        sizes = {}
        for name in names:
            sizes = save(WAYS[name])[2]  # warm-up
        print(f"{machine()}, {args.model} {next(model.parameters()).dtype}")
        print(f"checkpoint in {root}: " + ", ".join(f"{part} {size / 1e6:.1f} MB" for part, size in sizes.items())
              + f"; {args.rounds} rounds each way, alternating")
        seconds: dict[str, list[float]] = {name: [] for name in names}
        cpus: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                wall, cpu, _ = save(WAYS[name])
                seconds[name].append(wall)
                cpus[name].append(cpu)
                print(f"  round {round_ + 1}  {name:<11}{wall:6.2f} s   CPU {cpu:6.2f} s", flush=True)
        print("median:")
        for name in names:
            print(f"  {name:<11}{statistics.median(seconds[name]):6.2f} s   CPU {statistics.median(cpus[name]):6.2f} s")
        cached, direct = names
        print(f"page cache / past it: {statistics.median(seconds[cached]) / statistics.median(seconds[direct]):.2f}x "
              f"the time, {statistics.median(cpus[cached]) / statistics.median(cpus[direct]):.2f}x the CPU")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
