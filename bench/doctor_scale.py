"""How `grpo doctor` and `grpo watch` scale with a log's size: generated verl, TRL and AReaL console logs of
tens to hundreds of MiB, read by the grpo under --src as child processes.

    python bench/doctor_scale.py [--src PATH] [--sizes-mb 50,200,500] [--watch-sizes-mb 50,200]
                                 [--cases doctor,watch,line,nul] [--timeout 300] [--tmp /tmp] [--keep]

--src is the `src` folder of the checkout to measure (default: this checkout's); the children run with
PYTHONPATH set to it alone, so one copy of this script measures old code and new code alike (the header
says which files the children imported). Sizes are MiB. Cases:

  doctor  `python -m grpo doctor LOG --json` on a log of each size and format (--formats): wall time, CPU
          time and peak RSS of the child (wait4's rusage); the log's reward dies in its last ~5% of steps,
          so the doctor's answer is checked against the step it died at.
  watch   `python -m grpo watch LOG --interval I` on a verl log (--watch-formats) that a writer process
          grows: the first look (wall and CPU seconds from the watch's start to its first verdict), the
          watch's CPU seconds per poll while a step arrives at every poll, and the detection latency: the
          writer appends 5 steps whose reward is exactly 0 with every group identical, all in one write,
          and the latency is from that write to the watch printing its DIAGNOSIS (it takes 3 such steps).
  line    the doctor on a verl log holding one 10 MiB line (--line-mb): a config dump with spaces, and a
          run of paths without a space.
  nul     the doctor on a verl log that begins with a run of NUL bytes (--nul-mb), as a `> train.log`
          writer leaves it after logrotate's copytruncate: are the steps after it still read?

Every measurement is bounded by --timeout (the child is killed, and the table says "> N s"); every child
is killed when this script exits. Prints one table with the CPU, the date and the load average (the
1-minute load at each measurement's start in its own column); exit status 0 (a measurement, not a check).
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import math
import os
import pprint
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20
BAD_STEPS = 5  # dead steps the watch's writer appends in one write (the watch needs 3 in a row)
CHILDREN: set[int] = set()  # process groups to kill on exit


# ---------------------------------------------------------------------------------------------- log formats

@dataclass
class Metrics:
    reward: float
    reward_std: float
    zero_variance: float
    loss: float
    grad_norm: float
    entropy: float
    length: float
    clip: float
    step_s: float
    memory: float


def healthy(rng: random.Random) -> Metrics:
    return Metrics(reward=rng.uniform(0.36, 0.48), reward_std=rng.uniform(0.30, 0.42),
                   zero_variance=rng.uniform(0.1, 0.3), loss=rng.uniform(-0.02, 0.02),
                   grad_norm=rng.uniform(0.30, 0.55), entropy=rng.uniform(0.57, 0.64), length=rng.uniform(390, 430),
                   clip=rng.uniform(0.0, 0.04), step_s=rng.uniform(55, 60), memory=61.3 + rng.random() * 0.2)


def dead(rng: random.Random) -> Metrics:
    """The reward source died: every completion scores exactly 0, so every group is identical."""
    m = healthy(rng)
    m.reward = m.reward_std = m.loss = m.grad_norm = 0.0
    m.zero_variance = 1.0
    return m


WORDS = ("the", "of", "and", "to", "a", "in", "is", "that", "we", "so", "total", "each", "number", "then", "first",
         "answer", "let", "step", "think", "apples", "costs", "dollars", "she", "he", "has", "more", "than", "times",
         "left", "after", "buys", "sells", "per", "week", "therefore", "compute", "remaining", "boxes", "hours")


def sentence(rng: random.Random, words: int) -> str:
    out = []
    for i in range(words):
        out.append(str(rng.randint(2, 999)) if rng.random() < 0.08 else rng.choice(WORDS))
        if rng.random() < 0.06:
            out[-1] += rng.choice((".", ",", " =", " *", " +"))
    return " ".join(out)


STAMP = b"@@T@@"  # placeholder in noise lines for the step's clock, substituted per step


class Format:
    name = ""
    file_name = ""

    def preamble(self, rng: random.Random) -> str:
        return ""

    def noise_pool(self, rng: random.Random) -> list[bytes]:
        """Lines (or multi-line blocks) that other processes print between steps."""
        raise NotImplementedError

    def stamp(self, clock: datetime.datetime) -> bytes:
        raise NotImplementedError

    def step(self, n: int, m: Metrics, clock: datetime.datetime, total: int) -> str:
        raise NotImplementedError

    def save(self, n: int, clock: datetime.datetime) -> str:
        return ""


class Verl(Format):
    """verl's TaskRunner step lines, with Ray workers', vLLM's and torch's lines in between."""

    name, file_name = "verl", "train.log"

    def preamble(self, rng):
        config = {"data": {"train_files": "/data/gsm8k/train.parquet", "val_files": "/data/gsm8k/test.parquet",
                           "train_batch_size": 1024, "max_prompt_length": 512, "max_response_length": 1024},
                  "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-7B-Instruct", "use_remove_padding": True},
                                        "actor": {"optim": {"lr": 1e-06}, "ppo_mini_batch_size": 256,
                                                  "use_kl_loss": True, "kl_loss_coef": 0.001},
                                        "rollout": {"name": "vllm", "n": 5, "gpu_memory_utilization": 0.6,
                                                    "tensor_model_parallel_size": 2}},
                  "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
                  "trainer": {"project_name": "verl_grpo_example_gsm8k", "experiment_name": "qwen2_7b_function_rm",
                              "n_gpus_per_node": 8, "nnodes": 1, "save_freq": 50, "test_freq": 10,
                              "total_epochs": 15, "logger": ["console", "wandb"]}}
        lines = ["2025-11-14 09:00:01,112\tINFO worker.py:1832 -- Started a local Ray instance. View the dashboard "
                 "at 127.0.0.1:8265"]
        lines += ["(TaskRunner pid=2231) " + line for line in pprint.pformat(config, width=100).splitlines()]
        lines += ["(TaskRunner pid=2231) Using dataset class: RLHFDataset",
                  "(TaskRunner pid=2231) dataset len: 7473", "(TaskRunner pid=2231) filter dataset len: 7473",
                  "(TaskRunner pid=2231) Size of train dataloader: 7, Size of val dataloader: 1",
                  f"(TaskRunner pid=2231) Total training steps: {TOTAL_STEPS}",
                  "(TaskRunner pid=2231) Training from scratch"]
        return "\n".join(lines) + "\n"

    def noise_pool(self, rng):
        pool = []
        for i in range(60):
            pool.append(f"(WorkerDict pid={3321 + i % 8}) INFO @@T@@ [metrics.py:455] Avg prompt throughput: "
                        f"{rng.uniform(800, 4000):.1f} tokens/s, Avg generation throughput: "
                        f"{rng.uniform(2000, 9000):.1f} tokens/s, Running: {rng.randint(60, 256)} reqs, Swapped: 0 "
                        f"reqs, Pending: {rng.randint(0, 40)} reqs, GPU KV cache usage: {rng.uniform(10, 95):.1f}%, "
                        "CPU KV cache usage: 0.0%.")
            pool.append(f"(WorkerDict pid={3321 + i % 8}) Processed prompts: {rng.randint(1, 99):3d}%|"
                        f"{'█' * rng.randint(1, 9):<10}| {rng.randint(10, 1000)}/1024 [00:{rng.randint(10, 59):02d}"
                        f"<00:{rng.randint(1, 59):02d}, {rng.uniform(10, 60):.2f}it/s, est. speed input: "
                        f"{rng.uniform(2000, 6000):.2f} toks/s, output: {rng.uniform(8000, 20000):.2f} toks/s]")
        for i in range(20):
            pool.append(f"(WorkerDict pid={3321 + i % 8}) INFO @@T@@ [block_pool.py:321] Successfully reset prefix "
                        "cache")
            pool.append(f"(WorkerDict pid={3321 + i % 8}) INFO @@T@@ [executor_base.py:{rng.randint(100, 300)}] "
                        f"Memory profiling takes {rng.uniform(2, 9):.2f} seconds")
            pool.append(f"(WorkerDict pid={3321 + i % 8}) /usr/local/lib/python3.10/dist-packages/torch/distributed/"
                        "fsdp/_state_dict_utils.py:773: UserWarning: FSDP.state_dict_type() and "
                        "FSDP.set_state_dict_type() are being deprecated. Please use APIs, get_state_dict() and "
                        "set_state_dict(), which can support different parallelisms, FSDP1, FSDP2, DDP.")
            pool.append(f"(WorkerDict pid={3321 + i % 8}) [rank{i % 8}]:[W1114 09:01:{i + 10}.000000000 "
                        "ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform barrier as "
                        "devices used by this process are currently unknown.")
            pool.append(f"(raylet) [2025-11-14 @@T@@,{rng.randint(100, 999)} I {rng.randint(1000, 9000)} "
                        f"{rng.randint(1000, 9000)}] (raylet) worker_pool.cc:{rng.randint(500, 900)}: Started "
                        f"worker process with pid {rng.randint(10000, 60000)}")
        for i in range(40):  # a validation sample as verl prints it (Ray prefixes each of its lines)
            sample = ("[prompt] system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\nuser\n"
                      + sentence(rng, rng.randint(30, 90)) + " Let's think step by step and output the final answer "
                      "after \"####\".\nassistant\n[response] " + "\n".join(
                          sentence(rng, rng.randint(10, 40)) for _ in range(rng.randint(3, 20)))
                      + f"\n#### {rng.randint(1, 999)}\n[ground_truth] {rng.randint(1, 999)}\n[score] "
                      f"{rng.choice((0.0, 1.0))}")
            pool.append("\n".join("(TaskRunner pid=2231) " + line for line in sample.splitlines()))
        for i in range(8):  # a worker's config, printed on one long line
            pool.append(f"(WorkerDict pid={3321 + i}) Model config after override: Qwen2Config {{" + ", ".join(
                f"'{rng.choice(WORDS)}_{k}': {rng.random():.6f}" for k in range(rng.randint(150, 600))) + "}")
        return [(line + "\n").encode() for line in pool]

    def stamp(self, clock):
        return clock.strftime("%m-%d %H:%M:%S").encode()

    def step(self, n, m, clock, total):
        pairs = {"global_seqlen/mean": 80000 + m.length * 15, "actor/entropy": m.entropy, "actor/pg_loss": m.loss,
                 "actor/kl_loss": 0.0012 if m.grad_norm else 0.0, "actor/pg_clipfrac": 0.004 if m.grad_norm else 0.0,
                 "actor/grad_norm": m.grad_norm, "actor/lr": 1e-06, "critic/score/mean": m.reward,
                 "critic/score/std": m.reward_std, "critic/score/max": 1.0 if m.reward else 0.0,
                 "critic/score/min": 0.0, "critic/rewards/mean": m.reward, "critic/advantages/mean": 0.0,
                 "response_length/mean": m.length, "response_length/max": 1024.0, "response_length/clip_ratio": m.clip,
                 "prompt_length/mean": 120.0, "timing_s/gen": m.step_s * 0.55, "timing_s/reward": 0.7,
                 "timing_s/old_log_prob": 4.3, "timing_s/ref": 4.6, "timing_s/adv": 0.05,
                 "timing_s/update_actor": m.step_s * 0.26, "timing_s/step": m.step_s,
                 "perf/max_memory_allocated_gb": m.memory, "perf/throughput": 1400.0 + m.length}
        text = " - ".join(f"{k}:np.float64({v!r})" for k, v in pairs.items())
        text += f" - training/global_step:{n} - training/epoch:{n // 7}"
        if n % 10 == 0:
            text += f" - val-core/openai/gsm8k/reward/mean@1:np.float64({max(0.0, m.reward - 0.03)!r})"
        bar = "█" * (n * 10 // total)
        return (f"(TaskRunner pid=2231) step:{n} - {text}\n(TaskRunner pid=2231) Training Progress: "
                f"{100 * n // total:3d}%|{bar:<10}| {n}/{total} [{n // 60:02d}:{n % 60:02d}<99:00:00, "
                f"{m.step_s:.2f}s/it]\n")

    def save(self, n, clock):
        return (f"(TaskRunner pid=2231) local_global_step_folder: checkpoints/verl_grpo_example_gsm8k/"
                f"qwen2_7b_function_rm/global_step_{n}\n(WorkerDict pid=3321) [rank-0]: Saved model to /workspace/"
                f"checkpoints/verl_grpo_example_gsm8k/qwen2_7b_function_rm/global_step_{n}/actor/"
                "model_world_size_8_rank_0.pt\n")


class TrlLog(Format):
    """TRL's console log: the training bar (carriage returns), the logged dict, vLLM's and transformers'
    lines, and the rich table of completions TRL prints with log_completions."""

    name, file_name = "trl", "train.log"

    def preamble(self, rng):
        return ("\rLoading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.21it/s]\n"
                "INFO 11-14 09:00:31 [__init__.py:239] Automatically detected platform cuda.\n"
                "\r  0%|          | 0/100000 [00:00<?, ?it/s]")

    def noise_pool(self, rng):
        pool = []
        for i in range(60):
            pool.append(f"INFO @@T@@ [metrics.py:455] Avg prompt throughput: {rng.uniform(800, 4000):.1f} tokens/s, "
                        f"Avg generation throughput: {rng.uniform(2000, 9000):.1f} tokens/s, Running: "
                        f"{rng.randint(1, 64)} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: "
                        f"{rng.uniform(1, 60):.1f}%, CPU KV cache usage: 0.0%.")
            pool.append("Processed prompts: 100%|██████████| 64/64 "
                        f"[00:0{rng.randint(1, 9)}<00:00, "
                        f"{rng.uniform(5, 40):.2f}it/s, est. speed input: {rng.uniform(1000, 5000):.2f} toks/s, "
                        f"output: {rng.uniform(3000, 9000):.2f} toks/s]")
        for i in range(15):
            pool.append("/usr/local/lib/python3.11/site-packages/torch/utils/checkpoint.py:86: UserWarning: None of "
                        "the inputs have requires_grad=True. Gradients will be None")
            pool.append("`generation_config` default values have been modified to match model-specific defaults: "
                        "{'top_k': 20, 'top_p': 0.8}. If this is not desired, please set these values explicitly.")
        for i in range(40):  # log_completions: a rich table of prompts, completions, rewards
            width = (40, 70, 17, 11)
            rows = ["┏" + "┳".join("━" * w for w in width) + "┓",
                    "┃" + "┃".join(f" {h:<{w - 1}}" for h, w in zip(("Prompt", "Completion", "accuracy_reward",
                                                                        "Advantage"), width)) + "┃",
                    "┡" + "╇".join("━" * w for w in width) + "┩"]
            for _ in range(rng.randint(2, 6)):
                prompt, completion = sentence(rng, rng.randint(20, 60)), sentence(rng, rng.randint(60, 250))
                reward = rng.choice((0.0, 1.0))
                chunks = max(math.ceil(len(prompt) / 38), math.ceil(len(completion) / 68))
                for c in range(chunks):
                    cells = (prompt[c * 38:(c + 1) * 38], completion[c * 68:(c + 1) * 68],
                             f"{reward:.2f}" if c == 0 else "", f"{reward - 0.4:.2f}" if c == 0 else "")
                    rows.append("│" + "│".join(f" {t:<{w - 1}}" for t, w in zip(cells, width)) + "│")
            rows.append("└" + "┴".join("─" * w for w in width) + "┘")
            pool.append("\n".join(rows))
        return [(line + "\n").encode() for line in pool]

    def stamp(self, clock):
        return clock.strftime("%m-%d %H:%M:%S").encode()

    def step(self, n, m, clock, total):
        entry = {"loss": m.loss, "grad_norm": m.grad_norm, "learning_rate": 1e-06 * (1 - n / total),
                 "num_tokens": 2048.0 * n, "completions/mean_length": m.length, "completions/min_length": 40.0,
                 "completions/max_length": 1024.0, "completions/clipped_ratio": m.clip,
                 "completions/mean_terminated_length": m.length - 20, "rewards/accuracy_reward/mean": m.reward,
                 "rewards/accuracy_reward/std": m.reward_std, "reward": m.reward, "reward_std": m.reward_std,
                 "frac_reward_zero_std": m.zero_variance, "kl": 0.0011, "entropy": m.entropy,
                 "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0, "step_time": m.step_s, "epoch": n / total}
        shown = {k: f"{v:.4g}" for k, v in entry.items()}
        bar = "█" * (n * 10 // total)
        return (f"\r{100 * n // total:3d}%|{bar:<10}| {n}/{total} [{n // 60:02d}:{n % 60:02d}<99:00:00, "
                f"{m.step_s:.2f}s/it]\r{' ' * 60}\r{shown}\n")

    def save(self, n, clock):
        return "\rWriting model shards: 100%|██████████| 4/4 [00:09<00:00,  2.31s/it]\n"


class Areal(Format):
    """AReaL's trainer.log: the StatsLogger's done line and fancy_grid table per step, with the rollout
    workflow's and the engine's lines in between."""

    name, file_name = "areal", "trainer.log"
    KEYS = ("task_reward/avg", "task_reward/max", "task_reward/min", "task_reward/std", "actor_loss/avg",
            "actor_loss/max", "actor_loss/min", "entropy/avg", "grad_norm", "importance_weight/avg",
            "clip_ratio/avg", "no_eos_ratios/avg", "seq_len/avg", "seq_len/max", "prompt_len/avg",
            "update_successful", "approx_kl/avg", "behave_imp_weight/avg", "lr", "n_seqs", "n_tokens",
            "n_valid_tokens", "correct_ratio/avg", "correct_n_seqs")

    def preamble(self, rng):
        return ("20251112-04:30:00.000 Launcher INFO: Launching sglang server: python3 -m "
                "areal.launcher.sglang_server --port 23239\n20251112-04:30:41.512 RemoteSGLangEngine INFO: Get "
                "server addresses from name_resolve: ['172.21.0.2:23239']\n")

    def noise_pool(self, rng):
        pool = []
        for i in range(80):
            pool.append(f"@@T@@ WorkflowExecutor INFO: Submit rollout rid {rng.randint(1000, 99999)}. Submit: "
                        f"{rng.randint(1000, 90000)}, running: {rng.randint(1, 256)}, accepted: "
                        f"{rng.randint(1000, 90000)}.")
            pool.append(f"@@T@@ WorkflowExecutor INFO: Finish rollout {rng.randint(1000, 99999)}. Submit: "
                        f"{rng.randint(1000, 90000)}, running: {rng.randint(1, 256)}, accepted: "
                        f"{rng.randint(1000, 90000)}.")
        for i in range(20):
            pool.append(f"@@T@@ FSDPEngine INFO: Memory-Usage after ppo update: memory allocated (GB): "
                        f"{64 + rng.random():.2f}, memory reserved (GB): 133.{rng.randint(30, 40)}, device memory "
                        f"used/total (GB): 133.{rng.randint(30, 40)}/139.80")
            pool.append("@@T@@ root WARNING: `torch_dtype` is deprecated! Use `dtype` instead!")
            pool.append(f"@@T@@ RemoteSGLangEngine INFO: Loading weights done in {rng.uniform(1, 4):.2f}s. "
                        f"Respond time: {rng.uniform(0.1, 0.9):.2f}s")
        for i in range(40):  # a dumped trajectory
            pool.append(f"@@T@@ RLVRWorkflow INFO: prompt: {sentence(rng, rng.randint(20, 60))} | completion: "
                        + sentence(rng, rng.randint(80, 400)) + f" | reward: {rng.choice((0.0, 1.0))}")
        return [(line + "\n").encode() for line in pool]

    def stamp(self, clock):
        return (clock.strftime("%Y%m%d-%H:%M:%S.") + f"{clock.microsecond // 1000:03d}").encode()

    def step(self, n, m, clock, total):
        stamp = self.stamp(clock).decode()
        values = {"task_reward/avg": m.reward, "task_reward/max": 1.0 if m.reward else 0.0, "task_reward/min": 0.0,
                  "task_reward/std": m.reward_std, "actor_loss/avg": m.loss, "actor_loss/max": abs(m.loss) * 3,
                  "actor_loss/min": -abs(m.loss) * 3, "entropy/avg": m.entropy, "grad_norm": m.grad_norm,
                  "importance_weight/avg": 1.0, "clip_ratio/avg": 0.001, "no_eos_ratios/avg": m.clip,
                  "seq_len/avg": m.length, "seq_len/max": 1024.0, "prompt_len/avg": 120.0, "update_successful": 1.0,
                  "approx_kl/avg": 0.0008, "behave_imp_weight/avg": 1.0, "lr": 1e-06, "n_seqs": 512.0,
                  "n_tokens": 512 * (m.length + 120), "n_valid_tokens": 512 * m.length,
                  "correct_ratio/avg": m.reward, "correct_n_seqs": 512 * m.reward}
        items = [(f"grpo_actor/{k}", f"{v:.4e}") for k, v in values.items()]
        items += [("timeperf/rollout", f"{m.step_s * 0.6:.4e}"), ("timeperf/train_step", f"{m.step_s * 0.3:.4e}"),
                  ("timeperf/update_weights", f"{2.5:.4e}"), ("rollout/reward", f"{m.reward:.4e}")]
        rows = (len(items) + 3) // 4
        grid = [[c for j in range(4) if i + j * rows < len(items) for c in items[i + j * rows]] for i in range(rows)]
        widths = [max(len(r[c]) for r in grid if c < len(r)) for c in range(8)]
        out = ["╒" + "╤".join("═" * (w + 2) for w in widths) + "╕"]
        for k, row in enumerate(grid):
            row = row + [""] * (8 - len(row))
            out.append("│ " + " │ ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " │")
            out.append(("├" + "┼".join("─" * (w + 2) for w in widths) + "┤") if k < len(grid) - 1 else
                       ("╘" + "╧".join("═" * (w + 2) for w in widths) + "╛"))
        epoch_steps = 935
        head = [f"{stamp} StatsLogger INFO: Epoch {n // epoch_steps + 1}/{total // epoch_steps + 1} Step "
                f"{n % epoch_steps + 1}/{epoch_steps} Train step {n}/{total} done.",
                f"{stamp} StatsLogger INFO: Stats (1/1):", f"{stamp} StatsLogger INFO: "]
        return "\n".join(head + out) + "\n"

    def save(self, n, clock):
        g = n - 1
        return (f"{self.stamp(clock).decode()} Saver INFO: Saving model to /workspace/outputs/grpo/checkpoints/root/"
                f"gsm8k-grpo/trial0/default/epoch0epochstep{g}globalstep{g}\n")


FORMATS = {f.name: f for f in (Verl(), TrlLog(), Areal())}
TOTAL_STEPS = 100000  # the run's planned steps: far beyond any generated log, so no log says it finished
SAVE_EVERY = 50


@dataclass
class Log:
    path: Path
    steps: int  # the last step written
    first_bad: int | None  # the first dead step, if any
    clock: datetime.datetime  # the simulated clock at the last step


class Writer:
    """Writes one format's steps with noise between them, to a size."""

    def __init__(self, fmt: Format, seed: int, noise_kb: float) -> None:
        self.fmt, self.rng = fmt, random.Random(seed)
        self.pool = fmt.noise_pool(self.rng)
        self.mean = sum(map(len, self.pool)) / len(self.pool)
        self.noise_bytes = noise_kb * 1024

    def noise(self, clock: datetime.datetime, scale: float = 1.0) -> bytes:
        count = max(1, round(self.noise_bytes * scale * self.rng.uniform(0.5, 1.5) / self.mean))
        return b"".join(self.rng.choices(self.pool, k=count)).replace(STAMP, self.fmt.stamp(clock))

    def step(self, n: int, metrics: Metrics, clock: datetime.datetime, noise_scale: float = 1.0) -> bytes:
        text = self.noise(clock - datetime.timedelta(seconds=metrics.step_s / 2), noise_scale)
        text += self.fmt.step(n, metrics, clock, TOTAL_STEPS).encode()
        if n % SAVE_EVERY == 0:
            text += self.fmt.save(n, clock).encode()
        return text


def generate(fmt: Format, path: Path, size: int, noise_kb: float, die_at: float | None = 0.95, seed: int = 0,
             first_step: int = 1, preamble: bool = True, head: bytes = b"", extra: dict[int, bytes] | None = None
             ) -> Log:
    """A log of about `size` bytes (at least): healthy steps, then (die_at) dead ones from that fraction
    of the size on, at least BAD_STEPS of them. `head` is written first, `extra[n]` after step n: neither
    counts towards the size."""
    writer = Writer(fmt, seed, noise_kb)
    clock = datetime.datetime(2025, 11, 14, 9, 2, 0)
    n, first_bad, written = first_step - 1, None, 0
    with open(path, "wb", buffering=4 * MIB) as f:
        f.write(head)
        if preamble:
            text = fmt.preamble(writer.rng).encode()
            f.write(text)
            written += len(text)
        while True:
            if die_at is None and written >= size:
                break
            if first_bad is not None and written >= size and n - first_bad + 1 >= BAD_STEPS:
                break
            n += 1
            if die_at is not None and first_bad is None and written >= die_at * size:
                first_bad = n
            metrics = dead(writer.rng) if first_bad is not None else healthy(writer.rng)
            clock += datetime.timedelta(seconds=metrics.step_s)
            text = writer.step(n, metrics, clock)
            f.write(text + (extra or {}).get(n, b""))
            written += len(text)
    return Log(path, n, first_bad, clock)


# ---------------------------------------------------------------------------------------------- children

def child_env(src: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONSTARTUP", None)
    return env


def spawn(cmd: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, **kw)
    CHILDREN.add(proc.pid)
    return proc


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all() -> None:
    for pid in list(CHILDREN):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def reap(proc: subprocess.Popen, deadline: float) -> tuple[bool, float, int]:
    """Wait for the child until `deadline` (killed then): -> (finished in time, CPU s, peak RSS KiB)."""
    finished = True
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            kill(proc)
            pid, status, usage = os.wait4(proc.pid, 0)
            finished = False
            break
        time.sleep(0.01)
    proc.returncode = os.waitstatus_to_exitcode(status)
    CHILDREN.discard(proc.pid)
    return finished, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def cpu_seconds(pid: int) -> float | None:
    """The process's user + system CPU seconds so far, from /proc (clock-tick resolution)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- measurements

@dataclass
class Row:
    case: str
    log: str
    load: float
    time: str = "-"
    cpu: str = "-"
    rss: str = "-"
    per_poll: str = "-"
    latency: str = "-"
    result: str = ""


def mib(path: Path) -> str:
    return f"{path.stat().st_size / MIB:,.0f} MiB"


def load1() -> float:
    return os.getloadavg()[0]


def verdict(stdout: str, stderr: str, code: int, log: Log) -> str:
    """What the doctor said, against what the log holds."""
    try:
        d = json.loads(stdout)
    except json.JSONDecodeError:
        last = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["(no output)"])[-1]
        return f"exit {code}: {last.replace(str(log.path), 'LOG')[:120]}"
    said = d.get("cause") if d.get("status") == "problem" else d.get("status")
    said += f" from {d['first_bad_step']}" if d.get("first_bad_step") is not None else ""
    expected = log.first_bad
    ok = d.get("status") == "problem" and d.get("first_bad_step") == expected
    return f"{said} ({'as written' if ok else f'written: reward dead from {expected}'})"


def doctor(python: str, env: dict, log: Log, case: str, timeout: float, work: Path, label: str | None = None) -> Row:
    row = Row(case, label or f"{mib(log.path)}, {log.steps:,} steps", load1())
    out, err = work / "doctor.out", work / "doctor.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        start = time.monotonic()
        proc = spawn([python, "-m", "grpo", "doctor", str(log.path), "--json"], env, stdout=o, stderr=e)
    finished, cpu, rss = reap(proc, start + timeout)
    wall = time.monotonic() - start
    if not finished:
        row.time, row.result = f"> {timeout:.0f} s", f"did not finish in {timeout:.0f} s (killed)"
        row.cpu, row.rss = f"> {cpu:.1f}", f"> {rss / 1024:,.0f}"
        return row
    row.time, row.cpu, row.rss = f"{wall:.1f}", f"{cpu:.1f}", f"{rss / 1024:,.0f}"
    row.result = verdict(out.read_text(errors="replace"), err.read_text(errors="replace"), proc.returncode, log)
    return row


class Lines:
    """A child's stdout lines, each with the monotonic time it arrived and the child's CPU seconds then."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.items = proc, []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            item = (time.monotonic(), cpu_seconds(self.proc.pid), line.rstrip("\n"))
            with self.cond:
                self.items.append(item)
                self.cond.notify_all()
        with self.cond:
            self.items.append((time.monotonic(), None, None))  # end of output
            self.cond.notify_all()

    def wait_for(self, match, count: int, deadline: float) -> list[tuple[float, float | None, str]] | None:
        """The first `count` lines for which match(line) is true, or None at the deadline or the end."""
        with self.cond:
            while True:
                found = [i for i in self.items if i[2] is not None and match(i[2])]
                if len(found) >= count:
                    return found[:count]
                if self.items and self.items[-1][2] is None:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 1.0))

    def tail(self) -> str:
        return " | ".join(i[2] for i in self.items[-3:] if i[2] is not None)


WRITER_MODE = "_writer"


def writer_main(argv: list[str]) -> None:
    """The stand-in trainer (run as `doctor_scale.py _writer ...`): appends a healthy step every period
    until the trigger file exists, then BAD_STEPS dead steps in one write (its monotonic time printed
    just before the write), then a dead step every period; until killed or its deadline."""
    fmt_name, path, trigger, first, period, seed, deadline_s, clock_s = argv
    writer = Writer(FORMATS[fmt_name], int(seed), noise_kb=2)
    clock = datetime.datetime.fromtimestamp(float(clock_s))
    n, deadline = int(first), time.monotonic() + float(deadline_s)
    gone_bad = False
    with open(path, "ab") as f:
        while time.monotonic() < deadline:
            if not gone_bad and os.path.exists(trigger):
                burst = b""
                for _ in range(BAD_STEPS):
                    n += 1
                    metrics = dead(writer.rng)
                    clock += datetime.timedelta(seconds=metrics.step_s)
                    burst += writer.step(n, metrics, clock, noise_scale=0.2)
                print(f"bad {n - BAD_STEPS + 1} {time.monotonic():.6f}", flush=True)
                f.write(burst)
                f.flush()
                gone_bad = True
            else:
                n += 1
                metrics = dead(writer.rng) if gone_bad else healthy(writer.rng)
                clock += datetime.timedelta(seconds=metrics.step_s)
                f.write(writer.step(n, metrics, clock))
                f.flush()
            time.sleep(float(period))


def watch(python: str, env: dict, fmt: Format, log: Log, args, work: Path) -> Row:
    row = Row(f"watch {fmt.name}", f"{mib(log.path)}, {log.steps:,} steps", load1())
    timeout = args.timeout
    err = open(work / "watch.err", "wb")
    start = time.monotonic()
    proc = spawn([python, "-m", "grpo", "watch", str(log.path), "--interval", str(args.interval)], env,
                 stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
    lines = Lines(proc)
    writer = None
    try:
        is_step = lambda line: line.startswith("step ") and "no problem" in line  # noqa: E731
        first = lines.wait_for(is_step, 1, start + timeout)
        if first is None:
            row.time = f"> {timeout:.0f} s" if proc.poll() is None else "-"
            row.result = (f"no verdict in {timeout:.0f} s" if proc.poll() is None else
                          f"exit {proc.returncode}: {lines.tail()[:150]}")
            return row
        t0, c0, _ = first[0]
        row.time, row.cpu = f"{t0 - start:.1f}", f"{c0:.1f}" if c0 is not None else "?"
        trigger = work / "go_bad"
        trigger.unlink(missing_ok=True)
        writer = spawn([python, str(Path(__file__).resolve()), WRITER_MODE, fmt.name, str(log.path), str(trigger),
                        str(log.steps), str(args.interval / 2), "1", str(3 * timeout), str(log.clock.timestamp())],
                       child_env(Path(args.src)), stdout=subprocess.PIPE, text=True)
        # per poll: from the 2nd verdict after the writer began to the (2 + polls)th, one step at every poll
        polls = lines.wait_for(is_step, 2 + args.polls, time.monotonic() + timeout)
        if polls is None:
            seen = len([i for i in lines.items if i[2] and is_step(i[2])]) - 1
            row.per_poll = f"> {timeout / max(1, seen):.0f} s"
            row.result = f"{seen} poll(s) with a new step in {timeout:.0f} s"
            return row
        (ta, ca, _), (tb, cb, _) = polls[1], polls[-1]
        if ca is not None and cb is not None:
            row.per_poll = f"{(cb - ca) / args.polls:.3f} s CPU ({(tb - ta) / args.polls:.2f} s wall)"
        trigger.touch()
        said = writer.stdout.readline().split()  # "bad N T": the writer's line, printed as it wrote the burst
        diagnosis = lines.wait_for(lambda line: line.startswith("DIAGNOSIS"), 1, time.monotonic() + timeout)
        if len(said) != 3:
            row.result = "the writer did not write its dead steps"
            return row
        if diagnosis is None:
            row.latency = f"> {timeout:.0f} s"
            row.result = f"no DIAGNOSIS in {timeout:.0f} s after the dead steps"
            return row
        row.latency = f"{diagnosis[0][0] - float(said[2]):.1f}"
        row.result = diagnosis[0][2].removeprefix("DIAGNOSIS ") + f" (written: reward dead from {said[1]})"
        return row
    finally:
        if writer is not None:
            kill(writer)
            writer.wait()
            CHILDREN.discard(writer.pid)
        if proc.poll() is None:
            time.sleep(1.0)  # the watch exits by itself after its diagnosis
        finished, _, rss = reap(proc, time.monotonic() + 5)
        row.rss = f"{rss / 1024:,.0f}"
        err.close()


# ---------------------------------------------------------------------------------------------- main

def cpu_name() -> str:
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
        if not line.strip() and fields:
            break
    return (f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')} model "
            f"{fields.get('model', '?')}), {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)")


def describe_src(python: str, env: dict, src: Path) -> str:
    probe = ("import grpo.cli, grpo.tools.watch, grpo.tools.doctor.textlog as t; "
             "print(grpo.cli.__file__, grpo.tools.watch.__file__, t.__file__)")
    try:
        out = subprocess.run([python, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return f"{src} (probe timed out)"
    files = out.stdout.split()
    if out.returncode != 0 or not files:
        sys.exit(f"the children cannot import grpo from {src}: {out.stderr.strip()[-300:]}")
    outside = [f for f in files if not Path(f).resolve().is_relative_to(src.resolve())]
    rev = subprocess.run(["git", "-C", str(src), "log", "-1", "--format=%h"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True,
                           text=True)
    where = f"{src}" + (f" at {rev.stdout.strip()}" if rev.returncode == 0 and rev.stdout.strip() else "")
    where += " (with uncommitted changes)" if dirty.returncode == 0 and dirty.stdout.strip() else ""
    return where + (f"; WARNING: imported from outside it: {outside}" if outside else "")


def sizes(text: str) -> list[float]:
    return [float(s) for s in text.split(",") if s.strip()]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == WRITER_MODE:
        writer_main(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--src", type=Path, default=REPO / "src", help="the src folder of the grpo to measure")
    parser.add_argument("--cases", default="doctor,watch,line,nul", help="which cases (default all)")
    parser.add_argument("--sizes-mb", default="50,200,500", help="the doctor's log sizes, MiB")
    parser.add_argument("--formats", default="verl,trl,areal", help="the doctor's log formats")
    parser.add_argument("--watch-sizes-mb", default="50,200", help="the watched logs' sizes, MiB")
    parser.add_argument("--watch-formats", default="verl", help="the watched logs' formats (verl, trl, areal)")
    parser.add_argument("--interval", type=float, default=1.0, help="grpo watch --interval, seconds")
    parser.add_argument("--polls", type=int, default=3, help="polls the watch's per-poll cost is taken over")
    parser.add_argument("--line-mb", type=float, default=10, help="the long line's size, MiB")
    parser.add_argument("--nul-mb", default="1,64", help="the NUL runs' sizes, MiB (each followed by --nul-log-mb)")
    parser.add_argument("--nul-log-mb", type=float, default=16, help="the log after the NULs, MiB")
    parser.add_argument("--noise-kb", type=float, default=100, help="other processes' lines between two steps, KiB")
    parser.add_argument("--timeout", type=float, default=300, help="seconds any one measurement may take")
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()), help="where the logs are written")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs (their folder is printed)")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    unknown = cases - {"doctor", "watch", "line", "nul"} | (set(args.formats.split(",")) - set(FORMATS)) | (
        set(args.watch_formats.split(",")) - set(FORMATS))
    if unknown:
        parser.error(f"unknown case or format: {', '.join(sorted(unknown))}")
    args.src = args.src.resolve()
    python, env = sys.executable, child_env(args.src)

    atexit.register(kill_all)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))
    work = Path(tempfile.mkdtemp(prefix="doctor_scale_", dir=args.tmp))
    began = datetime.datetime.now(datetime.timezone.utc)
    header = [f"grpo doctor and watch on large logs, {began:%Y-%m-%d %H:%M} UTC, {cpu_name()}",
              f"src: {describe_src(python, env, args.src)}",
              f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; logs in {work}"]
    print("\n".join(header), flush=True)
    rows: list[Row] = []

    def done(row: Row) -> None:
        rows.append(row)
        print(f"  {row.case} | {row.log} | time {row.time} | CPU {row.cpu} | RSS {row.rss} MiB | per poll "
              f"{row.per_poll} | latency {row.latency} | {row.result}", flush=True)

    try:
        if "doctor" in cases:
            for name in args.formats.split(","):
                for size in sizes(args.sizes_mb):
                    folder = work / f"{name}_{size:g}"
                    folder.mkdir()
                    log = generate(FORMATS[name], folder / FORMATS[name].file_name, int(size * MIB), args.noise_kb)
                    done(doctor(python, env, log, f"doctor {name}", args.timeout, work))
                    shutil.rmtree(folder) if not args.keep else None
        if "watch" in cases:
            for name in args.watch_formats.split(","):
                for size in sizes(args.watch_sizes_mb):
                    folder = work / f"watch_{name}_{size:g}"
                    folder.mkdir()
                    log = generate(FORMATS[name], folder / FORMATS[name].file_name, int(size * MIB), args.noise_kb,
                                   die_at=None)
                    done(watch(python, env, FORMATS[name], log, args, work))
                    shutil.rmtree(folder) if not args.keep else None
        if "line" in cases and args.line_mb > 0:
            rng = random.Random(1)
            size = int(args.line_mb * MIB)
            paths = [f"/data/gsm8k/shards/train-{i:05d}-of-99999.parquet" for i in range(size // 40 + 1)]
            config = ("(TaskRunner pid=2231) {'data': {'train_files': " + repr(paths)[: size] + "']}, "
                      "'actor_rollout_ref': {'model': {'path': 'Qwen/Qwen2.5-7B-Instruct'}}}\n").encode()
            env_dump = ("(WorkerDict pid=3321) runtime_env PYTHONPATH=" + ":".join(
                f"/tmp/ray/session_2025-11-14_09-00-01_{rng.randint(10 ** 5, 10 ** 6)}/runtime_resources/"
                f"py_modules_files/_ray_pkg_{rng.getrandbits(64):016x}" for _ in range(size // 100 + 1))[: size]
                + "\n").encode()
            for label, line in (("config dump, spaces", config), ("paths, no space", env_dump)):
                folder = work / f"line_{label.split(',')[0].replace(' ', '_')}"
                folder.mkdir()
                log = generate(FORMATS["verl"], folder / "train.log", 2 * MIB, args.noise_kb, die_at=0.8,
                               extra={5: line})
                done(doctor(python, env, log, "doctor verl, one long line",
                            args.timeout, work, f"{len(line) / MIB:.1f} MiB line ({label}) in {mib(log.path)}"))
                shutil.rmtree(folder) if not args.keep else None
        if "nul" in cases:
            for size in sizes(args.nul_mb):
                folder = work / f"nul_{size:g}"
                folder.mkdir()
                # the writer's offset stayed where the log ended when it was copied and truncated: the new
                # lines follow that many NUL bytes, and begin mid-run (no preamble)
                log = generate(FORMATS["verl"], folder / "train.log", int(args.nul_log_mb * MIB), args.noise_kb,
                               first_step=1001, preamble=False, head=b"\0" * int(size * MIB))
                done(doctor(python, env, log, "doctor verl, NULs first", args.timeout, work,
                            f"{size:g} MiB of NULs, then {args.nul_log_mb:g} MiB (steps 1,001-{log.steps:,})"))
                shutil.rmtree(folder) if not args.keep else None
    finally:
        kill_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    ended = datetime.datetime.now(datetime.timezone.utc)
    print()
    print("\n".join(header[:2]))
    print(f"{began:%H:%M}-{ended:%H:%M} UTC; load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"watch --interval {args.interval:g}, its writer a step every {args.interval / 2:g} s; "
          f"~{args.noise_kb:g} KiB of other lines per step")
    print()
    print("| case | log | time s | CPU s | peak RSS MiB | per poll | latency s | load | result |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r.case} | {r.log} | {r.time} | {r.cpu} | {r.rss} | {r.per_poll} | {r.latency} | {r.load:.1f} | "
              f"{r.result} |")
    print()
    print("time: the doctor's wall seconds; the watch's from its start to its first verdict (CPU s likewise). per "
          "poll: the watch's CPU (and wall) seconds per poll while a new step came at every poll. latency: from the "
          f"write of {BAD_STEPS} dead steps at once to the watch's DIAGNOSIS line. load: the 1-minute load average "
          "as the measurement began.")
    if args.keep:
        print(f"logs kept in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
