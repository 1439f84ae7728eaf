"""Step metrics to `RUN_DIR/metrics.jsonl`, TensorBoard, W&B (when configured) and a console table;
evaluations and sample completions to TensorBoard and W&B too."""

from __future__ import annotations

import importlib.util
import math
import re
import time
from pathlib import Path
from typing import Any

from grpo import metric_keys as k
from grpo.config import LoggingConfig
from grpo.console import say
from grpo.errors import ConfigError
from grpo.rundir.files import JsonlLog, atomic_write
from grpo.train.tensorboard import TensorBoardWriter

CONSOLE_COLUMNS = [
    ("step", "step", "{:>5d}"),
    ("reward", k.REWARD_MEAN, "{:>6.3f}"),
    ("acc", k.ACCURACY, "{:>5.2f}"),
    ("zero_std", k.ZERO_VARIANCE_FRAC, "{:>8.2f}"),
    ("len", k.LENGTH_MEAN, "{:>5.1f}"),
    ("trunc", k.TRUNCATED_FRAC, "{:>5.2f}"),
    ("failed", k.FAILED_FRAC, "{:>6.2f}"),
    ("loss", k.LOSS, "{:>8.4f}"),
    ("gnorm", k.GRAD_NORM, "{:>7.3f}"),
    ("clip", k.CLIP_FRAC, "{:>5.3f}"),
    ("upd", k.APPLIED, "{:>3d}"),
    ("tok/s", k.TOKENS_PER_S, "{:>6.0f}"),
    ("step_s", k.STEP_S, "{:>6.1f}"),
]


def _fmt(fmt: str, value: Any) -> str:
    width = _width(fmt)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-".rjust(width)
    try:
        return fmt.format(int(value) if fmt.endswith("d}") else value)
    except (ValueError, TypeError):
        return str(value).rjust(width)


def check_trackers(cfg: LoggingConfig) -> None:
    """A tracker the config asks for whose package is missing, refused before the run directory exists (not an
    ImportError once the run has started)."""
    if cfg.wandb_project is not None and importlib.util.find_spec("wandb") is None:
        raise ConfigError(f"logging.wandb_project={cfg.wandb_project} needs the wandb package: pip install "
                          "'grpo[wandb]', or leave logging.wandb_project unset")


class MetricsLogger:
    def __init__(self, run_dir: Path, cfg: LoggingConfig, total_steps: int, run_name: str, config_dict: dict,
                 start_step: int = 0, enabled: bool = True) -> None:
        """enabled=False (ranks other than 0): every call does nothing; rank 0 logs the run."""
        self.enabled = enabled
        self.log_file = JsonlLog(run_dir / "metrics.jsonl", enabled)
        self.total_steps = total_steps
        self.cfg = cfg
        self.lines = 0
        self.tb: TensorBoardWriter | None = None
        self.wandb = None
        if cfg.tensorboard and enabled:
            # purge_step drops scalars a resumed run will write again, so curves never fold back.
            self.tb = TensorBoardWriter(run_dir / "tensorboard", purge_step=start_step + 1 if start_step else None)
        if cfg.wandb_project and enabled:
            import wandb

            # The run id lives in the run directory, so a resume continues the same W&B run.
            id_file = run_dir / "wandb_id"
            run_id = id_file.read_text().strip() if id_file.is_file() else wandb.util.generate_id()
            atomic_write(id_file, run_id)
            self.wandb = wandb.init(project=cfg.wandb_project, name=run_name, config=config_dict, id=run_id,
                                    resume="allow")
        self.started = time.time()

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {k.STEP: step, k.TIME: time.time(), **metrics}
        if not self.enabled:
            return
        self.log_file.append(record)
        numeric = {key: float(v) for key, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.tb is not None:
            for key, value in numeric.items():
                self.tb.add_scalar(key, value, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(numeric, step=step)
        self._console(record)

    def log_eval(self, step: int, label: str, result: dict[str, Any]) -> None:
        numeric = {k.EVAL_PREFIX + name: float(v) for name, v in result.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.tb is not None:
            for key, value in numeric.items():
                self.tb.add_scalar(key, value, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log({**numeric, "eval/label": label}, step=step)

    def log_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        if self.tb is not None and samples:
            text = "\n\n".join(f"**{s['status']}** reward {s['reward']}  \n{s['completion']}" for s in samples)
            self.tb.add_text("samples", text, step)
        if self.wandb is not None and samples:
            import wandb

            columns = ["step", "prompt", "completion", "reward", "status"]
            self.wandb.log({"samples": wandb.Table(columns=columns, data=[[step, s["prompt"], s["completion"],
                                                                           s["reward"], s["status"]] for s in samples])},
                           step=step)

    def _console(self, record: dict[str, Any]) -> None:
        if self.lines % 20 == 0:
            say("  ".join(name.rjust(_width(fmt)) for name, _, fmt in CONSOLE_COLUMNS))
        self.lines += 1
        say("  ".join(_fmt(fmt, record.get(key)) for _, key, fmt in CONSOLE_COLUMNS))

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _width(fmt: str) -> int:
    match = re.search(r":>(\d+)", fmt)
    return int(match.group(1)) if match else 0
