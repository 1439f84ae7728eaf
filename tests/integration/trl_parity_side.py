"""TRL's side of the parity test (tests/integration/test_trl_parity.py), run with TRL's own Python
(scripts/setup_trl_env.sh): nothing from grpo is imported here.

    python trl_parity_side.py SPEC.json

SPEC names the model directory, the batch file (prompt and completion ids, masks, rewards, old,
reference and behaviour log-probs) and the cases. For each case a `GRPOTrainer` is built with that
case's `GRPOConfig` arguments and:
- advantages: the batch's rewards go through TRL's own `_generate_and_score_completions`, the rollout
  replaced by TRL's `rollout_func` hook returning the batch's ids, the rewards read from a reward
  function by row;
- loss: the batch goes through TRL's `_compute_loss` in training mode, then `backward()`.
The results (advantages, loss, every parameter's gradient) are saved with torch.save to SPEC's `out`.
"""

from __future__ import annotations

import json
import sys

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer


def trainer_for(spec: dict, batch: dict, args: dict, rollout_func=None) -> GRPOTrainer:
    rows, group = batch["completion_ids"].shape[0], spec["group_size"]
    rewards = batch["rewards"].tolist()

    def reward_by_row(completions, row, **kwargs):
        return [rewards[r] for r in row]

    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    config = GRPOConfig(
        output_dir=spec["out_dir"], per_device_train_batch_size=rows, num_generations=group,
        max_completion_length=spec["max_completion_length"], report_to="none", use_cpu=True, bf16=False,
        **args,
    )
    data = Dataset.from_list([{"prompt": "p", "row": r} for r in range(rows)])
    return GRPOTrainer(model=model, reward_funcs=reward_by_row, args=config, train_dataset=data,
                       processing_class=tokenizer, rollout_func=rollout_func)


def unpadded(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[m.bool()].tolist() for row, m in zip(ids, mask)]


def trl_advantages(spec: dict, batch: dict, args: dict) -> torch.Tensor:
    prompts = unpadded(batch["prompt_ids"], batch["prompt_mask"])
    completions = unpadded(batch["completion_ids"], batch["completion_mask"])
    logprobs = [row[: len(c)].tolist() for row, c in zip(batch["old_logprobs"], completions)]

    def fixed_rollout(prompt_list, trainer):
        return {"prompt_ids": prompts, "completion_ids": completions, "logprobs": logprobs}

    trainer = trainer_for(spec, batch, args, fixed_rollout)
    inputs = [{"prompt": "p", "row": r} for r in range(len(completions))]
    return trainer._generate_and_score_completions(inputs)["advantages"].detach().clone()


def trl_loss(spec: dict, batch: dict, case: dict) -> tuple[float, dict[str, torch.Tensor]]:
    trainer = trainer_for(spec, batch, case["args"])
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.training_step; one window here
    inputs = {
        "prompt_ids": batch["prompt_ids"], "prompt_mask": batch["prompt_mask"],
        "completion_ids": batch["completion_ids"], "completion_mask": batch["completion_mask"],
        "advantages": batch["advantages"], "old_per_token_logps": batch["old_logprobs"],
        "num_items_in_batch": batch["completion_mask"].sum(),
    }
    if case["args"].get("beta", 0.0):
        inputs["ref_per_token_logps"] = batch["ref_logprobs"]
    if case.get("importance_sampling"):
        # TRL applies its truncated importance-sampling ratio (behaviour -> rollout policy) only on its vLLM
        # path; its loss code is the same, so the flag is set on the built trainer.
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
        inputs["importance_sampling_ratio"] = batch["importance_weights"]
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.item(), grads


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    batch = torch.load(spec["batch"])
    torch.manual_seed(0)
    results = {"advantages": {}, "losses": {}}
    for norm, args in spec["advantage_cases"].items():
        results["advantages"][norm] = trl_advantages(spec, batch, args)
    for case in spec["loss_cases"]:
        results["losses"][case["name"]] = trl_loss(spec, batch, case)
    torch.save(results, spec["out"])


if __name__ == "__main__":
    main()
