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


def disturb_each_evaluation(monkeypatch) -> list[tuple[list, list, dict, dict]]:
    """Kill the server as each held-out evaluation's requests go out, then evaluate the same weights again
    undisturbed. -> per evaluation (its answers, the clean answers, its result, the clean result)."""
    from grpo.evaluate import evaluate

    compared = []

    def disturbed(engine, *args, **kwargs):
        engine.arm_faults({"kill_server"})
        result = evaluate(engine, *args, keep_answers=True, **kwargs)
        clean = evaluate(engine, *args, keep_answers=True, **kwargs)
        compared.append((result.pop("answers"), clean.pop("answers"), result, clean))
        return result

    monkeypatch.setattr("grpo.held_out.evaluate", disturbed)
    return compared
