"""TRL's GRPOConfig names and grpo's keys for them, so a TRL user's `num_generations=8` is a one-line error that
names grpo's key (and, where the values say the same, the override to write) instead of a list of sections.
docs/coming-from-trl.md's names table says the same for people; a test keeps the two in step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass(frozen=True)
class TrlName:
    keys: tuple[str, ...]  # grpo's keys for it; () where grpo has none
    note: str = ""  # what differs, or what grpo does instead
    values: Mapping[Any, str] = field(default_factory=dict)  # TRL's values as grpo's, where the words differ
    carries: bool = True  # TRL's value (through `values`) means the same as grpo's first key: the override is said


_STEP = "a step is rollout.problems_per_step prompts x rollout.samples_per_problem; see docs/coming-from-trl.md"
_LOSS = {"dapo": "token_mean", "bnpo": "token_mean", "grpo": "seq_mean", "dr_grpo": "seq_sum_norm"}
_SCALE = {"group": "group", "batch": "batch", "none": "none", True: "group", False: "none"}

TRL_NAMES: dict[str, TrlName] = {
    "output_dir": TrlName(("run_dir",)),
    "reward_funcs": TrlName(("task.reward",)),
    "reward_weights": TrlName(("task.reward_weights",)),
    "num_generations": TrlName(("rollout.samples_per_problem",)),
    "per_device_train_batch_size": TrlName(("rollout.problems_per_step", "algo.micro_batch_size"),
                                           f"{_STEP}; algo.micro_batch_size is the micro-batch", carries=False),
    "gradient_accumulation_steps": TrlName(("rollout.problems_per_step",), _STEP, carries=False),
    "generation_batch_size": TrlName(("rollout.problems_per_step",), _STEP, carries=False),
    "steps_per_generation": TrlName(("rollout.problems_per_step",), _STEP, carries=False),
    "max_completion_length": TrlName(("rollout.max_new_tokens",)),
    "temperature": TrlName(("rollout.temperature",)),
    "top_p": TrlName(("rollout.top_p",)),
    "top_k": TrlName((), "grpo samples with rollout.temperature and rollout.top_p alone"),
    "min_p": TrlName((), "grpo samples with rollout.temperature and rollout.top_p alone"),
    "repetition_penalty": TrlName((), "grpo samples with rollout.temperature and rollout.top_p alone"),
    "beta": TrlName(("algo.kl_coef",)),
    "use_bias_correction_kl": TrlName((), "grpo's KL penalty is TRL's with use_bias_correction_kl=False"),
    "epsilon": TrlName(("algo.clip_low", "algo.clip_high"), "TRL's epsilon_high follows epsilon: set both",
                       carries=False),
    "epsilon_high": TrlName(("algo.clip_high",)),
    "loss_type": TrlName(("algo.loss_agg",), "dapo and bnpo: token_mean; grpo: seq_mean; dr_grpo: seq_sum_norm",
                         _LOSS),
    "importance_sampling_level": TrlName(("algo.ratio_level",), "sequence is GSPO: with algo.clip_low=3e-4 "
                                         "algo.clip_high=4e-4 algo.loss_agg=seq_mean, as TRL recommends",
                                         {"token": "token", "sequence": "sequence"}),
    "scale_rewards": TrlName(("algo.advantage_norm", "algo.advantage_std", "algo.advantage_eps"), "TRL's standard "
                             "deviation: also algo.advantage_std=sample algo.advantage_eps=1e-4", _SCALE),
    "num_iterations": TrlName(("algo.updates_per_batch",)),
    "mask_truncated_completions": TrlName(("algo.mask_truncated",), "advantages computed before the masking, as "
                                          "TRL's; under seq_mean and seq_sum_norm the masked completions leave the "
                                          "normaliser, unlike TRL's grpo and dr_grpo"),
    "learning_rate": TrlName(("actor.lr",)),
    "lr_scheduler_type": TrlName(("actor.schedule",), "constant, linear or cosine; warm-up: actor.warmup_steps",
                                 carries=False),
    "warmup_steps": TrlName(("actor.warmup_steps",), "a number of steps, not a fraction of the run", carries=False),
    "max_grad_norm": TrlName(("actor.max_grad_norm",)),
    "weight_decay": TrlName(("actor.weight_decay",)),
    "adam_beta1": TrlName(("actor.betas",), "both betas as a list: actor.betas=[0.9,0.999]", carries=False),
    "adam_beta2": TrlName(("actor.betas",), "both betas as a list: actor.betas=[0.9,0.999]", carries=False),
    "adam_epsilon": TrlName(("actor.eps",)),
    "num_train_epochs": TrlName(("train.epochs",)),
    "max_steps": TrlName(("train.steps",)),
    "seed": TrlName(("train.seed",)),
    "save_steps": TrlName(("checkpoint.every_steps",)),
    "save_total_limit": TrlName(("checkpoint.keep_last",)),
    "eval_strategy": TrlName(("eval.every_steps", "eval.after_training"), "every N steps; 0: none",
                             carries=False),
    "eval_steps": TrlName(("eval.every_steps",)),
    "eval_on_start": TrlName(("eval.before_training",)),
    "report_to": TrlName(("logging.tensorboard", "logging.wandb_project"), "true / a W&B project name",
                         carries=False),
    "logging_steps": TrlName((), "grpo logs every step"),
    "log_completions": TrlName(("logging.samples_per_step",), "how many completions a step writes to samples.jsonl",
                               carries=False),
    "num_completions_to_print": TrlName(("logging.samples_per_step",)),
    "use_vllm": TrlName(("rollout.engine",), "rollout.engine=vllm", carries=False),
    "vllm_mode": TrlName(("rollout.engine",), "rollout.engine=vllm starts a server; rollout.server.urls attaches",
                         carries=False),
    "vllm_server_base_url": TrlName(("rollout.server.urls",), "a list: rollout.server.urls=[http://HOST:PORT]",
                                    carries=False),
    "gradient_checkpointing": TrlName(("model.gradient_checkpointing",)),
    "bf16": TrlName(("model.dtype",), "auto, bfloat16 or float32", carries=False),
    "model_init_kwargs": TrlName(("model.dtype", "model.attn_implementation"), carries=False),
    "peft_config": TrlName(("model.lora.rank", "model.lora.alpha", "model.lora.target_modules"), carries=False),
}


def _as_yaml(value: Any) -> str:
    """`value` as an override writes it: a list without spaces, so that it stays one shell word."""
    if isinstance(value, list):
        return "[" + ",".join(map(_as_yaml, value)) + "]"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("\n...\n").strip()


def trl_name_error(key: str, name: str, value: Any) -> str | None:
    """The error for the unknown key `key` (its last part `name`, set to `value`) when it is TRL's name; None when
    it is not one."""
    entry = TRL_NAMES.get(name)
    if entry is None:
        return None
    if not entry.keys:
        return f"{key} is TRL's name; grpo has no such key: {entry.note}"
    grpo = " and ".join(entry.keys)
    message = f"{key} is TRL's name; grpo's is {grpo}"
    if entry.carries and (not entry.values or _known(value, entry.values)):
        message += f": {entry.keys[0]}={_as_yaml(entry.values.get(value, value) if entry.values else value)}"
    return message + (f" ({entry.note})" if entry.note else "")


def _known(value: Any, values: Mapping[Any, str]) -> bool:
    return not isinstance(value, (list, dict)) and value in values
