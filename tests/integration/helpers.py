from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from grpo.config import load_config
from grpo.train.loop import TrainingLoop

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

    monkeypatch.setattr("grpo.train.evaluation.evaluate", disturbed)
    return compared


def start_attached_standin(tmp_path: Path, name: str) -> tuple[subprocess.Popen, str]:
    """The SGLang stand-in on a tiny model, started as a user runs their own server: -> (process, URL),
    once it listens. Its log is tmp_path/<name>.log."""
    from grpo.config import TinyModelConfig
    from grpo.policy.models import build_char_tokenizer, build_tiny_model

    model_dir = tmp_path / "served"
    if not model_dir.exists():
        tokenizer = build_char_tokenizer()
        torch.manual_seed(0)
        build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
    log_path = tmp_path / f"{name}.log"
    standin = Path(__file__).resolve().parent.parent / "standins" / "sglang_server.py"
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, str(standin), "--model-path", str(model_dir), "--host", "127.0.0.1",
                                 "--port", "0"], stdout=log, stderr=subprocess.STDOUT, text=True)
    url = None
    with log_path.open() as reader:
        while url is None and proc.poll() is None:
            line = reader.readline()
            if "Uvicorn running on" in line:
                url = line.split("running on ")[1].split()[0]
    assert url, log_path.read_text()
    return proc, url

