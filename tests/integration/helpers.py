from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from grpo.config import RunConfig, load_config
from grpo.entry import hooks_for
from grpo.hooks import StepHooks
from grpo.train.loop import TrainingLoop

NOISY = ("time", "time/", "perf/", "memory/")


def make_loop(cfg: RunConfig, *hooks: StepHooks, **kwargs) -> TrainingLoop:
    """The loop as grpo.entry builds it (with the hooks `testing.faults` asks for), plus a test's own `hooks`."""
    return TrainingLoop(cfg, hooks=[*hooks_for(cfg), *hooks], **kwargs)


class SignalAt(StepHooks):
    """SIGTERM to this process, as the kernel would deliver it, as `step` begins its `phase`: "rollout"
    (generation then sees it) or "update" (the first micro-batch then sees it)."""

    def __init__(self, step: int, phase: str) -> None:
        self.step, self.phase = step, phase

    def step_start(self, step: int) -> None:
        if self.phase == "rollout" and step == self.step:
            signal.raise_signal(signal.SIGTERM)

    @contextmanager
    def around_update(self, step: int) -> Iterator[None]:
        if self.phase == "update" and step == self.step:
            signal.raise_signal(signal.SIGTERM)
        yield


def run_tiny(overrides: list[str], *hooks: StepHooks) -> TrainingLoop:
    trainer = make_loop(load_config("tiny", overrides), *hooks)
    trainer.train()
    return trainer


def metric_lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def abandoned_lines(run_dir: Path) -> list[dict]:
    """The metrics lines of steps a rollback or a resume ran again, moved aside from metrics.jsonl."""
    return [json.loads(line) for line in (Path(run_dir) / "metrics.abandoned.jsonl").read_text().splitlines()]


def deterministic(line: dict) -> dict:
    return {k: v for k, v in line.items() if not k.startswith(NOISY)}


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def max_param_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


class ServerKilledDuringEvaluations(StepHooks):
    """The server backend wrapped by grpo.faults, so that the run's held-out evaluations can be disturbed
    (`evaluate` below, patched in place of the loop's)."""

    def wrap_backend(self, backend):
        from grpo.faults import ServerFaults

        self.server = ServerFaults(backend)
        return self.server

    def built(self, run) -> None:
        self.server.engine = run.server_engine


def disturb_each_evaluation(monkeypatch) -> tuple[StepHooks, list[tuple[list, list, dict, dict]]]:
    """Kill the server as each held-out evaluation's requests go out, then evaluate the same weights again
    undisturbed. -> the hooks to run with, and per evaluation (its answers, the clean answers, its result,
    the clean result)."""
    from grpo.evaluate import evaluate

    hooks, compared = ServerKilledDuringEvaluations(), []

    def disturbed(engine, *args, **kwargs):
        with hooks.server.during({"kill_server"}):
            result = evaluate(engine, *args, keep_answers=True, **kwargs)
        clean = evaluate(engine, *args, keep_answers=True, **kwargs)
        compared.append((result.pop("answers"), clean.pop("answers"), result, clean))
        return result

    monkeypatch.setattr("grpo.train.evaluation.evaluate", disturbed)
    return hooks, compared


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



def assert_killed_in_the_sync_after_step_2(run_dir: Path, name: str) -> None:
    """A run of 3+ steps with testing.faults.kill_server_in_sync_at_steps=[2]: the server SIGKILLed as the sync
    after step 2's update asked it to reload; restarted, loaded with step 2's weights and probed before step 3
    generated; nothing of the dead incarnation trained on after it died."""
    from grpo.rundir.files import JsonlLog

    events = JsonlLog(run_dir / "events.jsonl").read()[0]
    (injected,) = [e for e in events if e["kind"] == "fault_injected"]
    assert injected["step"] == 2 and injected["evidence"]["incarnation"] == 1
    (failed,) = [e for e in events if e["kind"] == "server_failed"]
    assert failed["evidence"]["exit"] == "killed by SIGKILL" and failed["evidence"]["incarnation"] == 1
    lines = {line["step"]: line for line in metric_lines(run_dir)}
    assert lines[1]["rollout/sources"] == lines[2]["rollout/sources"] == [f"{name}#1"]  # generated before the kill
    assert all(line["rollout/sources"] == [f"{name}#2"] for step, line in lines.items() if step > 2)
    assert all(line["update/applied"] == 1 for line in lines.values())
    # Step 2's sync ended verified on the restarted server, and so did every sync after it.
    assert all(line["sync/probe_diff"] <= line["sync/tolerance"] for line in lines.values())
    assert lines[2]["policy/version"] == 2 and sorted(lines) == list(range(1, len(lines) + 1))
