"""TRL's GRPOConfig names and grpo's keys for them, so a TRL user's `num_generations=8` is a one-line error that
names grpo's key (and, where the values say the same, the override to write) instead of a list of sections.
docs/coming-from-trl.md's names table says the same for people; a test keeps the two in step. The answers'
machinery is grpo.config.foreign_names, shared with verl's names."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from grpo.config.foreign_names import (
    Beside,
    ForeignName,
    NameTable,
    as_yaml,
    integer,
    name_error,
    names_error,
    number,
)

TrlName = ForeignName  # the tables below read as TRL's


def _steps(ratio: Any, given: Mapping[str, Any]) -> str | None:
    """warmup_ratio as grpo's count of steps, where it is one: 0 of anything, or ceil(ratio x max_steps) when
    max_steps is given beside it, as transformers rounds it."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
        return None
    total = given.get("max_steps")
    if ratio == 0:
        return "actor.warmup_steps=0"
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return f"actor.warmup_steps={math.ceil(ratio * total)}"
    return None


def _every(key: str) -> Beside:
    """save_steps or eval_steps as grpo's `key`: a whole number of steps as it is, and a fraction of training (a
    value below 1) as ceil(fraction x max_steps) when max_steps is given beside it, as transformers rounds it; other
    values (0, negative) say nothing grpo's key can."""
    def steps(value: Any, given: Mapping[str, Any]) -> str | None:
        count, total = integer(value), integer(given.get("max_steps"))
        if count is not None and count >= 1:
            return f"{key}={count}"
        fraction = number(value)
        if fraction is not None and 0 < fraction < 1 and total is not None and total > 0:
            return f"{key}={math.ceil(fraction * total)}"
        return None
    return steps


def _trackers(value: Any, given: Mapping[str, Any]) -> str | None:
    """report_to as grpo's logging keys, where they say the same: none (or no tracker) and tensorboard alone."""
    names = value if isinstance(value, list) else [value]
    if names in ([], [None], ["none"]):
        return "logging.tensorboard=false"
    if names == ["tensorboard"]:
        return "logging.tensorboard=true"
    return None


def _clip_low(value: Any, given: Mapping[str, Any]) -> str | None:
    """epsilon as grpo's clip_low where epsilon_high is given beside it (alone, TRL's epsilon_high follows it)."""
    return f"algo.clip_low={as_yaml(value)}" if number(value) is not None and "epsilon_high" in given else None


def _min_lr(value: Any, given: Mapping[str, Any]) -> str | None:
    """lr_scheduler_kwargs as grpo's floor of the decay, where it is transformers' min_lr_rate alone (a ratio)."""
    if isinstance(value, dict) and set(value) == {"min_lr_rate"} and number(value["min_lr_rate"]) is not None:
        return f"actor.min_lr_ratio={as_yaml(value['min_lr_rate'])}"
    return None


def _modules(value: Any, given: Mapping[str, Any]) -> str | None:
    """lora_target_modules as grpo's, unless a name holds a comma (no module's name: the shell's `"q_proj", "v_proj"`
    passes the word `q_proj,`)."""
    names = value if isinstance(value, list) else [value]
    if not names or any("," in str(name) for name in names):
        return None
    return f"model.lora.target_modules={as_yaml(value)}"


def _stray_commas(value: Any) -> str | None:
    stray = [str(name) for name in (value if isinstance(value, list) else [value]) if "," in str(name)]
    if not stray:
        return None
    return (f"{', '.join(repr(name) for name in stray)} names no module (the shell keeps the comma of "
            f"\"q_proj\", \"v_proj\"): TRL's LoRA skipped it without a word; write the names without commas")


def _model_init(value: Any, given: Mapping[str, Any]) -> str | None:
    """model_init_kwargs as grpo's model keys, where each of its entries is one: its dtype and attention."""
    if not isinstance(value, dict) or not value:
        return None
    written = []
    for key, given_value in value.items():
        if key in ("dtype", "torch_dtype") and given_value in _DTYPE:
            written.append(f"model.dtype={_DTYPE[given_value]}")
        elif key == "attn_implementation" and given_value in _ATTENTION:
            written.append(f"model.attn_implementation={given_value}")
        else:
            return None
    return " ".join(written)


_STEP = "a step is rollout.problems_per_step prompts x rollout.samples_per_problem; see docs/coming-from-trl.md"
_LOSS = {"dapo": "token_mean", "bnpo": "token_mean", "grpo": "seq_mean", "dr_grpo": "seq_sum_norm"}
_SCALE = {"group": "group", "batch": "batch", "none": "none", True: "group", False: "none"}
_SCHEDULE = {"linear": "linear", "cosine": "cosine", "constant": "constant", "constant_with_warmup": "constant",
             "cosine_with_min_lr": "cosine"}
_DTYPE = {"bfloat16": "bfloat16", "float32": "float32", "float16": "float16", "auto": "auto"}
_ATTENTION = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash_attention_2"}
_TRACKIO = ("trackio's, which grpo does not log to: TensorBoard is logging.tensorboard, W&B "
            "logging.wandb_project=PROJECT")
_QUANTIZED = "grpo trains unquantised weights"
_LORA = "LoRA is on when model.lora.rank > 0"
_ENGINE = {True: "vllm", False: "embedded"}
_SAMPLING = "grpo samples with rollout.temperature and rollout.top_p alone"
# TrainingArguments' settings that change nothing grpo does (the hub, distributed data loading, log levels).
_NO_MEANING = "it changes nothing grpo does: leave it out"

TRL_NAMES: dict[str, TrlName] = {
    "output_dir": TrlName(("run_dir",)),
    "reward_funcs": TrlName(("task.reward",), "grpo's reward names (math) or your functions' import paths "
                            "(module:function)", carries=False),
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
    "top_k": TrlName((), _SAMPLING),
    "min_p": TrlName((), _SAMPLING),
    "repetition_penalty": TrlName((), _SAMPLING),
    "generation_kwargs": TrlName(("rollout.temperature", "rollout.top_p", "rollout.max_new_tokens"), "its "
                                 f"temperature, top_p and max_new_tokens; for top_k, min_p, num_beams and the rest "
                                 f"none: {_SAMPLING}", carries=False),
    "beta": TrlName(("algo.kl_coef",)),
    "use_bias_correction_kl": TrlName((), "grpo's KL penalty is TRL's with use_bias_correction_kl=False"),
    "epsilon": TrlName(("algo.clip_low", "algo.clip_high"), "TRL's epsilon_high follows epsilon: set both",
                       beside=_clip_low),
    "epsilon_high": TrlName(("algo.clip_high",)),
    "loss_type": TrlName(("algo.loss_agg",), "dapo and bnpo: token_mean; grpo: seq_mean; dr_grpo: seq_sum_norm; "
                         "none for cispo and sapo, losses grpo has not", _LOSS),
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
    "lr_scheduler_type": TrlName(("actor.schedule",), "constant, linear or cosine; warm-up: actor.warmup_steps; "
                                 "cosine_with_min_lr: cosine with actor.min_lr_ratio", _SCHEDULE),
    "lr_scheduler_kwargs": TrlName(("actor.min_lr_ratio",), "its min_lr_rate; none for the others (an absolute "
                                   "min_lr)", beside=_min_lr),
    "warmup_steps": TrlName(("actor.warmup_steps",), "a number of steps, not a fraction of the run", carries=False),
    "max_grad_norm": TrlName(("actor.max_grad_norm",)),
    "weight_decay": TrlName(("actor.weight_decay",)),
    "adam_beta1": TrlName(("actor.betas",), "both betas as a list: actor.betas=[0.9,0.999]", carries=False),
    "adam_beta2": TrlName(("actor.betas",), "both betas as a list: actor.betas=[0.9,0.999]", carries=False),
    "adam_epsilon": TrlName(("actor.eps",)),
    "num_train_epochs": TrlName(("train.epochs",)),
    "max_steps": TrlName(("train.steps",), "TRL's -1: the epochs decide, grpo's null", {-1: None},
                         only_values=False),
    "seed": TrlName(("train.seed",)),
    "save_steps": TrlName(("checkpoint.every_steps",), "every N steps; TRL's fraction below 1 is of max_steps",
                          beside=_every("checkpoint.every_steps")),
    "save_total_limit": TrlName(("checkpoint.keep_last",)),
    "eval_strategy": TrlName(("eval.every_steps", "eval.after_training"), "every N steps; 0: none",
                             {"no": 0}),
    "eval_steps": TrlName(("eval.every_steps",), "every N steps; TRL's fraction below 1 is of max_steps",
                          beside=_every("eval.every_steps")),
    "eval_on_start": TrlName(("eval.before_training",)),
    "report_to": TrlName(("logging.tensorboard", "logging.wandb_project"), "none: logging.tensorboard=false; "
                         "tensorboard: logging.tensorboard=true; wandb: logging.wandb_project=PROJECT; grpo logs to "
                         "none of the others (trackio, mlflow, comet_ml, ...)", beside=_trackers),
    "project": TrlName((), _TRACKIO),
    "trackio_space_id": TrlName((), _TRACKIO),
    "logging_steps": TrlName((), "grpo logs every step"),
    "log_completions": TrlName(("logging.samples_per_step",), "how many completions a step writes to samples.jsonl",
                               carries=False),
    "num_completions_to_print": TrlName(("logging.samples_per_step",)),
    "use_vllm": TrlName(("rollout.engine",), "", _ENGINE),
    "vllm_mode": TrlName(("rollout.engine", "rollout.server.urls"), "colocate: a vLLM grpo starts itself; server: "
                         "rollout.server.urls=[http://HOST:PORT] attaches to yours", {"colocate": "vllm"}),
    "vllm_server_base_url": TrlName(("rollout.server.urls",), "a list: rollout.server.urls=[http://HOST:PORT]",
                                    carries=False),
    "gradient_checkpointing": TrlName(("model.gradient_checkpointing",)),
    "bf16": TrlName(("model.dtype",), "auto, bfloat16 or float32", carries=False),
    "model_init_kwargs": TrlName(("model.dtype", "model.attn_implementation"), "its dtype and attn_implementation; "
                                 "no key for its other entries", beside=_model_init),
    "peft_config": TrlName(("model.lora.rank", "model.lora.alpha", "model.lora.target_modules"), carries=False),
    "quantization_config": TrlName((), _QUANTIZED),
    "chat_template_kwargs": TrlName(("task.chat_template_kwargs",)),
    "use_liger_kernel": TrlName((), "fused kernels for speed, which grpo has not: leave it out"),
    "eval_accumulation_steps": TrlName((), "grpo's evaluation scores answers, keeping no logits to gather: leave "
                                           "it out"),
    **dict.fromkeys(("fp16_full_eval", "bf16_full_eval"), TrlName((), "grpo evaluates with the weights it trains, in "
                                                                     "model.dtype: leave it out")),
    "vllm_gpu_memory_utilization": TrlName(("rollout.server.memory_fraction",)),
    "vllm_max_model_length": TrlName(("rollout.server.extra_args",), "vLLM's --max-model-len",
                                     form="rollout.server.extra_args=[--max-model-len,{}]"),
    "vllm_enable_sleep_mode": TrlName((), "grpo's vLLM is a server beside the trainer, not in its process: leave it "
                                          "out"),
    "disable_dropout": TrlName((), "grpo trains with the model's own dropout (0 in most causal LMs' configs); "
                                   "model.lora.dropout is the adapters'"),
    "save_only_model": TrlName((), "grpo's checkpoints keep the optimizer state, which resuming needs; "
                                   "checkpoint.keep_last bounds the disk"),
    "optim": TrlName((), "grpo's optimizer is torch's AdamW: leave it out"),
    "save_strategy": TrlName((), "grpo saves every checkpoint.every_steps steps (and checkpoint.every_minutes), as "
                             "steps does; epoch: never once an epoch: set checkpoint.every_steps to an epoch's steps",
                             value_keys={"epoch": ("checkpoint.every_steps",)}),
    "top_entropy_quantile": TrlName((), "grpo's loss takes every completion token, TRL's 1.0"),
    "cast_lm_head_to_fp32": TrlName((), "grpo computes the head in model.dtype"),
    **dict.fromkeys(("sapo_temperature_pos", "sapo_temperature_neg"), TrlName((), "SAPO's soft gate, a loss grpo "
                                                                                  "has not")),
    **dict.fromkeys(("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                     "vllm_importance_sampling_cap", "vllm_importance_sampling_clip_max",
                     "vllm_importance_sampling_clip_min"),
                    TrlName((), "TRL's correction of vLLM's log-probs against the trainer's (on by default), which "
                                "grpo has not: grpo recomputes the old log-probs with the trainer "
                                "(algo.recompute_old_logprobs)")),
    "run_name": TrlName(("name",)),
    **dict.fromkeys(("logging_strategy", "hub_model_id", "push_to_hub", "hub_strategy", "do_eval",
                     "log_level", "logging_first_step", "per_device_eval_batch_size", "gradient_checkpointing_kwargs",
                     "tf32", "dataloader_num_workers", "remove_unused_columns"), TrlName((), _NO_MEANING)),
}

# Names TRL scripts use beyond GRPOConfig: TrlParser recipes' ModelConfig and ScriptArguments, GRPOConfig fields
# of older TRL releases, and open-r1's GRPOConfig (docs/coming-from-trl.md's second names table).
SCRIPT_NAMES: dict[str, TrlName] = {
    "model_name_or_path": TrlName(("model.name",)),
    "model_revision": TrlName((), "grpo loads a model's default revision: give a local directory for another"),
    "dtype": TrlName(("model.dtype",), "", _DTYPE),
    "torch_dtype": TrlName(("model.dtype",), "", _DTYPE),
    "attn_implementation": TrlName(("model.attn_implementation",), "", _ATTENTION),
    "use_peft": TrlName(("model.lora.rank",), f"{_LORA}; TRL's lora_r default: model.lora.rank=16", carries=False),
    "lora_r": TrlName(("model.lora.rank",)),
    "lora_alpha": TrlName(("model.lora.alpha",)),
    "lora_dropout": TrlName(("model.lora.dropout",), "TRL's default 0.05, grpo's 0"),
    "lora_target_modules": TrlName(("model.lora.target_modules",), "a list; TRL's default (PEFT's per model, e.g. "
                                   "q_proj and v_proj) is not grpo's [all-linear]", beside=_modules,
                                   remark=_stray_commas),
    "load_in_4bit": TrlName((), _QUANTIZED),
    "load_in_8bit": TrlName((), _QUANTIZED),
    "dataset_name": TrlName(("task.path",), "task.name=dataset task.path=hub:ORG/NAME (or a saved dataset's folder)",
                            carries=False),
    "dataset_config": TrlName(("task.path",), "task.path=hub:ORG/NAME:CONFIG", carries=False),
    "dataset_configs": TrlName(("task.path",), "open-r1's: the dataset's configuration, task.path=hub:ORG/NAME:CONFIG",
                               carries=False),
    "dataset_prompt_column": TrlName(("task.prompt_column",), "open-r1's: the column put after system_prompt as the "
                                     "user's message"),
    "dataset_train_split": TrlName(("task.train_split",)),
    "dataset_test_split": TrlName(("task.test_split",)),
    "max_prompt_length": TrlName(("task.max_prompt_tokens",), "TRL 0.14 to 0.2x cut a longer prompt to its last N "
                                 "tokens without a word; grpo refuses it at load, or with task.truncate_prompts=left "
                                 "cuts it as TRL did"),
    "warmup_ratio": TrlName(("actor.warmup_steps",), "a number of steps: the ratio x train.steps, rounded up",
                            beside=_steps),
    "vllm_device": TrlName((), "grpo places the vLLM server it starts itself; rollout.server.urls attaches to yours"),
    "overwrite_output_dir": TrlName((), "a run directory resumes; another run_dir starts afresh"),
    "system_prompt": TrlName(("task.system_prompt",), "before each text prompt; open-r1 puts it before each problem "
                             "as a system message: give the prompt column as those messages, or text prompts with "
                             "task.instruction=''"),
    "chat_template": TrlName(("task.chat_template",)),
    "wandb_project": TrlName(("logging.wandb_project",)),
    "wandb_entity": TrlName((), "open-r1's: W&B's team", remark=lambda value: "wandb reads WANDB_ENTITY from the "
                            "environment"),
    "hub_model_revision": TrlName((), "open-r1's: the hub branch its checkpoints are pushed to"),
    "callbacks": TrlName((), "open-r1's: push_to_hub_revision pushes each checkpoint to the hub"),
    "benchmarks": TrlName((), "open-r1's: lighteval benchmarks run on each pushed checkpoint; grpo eval scores one"),
    **dict.fromkeys(("code_language", "code_eval_test_batch_size"), TrlName((), "open-r1's code reward's: the reward "
                                                                             "function's own setting")),
    "reward_model_name_or_path": TrlName(("task.reward",), "grpo takes reward functions, not reward models: load the "
                                         "model in a function(prompts, completions, **kwargs) that returns one score "
                                         "per completion and give its import path (module:function)", carries=False),
    "vllm_sampling_params": TrlName(("rollout.temperature", "rollout.top_p"), "a vLLM SamplingParams: its "
                                    f"temperature and top_p; for min_p, top_k, seed and stop none: {_SAMPLING}",
                                    carries=False),
    "max_seq_length": TrlName((), "grpo reads the model's context from its config; task.max_prompt_tokens and "
                                  "rollout.max_new_tokens bound a sequence"),
    "fast_inference": TrlName(("rollout.engine",), "", _ENGINE),
    "gpu_memory_utilization": TrlName(("rollout.server.memory_fraction",)),
    "use_gradient_checkpointing": TrlName(("model.gradient_checkpointing",), "",
                                          {True: True, "unsloth": True, False: False}),
    "max_lora_rank": TrlName(("model.lora.rank",), "the largest adapter rank Unsloth's vLLM serves; grpo's serves "
                             "model.lora.rank's adapters", carries=False),
    "random_state": TrlName(("train.seed",), "the adapters' initialisation seed in Unsloth's get_peft_model; "
                            "train.seed seeds the whole run", carries=False),
}
ALL_NAMES: dict[str, TrlName] = {**TRL_NAMES, **SCRIPT_NAMES}
TRL = NameTable("TRL", "docs/coming-from-trl.md", ALL_NAMES, stranger="not TRL's either")


def trl_name_error(key: str, name: str, value: Any) -> str | None:
    """The error for the unknown key `key` (its last part `name`, set to `value`) when it is TRL's name; None when
    it is not one."""
    return name_error(TRL, key, name, value)


def trl_names_error(where: str, given: Mapping[str, Any]) -> str | None:
    """One error for several unknown keys of `where` (a TRL recipe given as a grpo config, or TRL settings as
    overrides) when any is TRL's name: every one translated at once, not one error per start. None when none is."""
    return names_error(TRL, where, given)
