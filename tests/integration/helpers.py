from __future__ import annotations

import json
from pathlib import Path

import torch

from grpo.config import load_config
from grpo.loop import TrainingLoop

NOISY = ("time", "time/", "perf/", "memory/")


def run_tiny(overrides: list[str]) -> TrainingLoop:
    trainer = TrainingLoop(load_config("tiny", overrides))
    trainer.train()
    return trainer


def metric_lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def deterministic(line: dict) -> dict:
    return {k: v for k, v in line.items() if not k.startswith(NOISY)}


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def max_param_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)
