"""A stand-in trainer for `grpo watch`'s tests: writes a run's log in one framework's format as a trainer
does, one step every --period seconds, healthy up to --die-at and then a dead reward source, until killed
or --steps are written. Each step's lines are flushed at once; the monotonic time just before each step's
line was completed goes to --times (one JSON line per step), for the test to measure how soon the watch
spoke.

    python tests/integration/watch_writer.py FORMAT RUN_DIR --times FILE [--period S] [--die-at N]
        [--steps N] [--rotate-at N] [--truncate-at N] [--torn] [--server-death] [--save-every N] [--start-after FILE]

--rotate-at N: before step N, the log is renamed to LOG.1 and a new one begun (logrotate's create);
--truncate-at N: the log is copied to LOG.1 and truncated in place (logrotate's copytruncate);
--torn: each step's last line is written in two halves, a moment apart;
--server-death: (areal) llm_server.log records SGLang dying of OOM just before the first dead step.
FORMAT is one of tests/foreign_logs.py's, or trl_dir (a TRL output directory saving every step).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from grpo.rundir.lock import RunLock
from tests.foreign_logs import FORMATS, Areal, dead, healthy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("format", choices=[*FORMATS, "trl_dir"])
    parser.add_argument("root", type=Path)
    parser.add_argument("--times", type=Path, required=True)
    parser.add_argument("--period", type=float, default=0.3)
    parser.add_argument("--die-at", type=int, default=7)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rotate-at", type=int)
    parser.add_argument("--truncate-at", type=int)
    parser.add_argument("--torn", action="store_true")
    parser.add_argument("--server-death", action="store_true")
    parser.add_argument("--save-every", type=int, default=3)
    parser.add_argument("--start-after", type=Path, help="write nothing until this file exists")
    args = parser.parse_args()
    while args.start_after is not None and not args.start_after.exists():
        time.sleep(0.05)  # the trainer is still starting: its files do not exist yet
    args.root.mkdir(parents=True, exist_ok=True)
    if args.format == "grpo":
        RunLock(args.root).acquire()  # a live grpo run holds its directory; the kernel drops it when killed
    write = trl_dir_writer(args) if args.format == "trl_dir" else log_writer(args)
    with open(args.times, "a") as times:
        for step in range(1, args.steps + 1):
            def mark() -> None:  # just before the step's line is complete: the watch may stop us right after
                times.write(json.dumps({"step": step, "t": time.monotonic()}) + "\n")
                times.flush()

            write(step, healthy(step) if step < args.die_at else dead(step), mark)
            time.sleep(args.period)


def log_writer(args):
    fmt = FORMATS[args.format]
    log = args.root / fmt.log_name
    out = open(log, "a")
    out.write("".join(line + "\n" for line in fmt.preamble()))
    out.flush()

    def write(step: int, metrics, mark) -> None:
        nonlocal out
        if step == args.rotate_at:
            out.close()
            os.replace(log, log.with_name(log.name + ".1"))
            out = open(log, "a")
        if step == args.truncate_at:
            shutil.copy(log, log.with_name(log.name + ".1"))
            out.truncate(0)  # opened for appending: the next write lands at the new end
        if args.server_death and step == args.die_at:
            # SGLang stamps whole seconds: the death is written as a second begins, so its stamp falls after
            # the step before it, as it does in real runs whose steps take tens of seconds
            time.sleep(1 - time.time() % 1)
            with open(args.root / "llm_server.log", "a") as server:
                server.write("".join(line + "\n" for line in Areal.server_death()))
        lines = fmt.step(metrics, args.steps)
        if args.save_every and step % args.save_every == 0:
            lines += fmt.save(step, args.root)
        text = "".join(line + "\n" for line in lines)
        if args.torn:
            half = len(text) - len(lines[-1]) // 2 - 1
            out.write(text[:half])
            out.flush()
            time.sleep(args.period / 3)
            text = text[half:]
        mark()
        out.write(text)
        out.flush()

    return write


def trl_dir_writer(args):
    """TRL's output directory with save_steps=1: checkpoint-N/trainer_state.json holds every step so far."""
    history: list[dict] = []

    def write(step: int, m, mark) -> None:
        history.append({"step": step, "loss": m.loss, "grad_norm": m.grad_norm, "reward": m.reward,
                        "reward_std": 0.0 if m.zero_variance >= 1 else 0.3, "frac_reward_zero_std": m.zero_variance})
        checkpoint = args.root / f"checkpoint-{step}"
        checkpoint.mkdir()
        state = {"global_step": step, "max_steps": args.steps, "log_history": history}
        mark()
        (checkpoint / "trainer_state.json").write_text(json.dumps(state, indent=2))

    return write


if __name__ == "__main__":
    main()
