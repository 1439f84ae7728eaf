"""TRL's side of bench/trl.py: GRPOTrainer on the prompts bench/trl.py wrote, timed by phase, one JSON line out.

    .venv-trl/bin/python bench/trl_runner.py SPEC.json

Runs in TRL's own environment (scripts/setup_trl_env.sh), never imports grpo. SPEC holds the model directory,
the weights' precision (`fp32_autocast`: fp32 weights, bf16 autocast; `bf16`: pure bf16 weights; `fp32`: fp32
weights without autocast, TRL at its best on a CPU without bf16 instructions), the sizes,
and the prompts with their gold answers, in the order grpo trains on them. The last stdout line is a JSON
object with per-step wall time, generation and update seconds and tokens, and the process's peak RSS (and
peak GPU memory where SPEC's `device` is cuda: then TRL runs without `use_cpu`). With
`save_dir` in SPEC the trained model and its tokenizer are saved there (bench/learning.py evaluates them).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time

# This file's folder holds bench/trl.py, which would shadow the `trl` package.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def boxed_reward(completions, gold, **kwargs) -> list[float]:
    """1 when the last \\boxed{...} (else the last number) equals the gold answer: what grpo's math reward
    gives on integer answers, without math-verify (not in this environment)."""
    rewards = []
    for completion, answer in zip(completions, gold):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
        numbers = re.findall(r"-?\d+", boxed[-1] if boxed else text)
        rewards.append(1.0 if numbers and numbers[-1] == answer else 0.0)
    return rewards


class TimedGRPOTrainer(GRPOTrainer):
    """Adds up the seconds spent generating (model.generate, decoding) and preparing each generation batch
    (generation, rewards, advantages); the rest of a step is the update (forward, backward, optimizer)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.generate_s = 0.0
        self.prepare_s = 0.0
        self.completion_tokens = 0
        self.prompt_completion_tokens = 0
        self.peak_after_generate = 0

    def _generate(self, prompts):
        start = time.perf_counter()
        try:
            return super()._generate(prompts)
        finally:
            self.generate_s += time.perf_counter() - start
            self.peak_after_generate = peak_rss_bytes()  # tells a generation peak from an update one

    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self.prepare_s += time.perf_counter() - start
        completion = int(output["completion_mask"].sum())
        self.completion_tokens += completion
        self.prompt_completion_tokens += completion + int(output["prompt_mask"].sum())
        return output


class StepTimes(TrainerCallback):
    """Each optimizer step's wall time and its trainer's phase counters, read at the step's end."""

    def __init__(self) -> None:
        self.trainer: TimedGRPOTrainer | None = None
        self.steps: list[dict] = []
        self.last = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now, t = time.perf_counter(), self.trainer
        step_s = now - self.last
        self.steps.append({"step_s": step_s, "generate_s": t.generate_s, "update_s": step_s - t.prepare_s,
                           "completion_tokens": t.completion_tokens,
                           "prompt_completion_tokens": t.prompt_completion_tokens,
                           "peak_rss_after_generate_bytes": t.peak_after_generate,
                           "peak_rss_at_step_end_bytes": peak_rss_bytes()})
        t.generate_s = t.prepare_s = 0.0
        t.completion_tokens = t.prompt_completion_tokens = 0
        self.last = now


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    torch.manual_seed(spec["seed"])
    threads = spec.get("threads")
    if threads:
        torch.set_num_threads(threads)
    if spec["precision"] not in ("fp32_autocast", "bf16", "fp32"):
        raise SystemExit(f"precision {spec['precision']!r}: give fp32_autocast, bf16 or fp32")
    pure_bf16 = spec["precision"] == "bf16"
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"],
                                                 dtype=torch.bfloat16 if pure_bf16 else torch.float32)
    dataset = Dataset.from_list([{"prompt": row["messages"], "gold": row["gold"]} for row in spec["prompts"]])
    completions = spec["problems_per_step"] * spec["samples_per_problem"]
    accumulation = completions // spec["micro_batch_size"]
    with tempfile.TemporaryDirectory(prefix="trl-bench-") as out:
        args = GRPOConfig(
            output_dir=out, max_steps=spec["steps"], seed=spec["seed"], use_cpu=spec.get("device", "cpu") == "cpu",
            # fp32 weights under bf16 autocast, or bf16 (AdamW state in bf16 too) or fp32 weights without it
            bf16=spec["precision"] == "fp32_autocast", fp16=False,
            learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            max_grad_norm=1.0, beta=0.0, num_iterations=1, loss_type="dapo", scale_rewards="group",
            num_generations=spec["samples_per_problem"], generation_batch_size=completions,
            per_device_train_batch_size=spec["micro_batch_size"], gradient_accumulation_steps=accumulation,
            max_completion_length=spec["max_new_tokens"], temperature=spec["temperature"], top_p=1.0, top_k=0,
            gradient_checkpointing=False, shuffle_dataset=False, disable_dropout=True,
            logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
            dataloader_num_workers=0,
        )
        timer = StepTimes()
        trainer = TimedGRPOTrainer(model=model, reward_funcs=boxed_reward, args=args, train_dataset=dataset,
                                   processing_class=tokenizer, callbacks=[timer])
        timer.trainer = trainer
        trainer.train()
        if spec.get("save_dir"):
            trainer.save_model(spec["save_dir"])
            tokenizer.save_pretrained(spec["save_dir"])
    gpu_peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    print(json.dumps({"steps": timer.steps, "peak_rss_bytes": peak_rss_bytes(), "peak_gpu_bytes": gpu_peak,
                      "attn_implementation": model.config._attn_implementation,
                      "activation_checkpointing": bool(getattr(model, "is_activation_checkpointing", False)),
                      "torch_threads": torch.get_num_threads()}), flush=True)


if __name__ == "__main__":
    main()
