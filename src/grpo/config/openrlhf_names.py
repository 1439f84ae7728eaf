"""OpenRLHF's `train_ppo_ray` flags and grpo's keys for them, so an OpenRLHF launch script's flags given to grpo,
as `--flag value` words (grpo.config.foreign_names.flag_overrides reads them as `flag=value`) or as `flag=value`
overrides, are answered
in one message: each flag's grpo override where the meaning is the same, grpo's keys where it must be set by hand,
or what grpo does instead. Each equivalence is checked against OpenRLHF's code (openrlhf/cli/train_ppo_ray.py's
flags, the flat ones of 2024 to March 2026; ppo_utils/experience_maker.py's advantages; models/utils.py's KL
estimators; ray/ppo_actor.py's KL loss and schedule; ppo_trainer.py's steps); where they differ, the table says
there is no exact equivalent rather than map it. docs/coming-from-openrlhf.md's names tables say the same for
people; a test keeps them in step."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo.config.foreign_names import (
    Beside,
    ForeignName,
    NameTable,
    as_yaml,
    integer,
    most_names_error,
    number,
)
from grpo.config.trl_names import TRL

# OpenRLHF's defaults, where a flag's meaning depends on another the script leaves out.
_DEFAULTS = {"init_kl_coef": 0.01, "train_batch_size": 128, "rollout_batch_size": 1024, "n_samples_per_prompt": 1,
             "max_epochs": 1, "wandb_project": "openrlhf_train_ppo"}
_DATA_FILES = (".json", ".jsonl", ".parquet", ".csv")  # the files both read; OpenRLHF's .arrow and .py grpo does not


def _given(given: Mapping[str, Any], name: str) -> Any:
    return given.get(name, _DEFAULTS.get(name))


def _kl_loss(given: Mapping[str, Any]) -> bool:
    """Whether the KL is a loss term that counts: --use_kl_loss with a coefficient above 0."""
    coef = number(_given(given, "init_kl_coef"))
    return given.get("use_kl_loss") is True and coef is not None and coef > 0


def _kl_coef(value: Any, given: Mapping[str, Any]) -> str | None:
    """init_kl_coef and use_kl_loss: the KL loss's coefficient; 0 or less is no KL (OpenRLHF loads no reference);
    above 0 without --use_kl_loss a KL penalty in the reward, which grpo has not. OpenRLHF's estimator is k1 unless
    given."""
    coef = _given(given, "init_kl_coef")
    amount = number(coef)
    if amount is None or (amount > 0 and given.get("use_kl_loss") is not True):
        return None
    if amount <= 0:
        return f"algo.kl_coef={as_yaml(coef) if amount == 0 else 0}"
    estimated = "kl_estimator" in given or "use_kl_estimator_k3" in given
    return f"algo.kl_coef={as_yaml(coef)}" + ("" if estimated else " algo.kl_estimator=k1")


def _kl_estimator(value: Any, given: Mapping[str, Any]) -> str | None:
    return f"algo.kl_estimator={value}" if value in ("k1", "k3") and _kl_loss(given) else None


def _kl_k3(value: Any, given: Mapping[str, Any]) -> str | None:
    return "algo.kl_estimator=k3" if value is True and _kl_loss(given) else None


def _updates(value: Any, given: Mapping[str, Any]) -> str | None:
    """train_batch_size and max_epochs: one optimizer step a rollout, max_epochs times, is grpo's
    algo.updates_per_batch; a smaller train_batch_size makes several steps on parts of one rollout."""
    train, epochs = integer(_given(given, "train_batch_size")), integer(_given(given, "max_epochs"))
    prompts, samples = integer(_given(given, "rollout_batch_size")), integer(_given(given, "n_samples_per_prompt"))
    if None in (train, epochs, prompts, samples) or train != prompts * samples:
        return None
    return f"algo.updates_per_batch={epochs}"


def _group(value: Any, given: Mapping[str, Any]) -> str | None:
    count = integer(value)
    return f"rollout.samples_per_problem={count}" if count is not None and count >= 2 else None


def _engines(value: Any, given: Mapping[str, Any]) -> str | None:
    count = integer(value)
    if count is None or count < 0:
        return None
    return f"rollout.engine=vllm rollout.server.replicas={count}" if count else "rollout.engine=embedded"


def _engine_args(value: Any, given: Mapping[str, Any]) -> str | None:
    """The vLLM knobs as the flags of grpo's server: every one given, in one list, so that each says all; none
    without vLLM engines (OpenRLHF's default), where they change nothing."""
    engines, parallel = integer(given.get("vllm_num_engines")), integer(given.get("vllm_tensor_parallel_size"))
    args = ((["--tensor-parallel-size", parallel] if parallel is not None else [])
            + (["--enforce-eager"] if given.get("enforce_eager") is True else [])
            + (["--enable-prefix-caching"] if given.get("enable_prefix_caching") is True else []))
    return f"rollout.server.extra_args={as_yaml(args)}" if engines and args else None


def _prompt_column(value: Any, given: Mapping[str, Any]) -> str | None:
    """input_key: without --apply_chat_template OpenRLHF sends the column's text as it is."""
    raw = "" if given.get("apply_chat_template") is True else " task.text_prompts=raw"
    return f"task.prompt_column={as_yaml(value)}{raw}"


def _files(value: Any) -> list[str] | None:
    """OpenRLHF's comma-separated datasets, where every one is a data file grpo reads."""
    names = [name.strip() for name in str(value).split(",")]
    return names if all(Path(name).suffix in _DATA_FILES and "@" not in name for name in names) else None


def _prompt_data(value: Any, given: Mapping[str, Any]) -> str | None:
    """prompt_data as OpenRLHF reads it: data files, a local dataset directory, else a hub dataset."""
    files = _files(value)
    if files is not None:
        return f"task.name=dataset task.train_files={as_yaml(files)}"
    name = str(value).strip()
    if "," in name or "@" in name or Path(name).suffix in (".py", ".arrow"):
        return None
    path = name if Path(name).is_dir() else f"hub:{name}"
    return f"task.name=dataset task.path={as_yaml(path)}"


def _eval_data(value: Any, given: Mapping[str, Any]) -> str | None:
    files = _files(value)
    return f"task.test_files={as_yaml(files)}" if files is not None else None


def _every(key: str, never: str) -> Beside:
    """save_steps and eval_steps: every N global steps (grpo's steps); -1: never."""
    def beside(value: Any, given: Mapping[str, Any]) -> str | None:
        count = integer(value)
        if count == -1:
            return never
        return f"{key}={count}" if count is not None and count > 0 else None
    return beside


def _clip(value: Any, given: Mapping[str, Any]) -> str | None:
    """eps_clip: both bounds, where eps_clip_low_high is not given beside it."""
    if "eps_clip_low_high" in given or number(value) is None:
        return None
    return f"algo.clip_low={as_yaml(value)} algo.clip_high={as_yaml(value)}"


def _clips(value: Any, given: Mapping[str, Any]) -> str | None:
    if not isinstance(value, list) or len(value) != 2 or None in map(number, value):
        return None
    return f"algo.clip_low={as_yaml(value[0])} algo.clip_high={as_yaml(value[1])}"


def _wandb(value: Any, given: Mapping[str, Any]) -> str | None:
    """use_wandb (a key) and wandb_project: a W&B project, where use_wandb is given."""
    project = _given(given, "wandb_project")
    return f"logging.wandb_project={as_yaml(project)}" if given.get("use_wandb") not in (None, "") and project else None


_ESTIMATORS = {"group_norm": "algo.advantage_norm=group algo.advantage_std=sample algo.advantage_eps=1e-9",
               "dr_grpo": "algo.advantage_norm=none"}
_SCHEDULES = {"cosine_with_min_lr": "actor.schedule=cosine actor.min_lr_ratio=0.1", "cosine": "actor.schedule=cosine",
              "linear": "actor.schedule=linear", "constant_with_warmup": "actor.schedule=constant",
              "constant": "actor.schedule=constant actor.warmup_steps=0"}
_POLICY_LOSS = {"gspo": "algo.ratio_level=sequence algo.loss_agg=seq_mean", "ppo": "algo.ratio_level=token"}

_GPUS = "grpo's processes are torchrun's: torchrun --nnodes N --nproc-per-node G -m grpo train (docs/scaling.md)"
_NO_CRITIC = "GRPO trains no critic"
_REWARD_MODEL = ("grpo takes reward functions, not reward models: load the model in a function and give its import "
                 "path (task.reward)")
_SERVER = "grpo's vLLM server is its own process beside the trainer; rollout.server.memory_fraction bounds its memory"
_SHARDING = ("grpo shards with FSDP2 over torchrun's ranks and keeps the optimizer on the device: grpo plan shows the "
             "memory")
_MICRO = "grpo's one micro-batch size, per process, serves the update and every log-prob pass"
_TOKENS = "grpo's micro-batches are algo.micro_batch_size rows, grouped by length"
_IS = ("grpo recomputes the old log-probs with the trainer (algo.recompute_old_logprobs) and weights no token by the "
       "sampler's probability")
_FILTER = ("OpenRLHF keeps a group whose mean reward lies strictly inside dynamic_filtering_reward_range (0 1) and "
           "draws new prompts for the rest; grpo drops the groups whose rewards are all equal, and refills: the same "
           "only for rewards of 0 and 1 with the range 0 1")
_STEPS = ("OpenRLHF makes rollout_batch_size x n_samples_per_prompt / train_batch_size optimizer steps a rollout, "
          "max_epochs times; grpo makes algo.updates_per_batch steps, each on the whole batch: "
          "algo.updates_per_batch=max_epochs where train_batch_size = rollout_batch_size x n_samples_per_prompt, "
          "no equivalent where it is smaller")
_EVAL = "a run's evaluations are greedy, one answer a problem; grpo eval --samples N --temperature T samples"
_SEQUENCE = "grpo has no sequence parallelism"
_TEXT = "grpo trains text models: no images"
_NOTHING = "it changes nothing grpo does: leave it out"

OPENRLHF_NAMES: dict[str, ForeignName] = {
    # placement and colocation (Ray)
    **dict.fromkeys(("ref_num_nodes", "ref_num_gpus_per_node", "actor_num_nodes", "actor_num_gpus_per_node"),
                    ForeignName((), f"{_GPUS}; the reference model lives in each trainer process")),
    **dict.fromkeys(("reward_num_nodes", "reward_num_gpus_per_node"), ForeignName((), _REWARD_MODEL)),
    **dict.fromkeys(("colocate_all_models", "colocate_actor_ref", "vllm_enable_sleep", "deepspeed_enable_sleep"),
                    ForeignName((), _SERVER)),
    # vLLM
    "vllm_num_engines": ForeignName(("rollout.engine", "rollout.server.replicas"), "0: the training model "
                                    "generates (rollout.engine=embedded)", beside=_engines),
    **dict.fromkeys(("vllm_tensor_parallel_size", "enforce_eager", "enable_prefix_caching"), ForeignName(
        ("rollout.server.extra_args",), "vLLM's --tensor-parallel-size, --enforce-eager, --enable-prefix-caching, in "
        "one list", beside=_engine_args)),
    "vllm_gpu_memory_utilization": ForeignName(("rollout.server.memory_fraction",)),
    "vllm_sync_backend": ForeignName((), "grpo's server takes each update by a checked weight sync"),
    "vllm_sync_with_ray": ForeignName((), "grpo's server takes each update by a checked weight sync"),
    "vllm_generate_batch_size": ForeignName((), "grpo sends a step's requests to its servers at once"),
    **dict.fromkeys(("enable_vllm_is_correction", "vllm_is_truncated_threshold", "vllm_is_correction_type",
                     "use_icepop"), ForeignName((), _IS)),
    # the objective
    "advantage_estimator": ForeignName(("algo.advantage_norm", "algo.advantage_std", "algo.advantage_eps"),
                                       "group_norm: over the group's sample standard deviation + 1e-9; dr_grpo: "
                                       "algo.advantage_norm=none; reinforce_baseline, rloo, reinforce and gae have no "
                                       "grpo equivalent (grpo's batch norm divides by the batch's reward deviation, "
                                       "not the tokens' advantage deviation)",
                                       beside=lambda value, given: _ESTIMATORS.get(str(value))),
    "no_advantage_std_norm": ForeignName((), "it changes OpenRLHF's batch normalisation of gae, reinforce and "
                                             "reinforce_baseline advantages, which grpo has not"),
    "gamma": ForeignName((), "REINFORCE's discount over a response's tokens: 1 (forced for OpenRLHF's group "
                             "estimators) is what grpo does; grpo has no discount"),
    "lambd": ForeignName((), f"GAE's lambda: {_NO_CRITIC}"),
    "init_kl_coef": ForeignName(("algo.kl_coef",), "the KL loss's coefficient with --use_kl_loss; without it (and "
                                "above 0) a KL penalty in the reward, which grpo has not: its KL is a loss term",
                                beside=_kl_coef),
    "use_kl_loss": ForeignName(("algo.kl_coef",), "algo.kl_coef=init_kl_coef (0.01 by default), OpenRLHF's k1 "
                               "estimator unless kl_estimator is given", beside=_kl_coef),
    "kl_estimator": ForeignName(("algo.kl_estimator",), "of the KL loss: k1 and k3 are grpo's (OpenRLHF clamps each "
                                "token's to [-10, 10]); k2 has no grpo equivalent, nor has a KL in the reward",
                                beside=_kl_estimator),
    "use_kl_estimator_k3": ForeignName(("algo.kl_estimator",), "OpenRLHF's before March 2025: of the KL loss, "
                                       "algo.kl_estimator=k3", beside=_kl_k3),
    "kl_target": ForeignName((), "an adaptive KL coefficient: grpo's algo.kl_coef is fixed"),
    "kl_horizon": ForeignName((), "an adaptive KL coefficient: grpo's algo.kl_coef is fixed"),
    "eps_clip": ForeignName(("algo.clip_low", "algo.clip_high"), "both bounds, where eps_clip_low_high is not "
                            "given", beside=_clip),
    "eps_clip_low_high": ForeignName(("algo.clip_low", "algo.clip_high"), beside=_clips),
    "dual_clip": ForeignName((), "grpo's clipped surrogate has no dual clip"),
    "policy_loss_type": ForeignName(("algo.ratio_level", "algo.loss_agg"), "gspo: GSPO, its loss a mean per "
                                    "sequence; ppo: grpo's token ratio", beside=lambda value, given: _POLICY_LOSS.get(
                                        str(value))),
    "entropy_loss_coef": ForeignName((), "grpo's loss has no entropy term (0 only logs the entropy)"),
    "aux_loss_coef": ForeignName((), "grpo adds no MoE balancing loss"),
    "ptx_coef": ForeignName((), "PPO-ptx's pretraining loss: grpo's loss has no language-model term"),
    **dict.fromkeys(("pretrain_data", "pretrain_data_probs", "pretrain_split"),
                    ForeignName((), "PPO-ptx's pretraining data: grpo's loss has no language-model term")),
    "reward_clip_range": ForeignName((), "grpo does not clip rewards; OpenRLHF clips each token's reward after the "
                                         "group normalisation to (-10, 10)"),
    "normalize_reward": ForeignName((), "a reward model's score normalisation: grpo scores with reward functions "
                                        "and normalises within each group (algo.advantage_norm)"),
    "dynamic_filtering": ForeignName(("rollout.filter_zero_variance",), _FILTER, carries=False),
    "dynamic_filtering_reward_range": ForeignName(("rollout.filter_zero_variance",), _FILTER, carries=False),
    **dict.fromkeys(("overlong_buffer_len", "overlong_penalty_factor"), ForeignName(
        (), "DAPO's overlong penalty: no grpo reward has it built in; a reward function of yours reads "
            "completion_ids (task.reward)")),
    "stop_properly_penalty_coef": ForeignName((), "a truncated answer's reward scaled (or replaced): no grpo reward "
                                                  "does it; algo.mask_truncated leaves truncated answers out of the "
                                                  "loss instead"),
    # batches and steps
    "rollout_batch_size": ForeignName(("rollout.problems_per_step",), "prompts a rollout: grpo's step"),
    "n_samples_per_prompt": ForeignName(("rollout.samples_per_problem",), "1 has no grpo equivalent: a group of "
                                        "one has no advantage", beside=_group),
    "train_batch_size": ForeignName(("algo.updates_per_batch",), _STEPS, beside=_updates),
    "max_epochs": ForeignName(("algo.updates_per_batch",), _STEPS, beside=_updates),
    "micro_train_batch_size": ForeignName(("algo.micro_batch_size",), _MICRO, carries=False),
    "micro_rollout_batch_size": ForeignName(("algo.micro_batch_size",), _MICRO, carries=False),
    "num_episodes": ForeignName(("train.epochs",)),
    **dict.fromkeys(("use_dynamic_batch", "train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu",
                     "max_tokens_per_gpu"), ForeignName((), _TOKENS)),
    "async_train": ForeignName(("rollout.max_staleness",), "grpo generates ahead of the update with "
                               "rollout.max_staleness and its decoupled objective (docs/async.md)", carries=False),
    "async_queue_size": ForeignName(("rollout.max_staleness",), "grpo generates ahead of the update with "
                                    "rollout.max_staleness and its decoupled objective (docs/async.md)",
                                    carries=False),
    "partial_rollout": ForeignName((), "grpo's rollouts finish on the weights they started with"),
    # data
    "pretrain": ForeignName(("model.name",)),
    "prompt_data": ForeignName(("task.name", "task.train_files", "task.path"), "files: task.train_files; a "
                               "dataset directory: task.path=DIR; a hub dataset: task.path=hub:ORG/NAME",
                               beside=_prompt_data),
    "prompt_data_probs": ForeignName((), "grpo concatenates its training files"),
    "prompt_split": ForeignName(("task.train_split",)),
    "input_key": ForeignName(("task.prompt_column", "task.text_prompts"), "without --apply_chat_template "
                             "OpenRLHF sends the text as it is: task.text_prompts=raw", beside=_prompt_column),
    "label_key": ForeignName(("task.answer_column",), "the gold grpo's rewards read"),
    "input_template": ForeignName(("task.prompt_template",), "its {} becomes {COLUMN} (then leave "
                                  "task.prompt_column out)", carries=False),
    "apply_chat_template": ForeignName(("task.instruction",), "a text prompt becomes a user message through the "
                                       "chat template, as in grpo (task.text_prompts=chat), with nothing appended",
                                       {True: ""}),
    "prompt_max_len": ForeignName(("task.max_prompt_tokens",), "OpenRLHF cut a longer prompt without a word; grpo "
                                  "refuses it at load, or with task.truncate_prompts=left keeps its last N tokens"),
    "generate_max_len": ForeignName(("rollout.max_new_tokens",)),
    "max_new_tokens": ForeignName(("rollout.max_new_tokens",)),
    "max_len": ForeignName((), "grpo bounds the prompt and the answer apart: task.max_prompt_tokens, "
                               "rollout.max_new_tokens"),
    "max_samples": ForeignName(("task.max_train_problems",), "the first N, as OpenRLHF's"),
    "dataloader_num_workers": ForeignName((), _NOTHING),
    "disable_fast_tokenizer": ForeignName((), "grpo loads the model's tokenizer as transformers does"),
    "temperature": ForeignName(("rollout.temperature",)),
    "top_p": ForeignName(("rollout.top_p",)),
    "seed": ForeignName(("train.seed",), "one seed for data order, sampling and initialisation, as OpenRLHF's"),
    "full_determinism": ForeignName((), _NOTHING),
    "eval_dataset": ForeignName(("task.test_files",), "files: task.test_files=[FILE]; a hub dataset's held-out "
                                "split: task.test_split beside task.path", beside=_eval_data),
    "eval_split": ForeignName(("task.test_split",), "of task.path's data", carries=False),
    "eval_steps": ForeignName(("eval.every_steps",), "-1: never (once an episode before March 2025)",
                              beside=_every("eval.every_steps", "eval.every_steps=0")),
    "eval_temperature": ForeignName((), _EVAL),
    "eval_n_samples_per_prompt": ForeignName((), _EVAL),
    **dict.fromkeys(("image_key", "max_images_per_prompt", "freeze_visual_encoder"), ForeignName((), _TEXT)),
    # the model, precision and memory
    "bf16": ForeignName(("model.dtype",), "OpenRLHF's before 2026", {True: "bfloat16"}),
    "param_dtype": ForeignName(("model.dtype",), "", {"bf16": "bfloat16", "fp16": "float16"}),
    "flash_attn": ForeignName(("model.attn_implementation",), "OpenRLHF's before August 2025",
                              {True: "flash_attention_2"}),
    "attn_implementation": ForeignName(("model.attn_implementation",), "eager, sdpa and flash_attention_2 are "
                                       "grpo's", {"eager": "eager", "sdpa": "sdpa",
                                                  "flash_attention_2": "flash_attention_2"}),
    "gradient_checkpointing": ForeignName(("model.gradient_checkpointing",)),
    "gradient_checkpointing_use_reentrant": ForeignName((), _NOTHING),
    **dict.fromkeys(("zero_stage", "zpg", "adam_offload", "overlap_comm", "grad_accum_dtype", "deepcompile",
                     "ds_tensor_parallel_size", "actor_init_on_gpu", "ref_reward_offload"), ForeignName((), _SHARDING)),
    **dict.fromkeys(("packing_samples", "use_liger_kernel", "use_linger_kernel", "torch_compile",
                     "disable_trace_cache"), ForeignName((), "a speed knob: grpo packs a micro-batch where its "
                                                             "attention allows (model.attn_implementation)")),
    "ring_attn_size": ForeignName((), _SEQUENCE),
    "ring_head_stride": ForeignName((), _SEQUENCE),
    "load_in_4bit": ForeignName((), "grpo trains unquantised weights"),
    "lora_rank": ForeignName(("model.lora.rank",)),
    "lora_alpha": ForeignName(("model.lora.alpha",), "OpenRLHF's default 16, grpo's null: 2 x rank"),
    "lora_dropout": ForeignName(("model.lora.dropout",)),
    "target_modules": ForeignName(("model.lora.target_modules",), "a list; all-linear: [all-linear], both "
                                  "defaults"),
    # the optimizer
    "actor_learning_rate": ForeignName(("actor.lr",), "the peak; OpenRLHF's schedule by default: warm-up 3% "
                                       "(lr_warmup_ratio), then cosine down to 0.1 x (lr_scheduler)"),
    "l2": ForeignName(("actor.weight_decay",)),
    "adam_betas": ForeignName(("actor.betas",), "OpenRLHF's default [0.9,0.95], grpo's [0.9,0.999]"),
    "max_norm": ForeignName(("actor.max_grad_norm",)),
    "lr_warmup_ratio": ForeignName(("actor.warmup_steps",), "a number of steps: ceil(ratio x OpenRLHF's optimizer "
                                   "steps); 0: actor.warmup_steps=0", beside=lambda value, given: (
                                       "actor.warmup_steps=0" if number(value) == 0 else None)),
    "lr_scheduler": ForeignName(("actor.schedule", "actor.min_lr_ratio"), "cosine_with_min_lr (OpenRLHF's "
                                "default): cosine down to 0.1 x; cosine, linear, constant_with_warmup and constant "
                                "are grpo's", beside=lambda value, given: _SCHEDULES.get(str(value))),
    "enable_ema": ForeignName((), "grpo keeps no moving average of the weights"),
    "ema_beta": ForeignName((), "grpo keeps no moving average of the weights"),
    # the critic, reward models and agents
    **dict.fromkeys(("critic_num_nodes", "critic_num_gpus_per_node", "colocate_critic_reward", "critic_pretrain",
                     "critic_learning_rate", "value_clip", "value_head_prefix", "save_value_network",
                     "freezing_actor_steps"), ForeignName((), _NO_CRITIC)),
    "reward_pretrain": ForeignName((), _REWARD_MODEL),
    "remote_rm_url": ForeignName(("task.reward",), "task.reward=MODULE:FUNCTION: OpenRLHF's reward_func(queries, "
                                 "prompts, labels) (a .py file) or an HTTP reward server becomes a function(prompts, "
                                 "completions, **columns) returning one score per completion (the label is the "
                                 "column label_key names)", carries=False),
    "agent_func_path": ForeignName((), "grpo's rollouts are single-turn; a reward your agent computes becomes a "
                                       "task.reward function"),
    # checkpoints and logs
    "save_path": ForeignName(("run_dir",), "the final model: grpo saves a final checkpoint under run_dir "
                             "(checkpoint.save_final); grpo export --checkpoint RUN_DIR/checkpoints/step_N --out DIR "
                             "writes the model where users load it", carries=False),
    "ckpt_path": ForeignName(("run_dir",), "its checkpoints and their resumption"),
    "save_steps": ForeignName(("checkpoint.every_steps", "checkpoint.every_minutes"), "-1: never (grpo also saves "
                              "every checkpoint.every_minutes)", beside=_every(
                                  "checkpoint.every_steps", "checkpoint.every_steps=0 checkpoint.every_minutes=0")),
    "save_hf_ckpt": ForeignName((), "grpo's checkpoints hold the model as a Hugging Face directory already"),
    **dict.fromkeys(("disable_ds_ckpt", "use_ds_universal_ckpt", "universal_ckpt", "max_ckpt_mem"),
                    ForeignName((), "DeepSpeed's checkpoint formats: grpo's checkpoints are its own, checked at "
                                    "resume")),
    "max_ckpt_num": ForeignName(("checkpoint.keep_last",), "grpo keeps the newest checkpoint.keep_last and the best"),
    "best_metric_key": ForeignName(("checkpoint.keep_best",), "grpo keeps the checkpoint best by held-out accuracy",
                                   carries=False),
    "load_checkpoint": ForeignName(("recover",), "", {True: "auto"}),
    "use_tensorboard": ForeignName(("logging.tensorboard",), "grpo writes it under RUN_DIR/tensorboard",
                                   beside=lambda value, given: "logging.tensorboard=true"),
    "use_wandb": ForeignName(("logging.wandb_project",), "logging.wandb_project=wandb_project; grpo reads the key "
                             "from wandb login (WANDB_API_KEY)", beside=_wandb),
    "wandb_project": ForeignName(("logging.wandb_project",), "where use_wandb is given", beside=_wandb),
    "wandb_run_name": ForeignName(("name",), "grpo's name is also run_dir's default: runs/{name}"),
    "wandb_org": ForeignName((), "grpo logs to W&B's default entity"),
    "wandb_group": ForeignName((), "grpo logs to W&B's default entity"),
    "logging_steps": ForeignName((), "grpo logs every step"),
    **dict.fromkeys(("local_rank", "perf", "use_ms"), ForeignName((), _NOTHING)),
}

# Flags of OpenRLHF's forks that scripts use beyond OpenRLHF's: MM-EUREKA's (ModalMinds/MM-EUREKA);
# docs/coming-from-openrlhf.md's second table.
FORK_NAMES: dict[str, ForeignName] = {
    "freeze_prefix": ForeignName((), "MM-EUREKA's frozen parameters: grpo trains every parameter, or LoRA adapters "
                                     "only (model.lora)"),
    **dict.fromkeys(("enable_accuracy_filter", "accuracy_lower_bound", "accuracy_upper_bound"), ForeignName(
        ("rollout.filter_zero_variance",), "MM-EUREKA's filter drops, without refilling, the groups whose mean "
        "accuracy lies outside [accuracy_lower_bound, accuracy_upper_bound]; grpo drops the groups whose rewards are "
        "all equal, and refills", carries=False)),
}

OPENRLHF = NameTable("OpenRLHF", "docs/coming-from-openrlhf.md", {**OPENRLHF_NAMES, **FORK_NAMES},
                     stranger="not an OpenRLHF flag grpo knows", why_none=True)


def openrlhf_names_error(given: Mapping[Any, Any]) -> str | None:
    """The error for the top level's unknown keys `given` when they hold OpenRLHF's flags: where OpenRLHF's table
    knows more of them than TRL's (the two share a few: temperature, seed, bf16), one message for all of them (one
    line naming grpo's key for a single flag). None otherwise."""
    return most_names_error(OPENRLHF, (TRL,), given)
