"""Logs as AReaL, verl, TRL and grpo write them, a step at a time: for the doctor's recognition tests
and for `grpo watch`'s live tests (tests/integration/watch_writer.py writes them from a process).

Each format is a `Format` that renders one step's metrics as that framework prints them, the run's
first lines, a checkpoint save, and the endings a real log has when it stops: a checkpoint save, a
traceback, Ray's shutdown noise, a torn line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ENDINGS = ("save", "traceback", "shutdown", "torn")
TRACEBACK = ["Traceback (most recent call last):", '  File "/workspace/train.py", line 212, in <module>',
             "    main()", "RuntimeError: the run stopped here"]
RAY_SHUTDOWN = ["2025-11-14 10:12:02,112\tINFO worker.py:1997 -- Shutting down Ray.",
                "[2025-11-14 10:12:02,300 W 2231 2260] core_worker.cc:932: The core worker has been shut down.",
                "*** SIGTERM received at time=1731578000 on cpu 3 ***",
                "PC: @     0x7f3c8d9a1117  (unknown)  pthread_cond_wait@@GLIBC_2.3.2"]


@dataclass(frozen=True)
class Step:
    step: int
    reward: float
    zero_variance: float  # fraction of groups whose rewards are all identical
    loss: float
    grad_norm: float


def healthy(step: int) -> Step:
    return Step(step, 0.35 + 0.1 * ((step * 7) % 5) / 4, 0.25, 0.02 - 0.01 * (step % 3), 0.3 + 0.05 * (step % 4))


def dead(step: int) -> Step:
    """Every completion scored exactly 0: a dead reward source."""
    return Step(step, 0.0, 1.0, 0.0, 0.0)


class Format:
    name: str
    log_name: str  # the file the run writes, in its directory

    def preamble(self) -> list[str]:
        return []

    def step(self, s: Step, total: int) -> list[str]:
        raise NotImplementedError

    def save(self, step: int, root: Path) -> list[str]:
        raise NotImplementedError

    def ending(self, kind: str, last: Step, total: int, root: Path) -> str:
        """The text that ends the log (no newline after a torn line)."""
        if kind == "save":
            return "\n".join(self.save(last.step, root)) + "\n"
        if kind == "traceback":
            return "\n".join(TRACEBACK) + "\n"
        if kind == "shutdown":
            return "\n".join(RAY_SHUTDOWN) + "\n"
        torn = "\n".join(self.step(Step(last.step + 1, last.reward, last.zero_variance, last.loss, last.grad_norm),
                                   total))
        return torn[: len(torn) // 2]


def _stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H:%M:%S.%f")[:-3]


class Areal(Format):
    name, log_name = "areal", "trainer.log"

    def preamble(self) -> list[str]:
        return [f"{_stamp()} Launcher INFO: Launching sglang server: python3 -m areal.launcher.sglang_server",
                f"{_stamp()} RemoteSGLangEngine INFO: Get server addresses from name_resolve: ['127.0.0.1:23239']"]

    def step(self, s: Step, total: int) -> list[str]:
        rows = {"grpo_actor/task_reward/avg": s.reward, "grpo_actor/actor_loss/avg": s.loss,
                "grpo_actor/grad_norm": s.grad_norm, "grpo_actor/entropy/avg": 0.6}
        return ([f"{_stamp()} StatsLogger INFO: Epoch 1/1 Step {s.step}/{total} Train step {s.step}/{total} done.",
                 f"{_stamp()} StatsLogger INFO: Stats (1/1):", "╒══════╤══════╕"]
                + [f"│ {k} │ {v:.4e} │" for k, v in rows.items()] + ["╘══════╧══════╛"])

    def save(self, step: int, root: Path) -> list[str]:
        g = step - 1  # AReaL's globalstep counts from 0
        path = root / "checkpoints" / f"epoch0epochstep{g}globalstep{g}"
        path.mkdir(parents=True, exist_ok=True)
        return [f"{_stamp()} Saver INFO: Saving model to {path}"]

    @staticmethod
    def server_death() -> list[str]:
        """What llm_server.log says as SGLang dies of OOM (stamped now, so it falls in the step in progress)."""
        now = datetime.now().strftime("[%Y-%m-%d %H:%M:%S")
        return [f"{now} TP0] Scheduler hit an exception: Traceback (most recent call last):",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB.", "Killed"]


class Verl(Format):
    name, log_name = "verl", "train.log"

    def preamble(self) -> list[str]:
        return ["2025-11-14 09:00:01,112\tINFO worker.py:1832 -- Started a local Ray instance.",
                "(TaskRunner pid=2231) Training from scratch"]

    def step(self, s: Step, total: int) -> list[str]:
        return [f"(TaskRunner pid=2231) step:{s.step} - critic/score/mean:np.float64({s.reward}) - "
                f"actor/pg_loss:{s.loss:.4f} - actor/grad_norm:{s.grad_norm:.4f} - actor/entropy:0.61 - "
                f"response_length/clip_ratio:0.01 - training/global_step:{s.step}"]

    def save(self, step: int, root: Path) -> list[str]:
        path = root / "checkpoints" / f"global_step_{step}"
        path.mkdir(parents=True, exist_ok=True)
        return [f"(TaskRunner pid=2231) local_global_step_folder: {path}"]


class TrlLog(Format):
    """TRL's console log (stdout and stderr together): the training bar, then the logged dict."""

    name, log_name = "trl_log", "train.log"

    def preamble(self) -> list[str]:
        return ["\rLoading weights: 100%|██████████| 20/20 [00:00<00:00, 14939.64it/s]",
                "\r  0%|          | 0/100 [00:00<?, ?it/s]"]

    def step(self, s: Step, total: int) -> list[str]:
        entry = {"loss": s.loss, "grad_norm": s.grad_norm, "learning_rate": 1e-6, "reward": s.reward,
                 "reward_std": 0.0 if s.zero_variance >= 1 else 0.3, "frac_reward_zero_std": s.zero_variance,
                 "completions/clipped_ratio": 0.1, "entropy": 0.6, "epoch": s.step / total}
        shown = {k: f"{v:.4g}" for k, v in entry.items()}
        return [f"\r{100 * s.step // total:3d}%|█         | {s.step}/{total} [00:{s.step:02d}<00:10,  1.2it/s]"
                f"\r                                             \r{shown}"]

    def save(self, step: int, root: Path) -> list[str]:
        path = root / "out" / f"checkpoint-{step}"
        path.mkdir(parents=True, exist_ok=True)
        return ["\rWriting model shards: 100%|██████████| 1/1 [00:00<00:00, 267.39it/s]"]


class Grpo(Format):
    """A grpo run directory's metrics.jsonl."""

    name, log_name = "grpo", "metrics.jsonl"

    def step(self, s: Step, total: int) -> list[str]:
        return [json.dumps({"step": s.step, "reward/mean": s.reward, "groups/zero_std_frac": s.zero_variance,
                            "actor/loss": s.loss, "actor/grad_norm": s.grad_norm, "update/applied": True})]

    def save(self, step: int, root: Path) -> list[str]:
        return []  # grpo's checkpoints are directories its store validates; the log says nothing

    def ending(self, kind: str, last: Step, total: int, root: Path) -> str:
        if kind in ("save", "torn"):
            return super().ending(kind, last, total, root)
        # grpo writes no console noise into metrics.jsonl: its crash or interruption goes to events.jsonl
        event = {"step": last.step + 1, "kind": "crash" if kind == "traceback" else "interrupted",
                 "message": TRACEBACK[-1] if kind == "traceback" else "SIGTERM"}
        (root / "events.jsonl").write_text(json.dumps(event) + "\n")
        return ""


FORMATS = {f.name: f for f in (Areal(), Verl(), TrlLog(), Grpo())}


def write_log(fmt: Format, root: Path, steps: list[Step], total: int, ending: str | None = None,
              save_every: int = 0) -> Path:
    """A whole log at once: the preamble, the steps (a save every `save_every`), then the ending."""
    root.mkdir(parents=True, exist_ok=True)
    lines = fmt.preamble()
    for s in steps:
        lines += fmt.step(s, total)
        if save_every and s.step % save_every == 0:
            lines += fmt.save(s.step, root)
    path = root / fmt.log_name
    path.write_text("\n".join(lines) + "\n" + (fmt.ending(ending, steps[-1], total, root) if ending else ""))
    return path
