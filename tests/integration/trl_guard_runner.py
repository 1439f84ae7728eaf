"""TRL's side of tests/integration/test_trl_guard.py: a real GRPOTrainer run with grpo's guard callback,
in TRL's own environment (scripts/setup_trl_env.sh builds .venv-trl), offline, on the tiny model the test
wrote.

    .venv-trl/bin/python tests/integration/trl_guard_runner.py SPEC.json

SPEC: model_dir, output_dir, steps, save_steps, seed, guard (add the callback), logging_steps (default 1),
resume (a checkpoint to resume from), reward: "varied" (every group's rewards differ: the mean character code
of a completion), "constant" (1.0 for every completion: no signal from the first step), "dies" ("varied"
until step die_at, then exactly 0 for every completion, as a dead reward server gives), or "none" ("varied"
until die_at, then None for every completion, as a reward function that fails without raising). The last stdout line is a JSON object: the steps trained, the steps logged, the checkpoints
on disk, and the guard's report (null when it did not trip).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo.integrations.trl import REPORT, GrpoGuardCallback  # noqa: E402


def text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def varied(completions, **kwargs) -> list[float]:
    """The mean character code over 128: all but never the same for two of a random model's completions."""
    return [sum(map(ord, text(c))) / (128 * len(text(c))) if text(c) else 0.0 for c in completions]


def constant(completions, **kwargs) -> list[float]:
    return [1.0] * len(completions)


def dying(die_at: int):
    def reward(completions, trainer_state, **kwargs) -> list[float]:
        step = trainer_state.global_step + 1  # the step these completions train
        return [0.0] * len(completions) if step >= die_at else varied(completions)
    return reward


def returning_none(die_at: int):
    def reward(completions, trainer_state, **kwargs) -> list[float | None]:
        step = trainer_state.global_step + 1
        return [None] * len(completions) if step >= die_at else varied(completions)
    return reward


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    torch.manual_seed(spec["seed"])
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"])
    prompts = [{"prompt": [{"role": "user", "content": f"{i % 10}+{i % 7}="}]} for i in range(64)]
    reward = {"varied": varied, "constant": constant}.get(spec["reward"]) or (
        returning_none if spec["reward"] == "none" else dying)(spec["die_at"])
    args = GRPOConfig(
        output_dir=spec["output_dir"], max_steps=spec["steps"], seed=spec["seed"], use_cpu=True,
        learning_rate=1e-4, logging_steps=spec.get("logging_steps", 1), save_steps=spec["save_steps"], report_to="none",
        disable_tqdm=spec.get("disable_tqdm", True),
        num_generations=4, per_device_train_batch_size=8, max_completion_length=8, temperature=1.0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(prompts),
                          processing_class=tokenizer, callbacks=[GrpoGuardCallback()] if spec["guard"] else [])
    trainer.train(resume_from_checkpoint=spec.get("resume"))
    out = Path(spec["output_dir"])
    report = out / REPORT
    print(json.dumps({
        "global_step": trainer.state.global_step,
        "logged_steps": [e["step"] for e in trainer.state.log_history if "reward" in e],
        "rewards": [e["reward"] for e in trainer.state.log_history if "reward" in e],
        "checkpoints": sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")),
        "report": json.loads(report.read_text()) if report.is_file() else None,
    }), flush=True)


if __name__ == "__main__":
    main()
