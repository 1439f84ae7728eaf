"""Writes the TensorBoard event files and wandb run directories of tests/data/logged_runs/ with the real writers,
from the values real runs logged (tests/data/real_runs/): see README.md. Not run by the tests, which read the
files it wrote with grpo's own readers.

    python generate.py tensorboard   # an environment with torch and tensorboard (torch.utils.tensorboard)
    python generate.py wandb         # an environment with wandb (written offline: nothing leaves the machine)
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
REAL = HERE.parent / "real_runs"
GEMMA = REAL / "unsloth_gemma3_gsm8k_250" / "checkpoint-250" / "trainer_state.json"
RLLM = REAL / "rllm_issue54_score_zero_every_step" / "console.log"
AGENTR1 = REAL / "verl_agentr1_issue30_nan_step83" / "console.log"
# The TrainingArguments the gemma run's trainer_state.json and SOURCE name (training_args.bin was not copied).
GEMMA_ARGS = {"output_dir": "outputs", "max_steps": 250, "logging_steps": 10, "save_steps": 250}
# transformers' WandbCallback puts these in the run's summary, not its history.
SINGLE_VALUE_SCALARS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss",
                        "total_flos")
_STEP_LINE = re.compile(r"step:(\d+) - (.*)$")


def trl_logs(state: Path) -> list[tuple[int, dict]]:
    """(global_step, the logs Trainer.log passed its callbacks): a log_history entry without the "step" it adds."""
    history = json.loads(state.read_text())["log_history"]
    return [(entry["step"], {k: v for k, v in entry.items() if k != "step"}) for entry in history]


def rewrite_logs(logs: dict) -> dict:
    """transformers.integrations.rewrite_logs' renaming: eval_x -> eval/x, test_x -> test/x, x -> train/x."""
    out = {}
    for key, value in logs.items():
        if key.startswith("eval_"):
            out["eval/" + key[5:]] = value
        elif key.startswith("test_"):
            out["test/" + key[5:]] = value
        else:
            out["train/" + key] = value
    return out


def verl_steps(console: Path) -> list[tuple[int, dict]]:
    """(step, its metrics) of each `step:N - key:value - ...` line, as far as the stored line goes (a torn last
    pair, without its value, is left out)."""
    found = []
    for line in console.read_text().splitlines():
        match = _STEP_LINE.search(line)
        if not match:
            continue
        data = {}
        for pair in match.group(2).split(" - "):
            key, sep, text = pair.partition(":")
            try:
                data[key.strip()] = float(text) if sep else None
            except ValueError:
                continue
        found.append((int(match.group(1)), {k: v for k, v in data.items() if v is not None}))
    return found


def tensorboard() -> None:
    from torch.utils.tensorboard import SummaryWriter

    logs = trl_logs(GEMMA)

    def trl_start(log_dir: Path, entries: list[tuple[int, dict]]) -> None:
        """One trainer start: TensorBoardCallback's on_train_begin (the args as text), then on_log per entry."""
        writer = SummaryWriter(log_dir=str(log_dir))
        writer.add_text("args", json.dumps(GEMMA_ARGS, indent=2))
        for step, entry in entries:
            for key, value in rewrite_logs(entry).items():
                if isinstance(value, (int, float)):
                    writer.add_scalar(key, value, step)
                elif isinstance(value, str):
                    writer.add_text(key, value, step)
            writer.flush()
        writer.close()

    trl_start(_fresh(HERE / "trl_gemma3_tensorboard" / "runs") / "Mar24_00-00-00_gemma", logs)
    resumed = _fresh(HERE / "trl_gemma3_resumed_tensorboard" / "logs")
    trl_start(resumed, [(s, e) for s, e in logs if s <= 150])
    time.sleep(1.1)  # the second start's file name (its time in seconds) sorts after the first's
    trl_start(resumed, [(s, e) for s, e in logs if s >= 110])

    for name, console, new_style in (("verl_rllm54_tensorboard", RLLM, False),
                                     ("verl_agentr1_nan_tensorboard", AGENTR1, False),
                                     ("verl_rllm54_tensor_scalars", RLLM, True)):  # a format sample: scalar tensors
        writer = SummaryWriter(str(_fresh(HERE / name / "tensorboard_log")))  # verl's _TensorboardAdapter
        for step, data in verl_steps(console):
            for key in data:
                writer.add_scalar(key, data[key], step, new_style=new_style)
        writer.close()


def wandb_runs() -> None:
    import wandb

    settings = wandb.Settings(mode="offline", x_disable_stats=True, silent=True)

    def start(name: str, **init):
        folder = _fresh(HERE / name / "wandb").parent
        return folder, wandb.init(dir=str(folder), settings=settings, **init)

    folder, run = start("trl_gemma3_wandb", project="huggingface", config=GEMMA_ARGS)
    wandb.define_metric("train/global_step")  # WandbCallback.setup
    wandb.define_metric("*", step_metric="train/global_step", step_sync=True)
    for step, entry in trl_logs(GEMMA):  # WandbCallback.on_log
        for key, value in entry.items():
            if key in SINGLE_VALUE_SCALARS:
                run.summary[key] = value
        rest = rewrite_logs({k: v for k, v in entry.items() if k not in SINGLE_VALUE_SCALARS})
        wandb.log({**rest, "train/global_step": step})
    run.finish()
    _tidy(folder)

    for name, console in (("verl_rllm54_wandb", RLLM), ("verl_agentr1_nan_wandb", AGENTR1)):
        folder, run = start(name, project="verl")
        steps = dict(verl_steps(console))
        for line in console.read_text().splitlines():  # Tracking.log: the console logger first, then wandb
            print(line, flush=True)
            match = _STEP_LINE.search(line)
            if match and int(match.group(1)) in steps:
                step = int(match.group(1))
                wandb.log(data=steps.pop(step), step=step)
        run.finish()
        _tidy(folder)


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _tidy(folder: Path) -> None:
    """Leave the run directory as the doctor would find it, without what names this machine: wandb's symlinks
    (latest-run, debug logs), its own debug logs and the environment's requirements.txt."""
    root = folder / "wandb"
    for link in [p for p in root.iterdir() if p.is_symlink()]:
        link.unlink()
    for run in root.glob("*run-*"):
        shutil.rmtree(run / "logs", ignore_errors=True)
        (run / "files" / "requirements.txt").unlink(missing_ok=True)


if __name__ == "__main__":
    {"tensorboard": tensorboard, "wandb": wandb_runs}[sys.argv[1]]()
