"""verl's Hydra config names and grpo's keys for them, so a verl launch script's overrides given to grpo
(`actor_rollout_ref.rollout.n=5 data.train_batch_size=1024 ...`; grpo.config.loader reads Hydra's `+` and `++` as
the key) are answered in one message: each name's grpo override where the meaning is the same, grpo's keys where
it must be set by hand, or what grpo does instead. Each equivalence is checked against verl's documented semantics
(its docs/examples/config.rst, docs/algo/grpo.md, trainer YAMLs and core_algos.py); where they differ, the table
says there is no exact equivalent rather than map it. docs/coming-from-verl.md's names tables say the same for
people; a test keeps them in step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

_ACTOR = "actor_rollout_ref.actor."
_ROLLOUT = "actor_rollout_ref.rollout."
# verl's defaults, where a name's meaning depends on another the script leaves out.
_DEFAULTS = {"data.train_batch_size": 1024, f"{_ACTOR}ppo_mini_batch_size": 256, f"{_ACTOR}ppo_epochs": 1,
             f"{_ACTOR}kl_loss_coef": 0.001, "algorithm.adv_estimator": "gae", f"{_ROLLOUT}name": "vllm",
             "trainer.logger": ["console", "wandb"], "trainer.project_name": "verl_examples"}


def _given(given: Mapping[str, Any], name: str) -> Any:
    return given.get(name, _DEFAULTS.get(name))


def _kl_switch(use: Any, given: Mapping[str, Any]) -> str | None:
    """use_kl_loss: verl adds kl_loss_coef x KL to the loss only where it is true."""
    if not isinstance(use, bool):
        return None
    coef = _given(given, f"{_ACTOR}kl_loss_coef")
    return f"algo.kl_coef={as_yaml(coef) if use else 0}" if number(coef) is not None else None


def _kl_coef(coef: Any, given: Mapping[str, Any]) -> str | None:
    """kl_loss_coef: said where its switch is given beside it (verl's default switch is off)."""
    use = given.get(f"{_ACTOR}use_kl_loss")
    if not isinstance(use, bool) or number(coef) is None:
        return None
    return f"algo.kl_coef={as_yaml(coef) if use else 0}"


def _estimator(value: Any, given: Mapping[str, Any]) -> str | None:
    """GRPO's advantages: over the group's sample (Bessel's) standard deviation + 1e-6, or unscaled (Dr.GRPO)."""
    if _given(given, "algorithm.adv_estimator") not in ("grpo", "grpo_vectorized"):
        return None
    if given.get("algorithm.norm_adv_by_std_in_grpo") is False:
        return "algo.advantage_norm=none"
    return "algo.advantage_norm=group algo.advantage_std=sample"


def _updates(given: Mapping[str, Any]) -> str | None:
    """A mini-batch of at least the step's prompts is one optimizer step on the whole batch per PPO epoch: grpo's
    algo.updates_per_batch. Smaller ones are several steps on parts of one generation, which grpo does not do."""
    mini = integer(_given(given, f"{_ACTOR}ppo_mini_batch_size"))
    prompts, epochs = integer(_given(given, "data.train_batch_size")), integer(_given(given, f"{_ACTOR}ppo_epochs"))
    if mini is None or prompts is None or epochs is None or mini < prompts:
        return None
    return f"algo.updates_per_batch={epochs}"


def _warmup_steps(steps: Any, given: Mapping[str, Any]) -> str | None:
    """lr_warmup_steps: a count where positive; 0, negative or null hand over to lr_warmup_steps_ratio."""
    count = integer(steps)
    return f"actor.warmup_steps={count}" if count is not None and count > 0 else None


def _warmup_ratio(ratio: Any, given: Mapping[str, Any]) -> str | None:
    """lr_warmup_steps_ratio: int(ratio x the run's steps) as verl rounds it, where the steps are given beside it;
    a positive lr_warmup_steps beside it wins."""
    steps = _warmup_steps(given.get(f"{_ACTOR}optim.lr_warmup_steps"), given)
    fraction = number(ratio)
    total = integer(given.get("trainer.total_training_steps"))
    if steps is not None or fraction is None:
        return steps
    if fraction == 0:
        return "actor.warmup_steps=0"
    return f"actor.warmup_steps={int(fraction * total)}" if total is not None and total > 0 else None


def _clip(ratio: Any, given: Mapping[str, Any]) -> str | None:
    """clip_ratio: both bounds, where clip_ratio_low and clip_ratio_high are not given beside it."""
    if f"{_ACTOR}clip_ratio_low" in given or f"{_ACTOR}clip_ratio_high" in given or number(ratio) is None:
        return None
    return f"algo.clip_low={as_yaml(ratio)} algo.clip_high={as_yaml(ratio)}"


def _kept(count: Any, given: Mapping[str, Any]) -> str | None:
    return f"checkpoint.keep_last={count}" if integer(count) is not None and integer(count) > 0 else None


# Written bare: grpo reads YAML's `no` for this key as the word, where as_yaml would quote it.
_TRUNCATION = {"error": "task.truncate_prompts=no", "left": "task.truncate_prompts=left"}
_AGGREGATION = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean"}


def _aggregation(mode: Any, given: Mapping[str, Any]) -> str | None:
    """loss_agg_mode; verl's GSPO loss aggregates seq-mean-token-mean whatever it says."""
    if given.get(f"{_ACTOR}policy_loss.loss_mode") == "gspo":
        return "algo.loss_agg=seq_mean"
    return f"algo.loss_agg={_AGGREGATION[mode]}" if isinstance(mode, str) and mode in _AGGREGATION else None


def _engine_args(given: Mapping[str, Any]) -> str | None:
    """verl's engine knobs as the flags of grpo's server: every one given, in one list, so that each says all."""
    name, args = _given(given, f"{_ROLLOUT}name"), []
    parallel = integer(given.get(f"{_ROLLOUT}tensor_model_parallel_size"))
    if name == "sglang" and parallel is not None:
        args = ["--tp", parallel]
    if name == "vllm":
        batched = integer(given.get(f"{_ROLLOUT}max_num_batched_tokens"))
        args = ((["--tensor-parallel-size", parallel] if parallel is not None else [])
                + (["--enable-chunked-prefill"] if given.get(f"{_ROLLOUT}enable_chunked_prefill") is True else [])
                + (["--max-num-batched-tokens", batched] if batched is not None else [])
                + (["--enforce-eager"] if given.get(f"{_ROLLOUT}enforce_eager") is True else []))
    return f"rollout.server.extra_args={as_yaml(args)}" if args else None


def _engine_knob(engines: tuple[str, ...], says: Callable[[Any], bool]) -> Beside:
    """A knob said by _engine_args where its engine takes it and `says(value)` holds (a count, a flag that is on)."""
    def beside(value: Any, given: Mapping[str, Any]) -> str | None:
        return _engine_args(given) if _given(given, f"{_ROLLOUT}name") in engines and says(value) else None
    return beside


def _evaluation(every: Any, given: Mapping[str, Any]) -> str | None:
    """test_freq: verl also validates after the last step; -1 never."""
    count = integer(every)
    if count is None:
        return None
    return f"eval.every_steps={count} eval.after_training=true" if count > 0 else "eval.every_steps=0"


def _wandb(value: Any, given: Mapping[str, Any]) -> str | None:
    """trainer.logger and project_name: a W&B project, where wandb is among the loggers (verl's default is)."""
    logger, project = _given(given, "trainer.logger"), _given(given, "trainer.project_name")
    loggers = logger if isinstance(logger, list) else [logger]
    return f"logging.wandb_project={as_yaml(project)}" if "wandb" in loggers and project else None


_KL = "grpo's KL is a loss term, algo.kl_coef: use_kl_loss and kl_loss_coef"
_STEP = "grpo makes algo.updates_per_batch optimizer steps, each on the whole batch"
_MICRO = "grpo's one micro-batch size serves the update and every log-prob pass, per process"
_TOKENS = "grpo's micro-batches are algo.micro_batch_size rows, grouped by length"
_SHARDING = "grpo shards with FSDP2 over torchrun's ranks, without offload: grpo plan shows the memory"
_MEGATRON = "grpo trains with FSDP2 over torchrun's ranks, not Megatron"
_NO_CRITIC = "GRPO trains no critic"
_EVAL = "a run's evaluations are greedy, one answer a problem; grpo eval --samples N --temperature T samples"
_VLLM = "a vLLM flag: rollout.server.extra_args"
_GPUS = "grpo's processes are torchrun's: torchrun --nnodes N --nproc-per-node G -m grpo train, docs/scaling.md"
_OVERLONG = ("DAPO's soft overlong punishment: no grpo reward has it built in; a reward function of yours reads "
             "completion_ids (task.reward)")
_SEARCH = "Search-R1's multi-turn search, not verl's: grpo's rollouts are single-turn"
_NOTHING = "it changes nothing grpo does: leave it out"

VERL_NAMES: dict[str, ForeignName] = {
    # algorithm
    "algorithm.adv_estimator": ForeignName(("algo.advantage_norm", "algo.advantage_std"), "grpo and grpo_vectorized "
                                           "only: group advantages over the sample standard deviation + 1e-6 (grpo's "
                                           "default divides by the population one); gae, rloo, reinforce_plus_plus, "
                                           "remax and the rest have no grpo equivalent", beside=_estimator),
    "algorithm.norm_adv_by_std_in_grpo": ForeignName(("algo.advantage_norm",), "false: Dr.GRPO's unscaled advantages",
                                                     beside=_estimator),
    "algorithm.use_kl_in_reward": ForeignName((), f"grpo never puts a KL in the reward; {_KL}"),
    "algorithm.kl_penalty": ForeignName((), f"the in-reward KL's estimator; {_KL}, algo.kl_estimator"),
    "algorithm.kl_ctrl.*": ForeignName((), f"the in-reward KL's controller; {_KL}"),
    "algorithm.gamma": ForeignName((), "GAE's discount: GRPO's advantage is the group-normalised reward"),
    "algorithm.lam": ForeignName((), "GAE's lambda: GRPO's advantage is the group-normalised reward"),
    "algorithm.rollout_correction.*": ForeignName((), "verl's importance weights (and rejection) between the "
                                                      "trainer's and the sampler's log-probs: grpo has no such "
                                                      "correction; it recomputes the old log-probs with the trainer "
                                                      "(algo.recompute_old_logprobs), and algo.importance_cap weighs "
                                                      "only stale samples (rollout.max_staleness)"),
    "algorithm.filter_groups.enable": ForeignName(("rollout.filter_zero_variance",), "grpo drops the groups whose "
                                                  "rewards are all equal"),
    "algorithm.filter_groups.metric": ForeignName((), "grpo's filter reads the total reward (verl's seq_reward); no "
                                                      "key filters on accuracy"),
    "algorithm.filter_groups.max_num_gen_batches": ForeignName(("rollout.max_refill_rounds",), "the rounds after the "
                                                               "first: max_num_gen_batches - 1; each grpo round asks "
                                                               "only for the groups still missing", carries=False),
    # data
    "data.train_files": ForeignName(("task.name", "task.train_files", "task.answer_column"), form=(
        "task.name=dataset task.train_files={} task.answer_column=reward_model.ground_truth")),
    "data.val_files": ForeignName(("task.test_files",)),
    "data.prompt_key": ForeignName(("task.prompt_column",)),
    "data.max_prompt_length": ForeignName(("task.max_prompt_tokens",)),
    "data.max_response_length": ForeignName(("rollout.max_new_tokens",)),
    "data.train_batch_size": ForeignName(("rollout.problems_per_step",)),
    "data.truncation": ForeignName(("task.truncate_prompts",), "error: no; left: left; right and middle cuts have no "
                                   "grpo equivalent", beside=lambda value, given: _TRUNCATION.get(str(value))),
    "data.filter_overlong_prompts": ForeignName((), "grpo refuses a longer prompt at load, or with "
                                                    "task.truncate_prompts=left cuts it; no key drops them"),
    "data.shuffle": ForeignName((), "grpo always draws each epoch in a shuffled order seeded by train.seed"),
    "data.seed": ForeignName(("train.seed",), "grpo's one seed also seeds sampling and initialisation",
                             carries=False),
    "data.val_batch_size": ForeignName((), "a memory knob of verl's validation; grpo's evaluation batches with "
                                           "rollout's"),
    "data.gen_batch_size": ForeignName((), "grpo's refill rounds, rollout.max_refill_rounds, ask only for the groups "
                                           "still missing"),
    "data.return_raw_chat": ForeignName((), "an internal of verl's rollout workers, nothing grpo needs: leave it out"),
    "data.filter_overlong_prompts_workers": ForeignName((), _NOTHING),
    "data.tokenizer": ForeignName((), "grpo uses the model's tokenizer; task.chat_template gives another template"),
    # actor_rollout_ref.model
    "actor_rollout_ref.model.path": ForeignName(("model.name",)),
    "actor_rollout_ref.model.enable_gradient_checkpointing": ForeignName(("model.gradient_checkpointing",)),
    "actor_rollout_ref.model.lora_rank": ForeignName(("model.lora.rank",)),
    "actor_rollout_ref.model.lora_alpha": ForeignName(("model.lora.alpha",)),
    "actor_rollout_ref.model.target_modules": ForeignName(("model.lora.target_modules",)),
    "actor_rollout_ref.model.use_remove_padding": ForeignName((), "a speed knob: grpo packs where its attention "
                                                                  "allows, model.attn_implementation"),
    **dict.fromkeys(("actor_rollout_ref.model.use_shm", "actor_rollout_ref.model.use_liger",
                     "actor_rollout_ref.model.use_fused_kernels", "actor_rollout_ref.model.fused_kernel_options.*",
                     "actor_rollout_ref.model.enable_activation_offload", "actor_rollout_ref.model.trust_remote_code",
                     "actor_rollout_ref.model.external_lib", "actor_rollout_ref.model.override_config.*"),
                    ForeignName((), "a speed or loading knob of verl's workers: " + _NOTHING)),
    # actor_rollout_ref.actor
    f"{_ACTOR}optim.lr": ForeignName(("actor.lr",)),
    f"{_ACTOR}optim.lr_warmup_steps": ForeignName(("actor.warmup_steps",), "0 or less hands over to "
                                                  "lr_warmup_steps_ratio", beside=_warmup_steps),
    f"{_ACTOR}optim.lr_warmup_steps_ratio": ForeignName(("actor.warmup_steps",), "a number of steps: int(ratio x "
                                                        "train.steps), as verl rounds it", beside=_warmup_ratio),
    f"{_ACTOR}optim.weight_decay": ForeignName(("actor.weight_decay",), "verl's default 0.01, grpo's 0"),
    f"{_ACTOR}optim.betas": ForeignName(("actor.betas",)),
    f"{_ACTOR}optim.min_lr_ratio": ForeignName(("actor.min_lr_ratio",)),
    f"{_ACTOR}optim.warmup_style": ForeignName(("actor.schedule",), "", {"constant": "constant", "cosine": "cosine"}),
    f"{_ACTOR}optim.lr_scheduler_type": ForeignName(("actor.schedule",), "", {"constant": "constant",
                                                                             "cosine": "cosine"}),
    f"{_ACTOR}optim.num_cycles": ForeignName((), "grpo's cosine is verl's with num_cycles 0.5: one half-wave"),
    f"{_ACTOR}grad_clip": ForeignName(("actor.max_grad_norm",)),
    f"{_ACTOR}optim.clip_grad": ForeignName(("actor.max_grad_norm",), "the Megatron optimizer's spelling of "
                                            "grad_clip"),
    f"{_ACTOR}ppo_mini_batch_size": ForeignName(("algo.updates_per_batch", "rollout.problems_per_step"), (
        f"verl makes one optimizer step per mini-batch, several per generation when it is smaller than "
        f"data.train_batch_size; {_STEP}: no equivalent for that"), beside=lambda value, given: _updates(given)),
    f"{_ACTOR}ppo_epochs": ForeignName(("algo.updates_per_batch",), "the same where ppo_mini_batch_size is at least "
                                       "data.train_batch_size", beside=lambda value, given: _updates(given)),
    f"{_ACTOR}ppo_micro_batch_size_per_gpu": ForeignName(("algo.micro_batch_size",)),
    f"{_ACTOR}ppo_micro_batch_size": ForeignName(("algo.micro_batch_size",), "grpo's is per process: this divided by "
                                                 "the GPUs", carries=False),
    f"{_ACTOR}use_dynamic_bsz": ForeignName((), _TOKENS),
    f"{_ACTOR}ppo_max_token_len_per_gpu": ForeignName((), _TOKENS),
    f"{_ACTOR}use_kl_loss": ForeignName(("algo.kl_coef",), "on: algo.kl_coef=kl_loss_coef", beside=_kl_switch),
    f"{_ACTOR}kl_loss_coef": ForeignName(("algo.kl_coef",), "verl adds it only with use_kl_loss=True",
                                         beside=_kl_coef),
    f"{_ACTOR}kl_loss_type": ForeignName(("algo.kl_estimator",), "low_var_kl is k3 (verl also clamps each token's to "
                                         "[-10, 10]), kl and k1 are k1; abs, mse, full and the straight-through ones "
                                         "have no grpo equivalent", {"low_var_kl": "k3", "kl": "k1", "k1": "k1",
                                                                     "k3": "k3"}),
    f"{_ACTOR}entropy_coeff": ForeignName((), "grpo's loss has no entropy term"),
    f"{_ACTOR}clip_ratio": ForeignName(("algo.clip_low", "algo.clip_high"), "both bounds, where clip_ratio_low and "
                                       "clip_ratio_high are not set", beside=_clip),
    f"{_ACTOR}clip_ratio_low": ForeignName(("algo.clip_low",)),
    f"{_ACTOR}clip_ratio_high": ForeignName(("algo.clip_high",)),
    f"{_ACTOR}clip_ratio_c": ForeignName((), "verl's dual clip caps a negative-advantage token's loss at clip_ratio_c "
                                             "(3 by default) times the advantage's size; grpo's surrogate has no dual "
                                             "clip"),
    f"{_ACTOR}loss_agg_mode": ForeignName(("algo.loss_agg",), "token-mean: token_mean; seq-mean-token-mean: "
                                          "seq_mean; seq-mean-token-sum and verl's seq-mean-token-sum-norm (token sum "
                                          "/ loss_scale_factor, not divided by the sequences) have no exact grpo "
                                          "equivalent: grpo's seq_sum_norm divides by rollout.max_new_tokens x "
                                          "sequences", beside=_aggregation),
    f"{_ACTOR}loss_scale_factor": ForeignName((), "grpo's seq_sum_norm divides by rollout.max_new_tokens x sequences"),
    f"{_ACTOR}policy_loss.loss_mode": ForeignName(("algo.ratio_level", "algo.loss_agg"), "gspo: GSPO; vanilla is "
                                                  "grpo's default token ratio, less verl's dual clip; clip-cov, "
                                                  "kl-cov, gpg and the rest have no grpo equivalent",
                                                  {"gspo": "sequence"}, form=(
                                                      "algo.ratio_level={} algo.loss_agg=seq_mean")),
    f"{_ACTOR}ulysses_sequence_parallel_size": ForeignName((), "grpo has no sequence parallelism"),
    f"{_ACTOR}fsdp_config.*": ForeignName((), _SHARDING),
    f"{_ACTOR}megatron.*": ForeignName((), _MEGATRON),
    f"{_ACTOR}strategy": ForeignName((), _SHARDING),
    f"{_ACTOR}shuffle": ForeignName((), "grpo has no mini-batches to shuffle: each optimizer step takes the whole "
                                        "batch"),
    f"{_ACTOR}entropy_checkpointing": ForeignName((), "grpo computes no entropy term"),
    f"{_ACTOR}use_torch_compile": ForeignName((), _NOTHING),
    f"{_ACTOR}checkpoint.*": ForeignName((), "grpo's checkpoints hold the model, optimizer and run state; "
                                             "checkpoint.keep_last bounds them"),
    # actor_rollout_ref.ref
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": ForeignName(("algo.micro_batch_size",), _MICRO,
                                                                           carries=False),
    "actor_rollout_ref.ref.log_prob_micro_batch_size": ForeignName(("algo.micro_batch_size",), _MICRO, carries=False),
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": ForeignName((), _TOKENS),
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": ForeignName((), _TOKENS),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": ForeignName((), "grpo has no sequence parallelism"),
    "actor_rollout_ref.ref.fsdp_config.*": ForeignName((), _SHARDING),
    "actor_rollout_ref.ref.megatron.*": ForeignName((), _MEGATRON),
    **dict.fromkeys(("actor_rollout_ref.ref.sync_ref_model", "actor_rollout_ref.ref.ref_model_sync_steps",
                     "actor_rollout_ref.ref.ref_model_mixup_alpha"),
                    ForeignName((), "grpo's reference model is the initial policy, frozen for the run")),
    # actor_rollout_ref.rollout
    f"{_ROLLOUT}n": ForeignName(("rollout.samples_per_problem",)),
    f"{_ROLLOUT}name": ForeignName(("rollout.engine",), "grpo's vLLM and SGLang are supervised servers beside the "
                                   "trainer, not engines inside its workers", {"vllm": "vllm", "sglang": "sglang",
                                                                               "hf": "transformers"}),
    f"{_ROLLOUT}mode": ForeignName((), "grpo's server engines take requests concurrently either way; "
                                      "rollout.max_staleness is another thing, generating ahead of the update"),
    f"{_ROLLOUT}temperature": ForeignName(("rollout.temperature",)),
    f"{_ROLLOUT}top_p": ForeignName(("rollout.top_p",)),
    f"{_ROLLOUT}top_k": ForeignName((), "grpo samples with rollout.temperature and rollout.top_p alone; verl's -1 is "
                                        "off"),
    f"{_ROLLOUT}do_sample": ForeignName((), "grpo's rollouts always sample"),
    f"{_ROLLOUT}gpu_memory_utilization": ForeignName(("rollout.server.memory_fraction",)),
    f"{_ROLLOUT}max_num_seqs": ForeignName(("rollout.server.max_concurrent_requests",), "grpo passes it as vLLM's "
                                           "--max-num-seqs"),
    f"{_ROLLOUT}tensor_model_parallel_size": ForeignName(("rollout.server.extra_args",), "vLLM's "
                                                         "--tensor-parallel-size, SGLang's --tp", beside=_engine_knob(
                                                             ("vllm", "sglang"), lambda v: integer(v) is not None)),
    f"{_ROLLOUT}enable_chunked_prefill": ForeignName(("rollout.server.extra_args",), f"{_VLLM}=[--enable-chunked-"
                                                     "prefill]; off: no flag turns it off in every vLLM release",
                                                     beside=_engine_knob(("vllm",), lambda v: v is True)),
    f"{_ROLLOUT}max_num_batched_tokens": ForeignName(("rollout.server.extra_args",), f"{_VLLM}=[--max-num-batched-"
                                                     "tokens,N]", beside=_engine_knob(
                                                         ("vllm",), lambda v: integer(v) is not None)),
    f"{_ROLLOUT}enforce_eager": ForeignName(("rollout.server.extra_args",), f"{_VLLM}=[--enforce-eager]; off: "
                                            "vLLM's default", beside=_engine_knob(("vllm",), lambda v: v is True)),
    f"{_ROLLOUT}data_parallel_size": ForeignName(("rollout.server.extra_args",), f"{_VLLM}=[--data-parallel-size,N] "
                                                 "(1: vLLM's default); rollout.server.replicas starts separate "
                                                 "servers instead", carries=False),
    f"{_ROLLOUT}expert_parallel_size": ForeignName(("rollout.server.extra_args",), f"{_VLLM}=[--enable-expert-"
                                                   "parallel], its size tensor x data parallel", carries=False),
    f"{_ROLLOUT}dtype": ForeignName(("model.dtype",), "grpo's server runs the model's dtype", carries=False),
    f"{_ROLLOUT}free_cache_engine": ForeignName((), "grpo's server stays up beside the trainer"),
    f"{_ROLLOUT}load_format": ForeignName((), "grpo's server loads the model from its directory and takes each "
                                              "update by a checked weight sync"),
    f"{_ROLLOUT}layered_summon": ForeignName((), "grpo syncs merged weights to its server"),
    f"{_ROLLOUT}log_prob_micro_batch_size_per_gpu": ForeignName(("algo.micro_batch_size",), _MICRO, carries=False),
    f"{_ROLLOUT}log_prob_micro_batch_size": ForeignName(("algo.micro_batch_size",), _MICRO, carries=False),
    f"{_ROLLOUT}log_prob_use_dynamic_bsz": ForeignName((), _TOKENS),
    f"{_ROLLOUT}log_prob_max_token_len_per_gpu": ForeignName((), _TOKENS),
    f"{_ROLLOUT}calculate_log_probs": ForeignName((), "grpo takes the sampler's log-probs from its server "
                                                      "(algo.recompute_old_logprobs)"),
    f"{_ROLLOUT}val_kwargs.*": ForeignName((), _EVAL),
    f"{_ROLLOUT}engine_kwargs.*": ForeignName(("rollout.server.extra_args",), "the server's own flags",
                                              carries=False),
    f"{_ROLLOUT}multi_turn.*": ForeignName((), "grpo's rollouts are single-turn"),
    f"{_ROLLOUT}agent.*": ForeignName((), "grpo's rollouts are single-turn"),
    # rewards
    "reward_model.reward_manager": ForeignName((), "grpo scores with task.reward: its math reward or your functions, "
                                                   "module:function"),
    "reward_model.enable": ForeignName((), "grpo takes reward functions, not reward models: load the model in a "
                                           "function and give its import path (task.reward)"),
    "reward_model.overlong_buffer.*": ForeignName((), _OVERLONG),
    "reward_model.reward_kwargs.overlong_buffer_cfg.*": ForeignName((), _OVERLONG),
    "reward_model.reward_kwargs.max_resp_len": ForeignName((), _OVERLONG),
    "custom_reward_function.path": ForeignName(("task.reward",), "task.reward=MODULE:FUNCTION; verl's "
                                               "compute_score(data_source, solution_str, ground_truth, extra_info) "
                                               "becomes a function(completions, **kwargs) returning one score each",
                                               carries=False),
    "custom_reward_function.name": ForeignName(("task.reward",), "as custom_reward_function.path", carries=False),
    "critic.*": ForeignName((), _NO_CRITIC),
    # trainer
    "trainer.total_epochs": ForeignName(("train.epochs",)),
    "trainer.total_training_steps": ForeignName(("train.steps",)),
    "trainer.save_freq": ForeignName(("checkpoint.every_steps",), "", {-1: 0}, only_values=False),
    "trainer.test_freq": ForeignName(("eval.every_steps", "eval.after_training"), beside=_evaluation),
    "trainer.val_before_train": ForeignName(("eval.before_training",), "verl's default true, grpo's false"),
    "trainer.val_only": ForeignName((), "grpo eval --model MODEL evaluates without training"),
    "trainer.logger": ForeignName(("logging.wandb_project",), "wandb: logging.wandb_project=trainer.project_name; "
                                  "grpo always logs to the console and (logging.tensorboard) TensorBoard",
                                  beside=_wandb),
    "trainer.project_name": ForeignName(("logging.wandb_project",), "where wandb is among trainer.logger",
                                        beside=_wandb),
    "trainer.experiment_name": ForeignName(("name",)),
    "trainer.default_local_dir": ForeignName(("run_dir",), "given no value: no directory to write"),
    "trainer.default_hdfs_dir": ForeignName((), "grpo writes to run_dir only"),
    "trainer.resume_mode": ForeignName(("recover",), "auto: auto; resume_path: resume_from=CHECKPOINT on the command "
                                       "line; disable: a new run_dir", {"auto": "auto"}),
    "trainer.resume_from_path": ForeignName(("resume_from",), "", form="resume_from={}"),
    "trainer.max_actor_ckpt_to_keep": ForeignName(("checkpoint.keep_last",), "null keeps every one: grpo keeps the "
                                                  "newest checkpoint.keep_last and the best", beside=_kept),
    "trainer.remove_previous_ckpt_in_save": ForeignName(("checkpoint.keep_last",), "true: checkpoint.keep_last=1",
                                                        {True: 1}),
    "trainer.critic_warmup": ForeignName((), _NO_CRITIC),
    "trainer.n_gpus_per_node": ForeignName((), _GPUS),
    "trainer.nnodes": ForeignName((), _GPUS),
    "trainer.log_val_generations": ForeignName((), "grpo writes every evaluation's answers to eval.jsonl"),
    "trainer.balance_batch": ForeignName((), _NOTHING),
    "trainer.device": ForeignName(("model.device",), carries=False),
    **dict.fromkeys(("ray_init.*", "ray_kwargs.*", "global_profiler.*", "trainer.profile_steps",
                     "trainer.ray_wait_register_center_timeout", "trainer.del_local_ckpt_after_load"),
                    ForeignName((), _NOTHING)),
}

# Names of verl's forks that scripts use beyond verl's config: Search-R1's multi-turn search (PeterGriffinJin/
# Search-R1 and its many copies), SimpleRL-Zoo's (hkust-nlp/simpleRL-reason); docs/coming-from-verl.md's second table.
FORK_NAMES: dict[str, ForeignName] = {
    f"{_ROLLOUT}n_agent": ForeignName(("rollout.samples_per_problem",), "Search-R1's group size"),
    "data.train_data_num": ForeignName(("task.max_train_problems",), "Search-R1's is a random N, grpo's the first N; "
                                       "null: all", {None: None}),
    "data.val_data_num": ForeignName((), "grpo evaluates the first eval.max_samples problems of the test split"),
    "data.shuffle_train_dataloader": ForeignName((), "grpo always shuffles, seeded by train.seed"),
    **dict.fromkeys(("data.max_start_length", "data.max_obs_length", "algorithm.no_think_rl",
                     f"{_ACTOR}state_masking", "max_turns", "retriever.*", "do_search"), ForeignName((), _SEARCH)),
    "trainer.remove_clip": ForeignName(("algo.mask_truncated",), "SimpleRL-Zoo's: responses that reached "
                                       "max_response_length leave the loss"),
    "trainer.remove_previous_ckpt": ForeignName(("checkpoint.keep_last",), "SimpleRL-Zoo's (verl's in early 2025): "
                                                "true: checkpoint.keep_last=1; false keeps every one, grpo the newest "
                                                "checkpoint.keep_last and the best", {True: 1}),
    f"{_ROLLOUT}micro_rollout_batch_size": ForeignName((), "SimpleRL-Zoo's prompts per vLLM call: grpo sends every "
                                                           "request to its server at once"),
}

_ALL = {**VERL_NAMES, **FORK_NAMES}
VERL = NameTable("verl", "docs/coming-from-verl.md", {k: v for k, v in _ALL.items() if not k.endswith(".*")},
                 {k.removesuffix("*"): v for k, v in _ALL.items() if k.endswith(".*")},
                 stranger="not a verl name grpo knows", why_none=True)


def flat_names(given: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections (as dotted overrides and a YAML file give them) as dotted names -> values, down to the names
    the table knows; a section under a family (`actor_rollout_ref.actor.megatron.override_transformer_config`) down
    to its leaves, so that each name given is answered by its own name."""
    flat: dict[str, Any] = {}
    for key, value in given.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and name not in VERL.names:
            flat.update(flat_names(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def verl_names_error(given: Mapping[Any, Any]) -> str | None:
    """The error for the top level's unknown keys `given` when any holds verl's names: one message for all of them
    (one line naming grpo's key for a single name). None when none is verl's."""
    flat = flat_names(given)
    if not any(VERL.entry(name) is not None for name in flat):
        return None
    if len(flat) == 1:
        ((name, value),) = flat.items()
        return name_error(VERL, name, name, value)
    return names_error(VERL, "the top level", flat)
