"""Does a fresh process's first exp/log/sqrt/cos/sin differ from every later one on this CPU?

oneMKL 2024.2 picks a VML function's kernel at its first call; several threads making that first call at
once can run a low-accuracy kernel for one chunk (pytorch/pytorch#188792). grpo settles the choice from
one thread at model load (grpo.policy.vml). This spawns waves of fresh processes, each computing the ops
once on a 1M-element tensor with 2 intra-op threads, without and with that settling, and counts the
first calls whose bits differ from a settled process's.

    python bench/vml_race.py [--waves 20] [--per-wave 4]

Prints the CPU, the counts for each side, and exits 0 (a measurement, not a check).
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import subprocess
import sys
from pathlib import Path

OPS = ("exp", "log", "sqrt", "cos", "sin", "tanh", "expm1", "log1p")
CHILD = """
import hashlib, sys, torch
torch.set_num_threads(2)
if sys.argv[1] == "settled":
    from grpo.policy.vml import settle_dispatch
    settle_dispatch()
x = torch.rand(1 << 20, generator=torch.Generator().manual_seed(0)) + 0.25
for op in sys.argv[2:]:
    print(op, hashlib.sha1(getattr(torch, op)(x).numpy().tobytes()).hexdigest())
"""


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def wave(mode: str, count: int) -> list[dict[str, str]]:
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, mode, *OPS], stdout=subprocess.PIPE, text=True)
             for _ in range(count)]
    return [dict(line.split() for line in proc.communicate()[0].splitlines()) for proc in procs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waves", type=int, default=20)
    parser.add_argument("--per-wave", type=int, default=4)
    args = parser.parse_args()
    import torch

    from grpo.policy.vml import settle_dispatch

    settle_dispatch()
    torch.set_num_threads(2)
    x = torch.rand(1 << 20, generator=torch.Generator().manual_seed(0)) + 0.25
    reference = {op: hashlib.sha1(getattr(torch, op)(x).numpy().tobytes()).hexdigest() for op in OPS}
    print(f"CPU: {cpu_model()}; torch {torch.__version__}; ops {', '.join(OPS)}")
    for mode in ("unsettled", "settled"):
        calls = differing = 0
        for _ in range(args.waves):
            for result in wave(mode, args.per_wave):
                calls += len(OPS)
                differing += sum(result.get(op) != reference[op] for op in OPS)
        print(f"{mode:>9}: {differing} of {calls} first calls differ from a settled process's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
