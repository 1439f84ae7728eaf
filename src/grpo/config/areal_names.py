"""AReaL's config names and grpo's keys for them, so an AReaL experiment YAML given as grpo's config, or its keys
as overrides (`rollout.max_concurrent_rollouts=16 sglang.mem_fraction_static=0.6 ...`), is answered in one
message: each name's grpo override where the meaning is the same, grpo's keys where it must be set by hand, or
what grpo does instead. AReaL's sections share names with grpo's (`actor`, `rollout`, `recover`), so its names
are read from the whole config, inside grpo's own sections too (`unknown_names`); `${...}` references are
resolved and `1e-8` read as a number, as AReaL's OmegaConf does. Each equivalence is checked against AReaL's
docs/cli_reference.md and the code that reads the name (areal/engine/ppo/actor.py's advantages and KL,
areal/utils/functional.py's loss); where they differ, the table says there is no exact equivalent rather than
map it. docs/coming-from-areal.md's names tables say the same for people; a test keeps them in step."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from grpo.config.foreign_names import ForeignName, NameTable, as_yaml, integer, name_error, names_error, number
from grpo.config.schema import RunConfig

# AReaL's defaults, where a name's meaning depends on another the config leaves out.
_DEFAULTS = {"actor.optimizer.beta1": 0.9, "actor.optimizer.beta2": 0.999, "actor.lora_rank": 32,
             "actor.reward_scaling": 1.0, "actor.reward_bias": 0.0, "actor.reward_norm.std_unbiased": True,
             "actor.reward_norm.eps": 1e-5, "actor.reward_norm.mean_leave1out": False}
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # `1e-8`: text to PyYAML, a number to OmegaConf
_REFERENCE = re.compile(r"\$\{([\w.]+)\}")
_ENGINES = {"sglang": "SGLang", "vllm": "vLLM"}
_ALLOCATION = re.compile(r"(sglang|vllm)[:.]((?:[dpt]\d+)+)")
# The engine flags said as a whole: the names with a meaning of their own in grpo, and those grpo's server has
# no use for. Every other name under sglang. or vllm. is the server's own flag.
_OWN_FLAGS = {"model_path", "model", "random_seed", "seed", "dtype", "skip_tokenizer_init", "mem_fraction_static",
              "gpu_memory_utilization", "max_running_requests", "max_num_seqs", "enable_lora", "lora_modules",
              "max_lora_rank", "lora_target_modules", "lora_paths", "max_loaded_loras", "max_loras_per_batch",
              "lora_backend", "worker_extension_cls", "distributed_executor_backend", "uvicorn_log_level",
              "enable_sleep_mode", "enable_memory_saver"}


def _given(given: Mapping[str, Any], name: str) -> Any:
    return given.get(name, _DEFAULTS.get(name))


def _whole(value: float) -> Any:
    """A number as an override writes it: 30, not 30.0."""
    return int(value) if value.is_integer() else value


def _allocation(given: Mapping[str, Any]) -> tuple[str, dict[str, int]] | None:
    """The generation engine and its sizes (d: servers, t: tensor parallelism) from `allocation_mode`
    (`sglang:d4p1t1+d4p1t1`, `sglang.d1p1t1+...`, `vllm:d4t1+fsdp:d4`) or 2026's `rollout.backend`
    (`vllm:d1p1t1`); None where neither names one."""
    for name in ("rollout.backend", "allocation_mode"):
        match = _ALLOCATION.match(str(given.get(name, "")))
        if match:
            sizes = {part[0]: int(part[1:]) for part in re.findall(r"[dpt]\d+", match.group(2))}
            return match.group(1), sizes
    return None


def _engine_flags(engine: str, given: Mapping[str, Any]) -> list[Any]:
    """The server flags AReaL would pass `engine`'s server: the allocation's tensor parallelism, then each flag of
    its section in the order given (true: the flag alone; false and null: none)."""
    allocation = _allocation(given)
    tp = allocation[1].get("t", 1) if allocation and allocation[0] == engine else 1
    flags: list[Any] = ([] if tp == 1 else ["--tp" if engine == "sglang" else "--tensor-parallel-size", tp])
    for name, value in given.items():
        section, _, flag = name.partition(".")
        if section != engine or flag in _OWN_FLAGS or value is None or value is False or value == "":
            continue
        flags += [f"--{flag.replace('_', '-')}"] + ([] if value is True else [value])
    return flags


def _flag_names(engine: str, given: Mapping[str, Any]) -> bool:
    return any(n.partition(".")[0] == engine and n.partition(".")[2] not in _OWN_FLAGS for n in given)


def _server_flags(value: Any, given: Mapping[str, Any]) -> str | None:
    allocation = _allocation(given)
    engine = allocation[0] if allocation else next(
        (e for e in ("sglang", "vllm") if _flag_names(e, given)), None)
    flags = _engine_flags(engine, given) if engine else []
    return f"rollout.server.extra_args={as_yaml(flags)}" if flags else None


def _engine(value: Any, given: Mapping[str, Any]) -> str | None:
    """allocation_mode and rollout.backend: grpo's engine and servers; a tensor parallelism of its own, where no
    flag of the engine's section says the flags."""
    allocation = _allocation(given)
    if allocation is None:
        return None
    engine, sizes = allocation
    said = f"rollout.engine={engine}" + (f" rollout.server.replicas={sizes['d']}" if sizes.get("d", 1) > 1 else "")
    if sizes.get("t", 1) > 1 and not _flag_names(engine, given):
        said += " " + str(_server_flags(value, given))
    return said


def _concurrency(rollouts: Any, given: Mapping[str, Any]) -> str | None:
    """max_concurrent_rollouts counts prompts over all servers, each with its gconfig.n_samples requests; grpo's
    count is of requests per server."""
    allocation, samples, count = _allocation(given), integer(given.get("gconfig.n_samples")), integer(rollouts)
    if allocation is None or samples is None or count is None:
        return None
    servers = allocation[1].get("d", 1)
    requests = count * samples
    return f"rollout.server.max_concurrent_requests={requests // servers}" if requests % servers == 0 else None


def _staleness(lag: Any, given: Mapping[str, Any]) -> str | None:
    """max_head_offpolicyness, and async_training=false (each batch generated in turn)."""
    if given.get("async_training") is False:
        return "rollout.max_staleness=0"
    return f"rollout.max_staleness={lag}" if integer(lag) is not None and lag >= 0 else None


def _clip(low: Any, given: Mapping[str, Any]) -> str | None:
    """eps_clip: both bounds, or the lower one where eps_clip_higher is given."""
    if number(low) is None:
        return None
    if "actor.eps_clip_higher" in given:
        return f"algo.clip_low={as_yaml(low)}"
    return f"algo.clip_low={as_yaml(low)} algo.clip_high={as_yaml(low)}"


def _betas(value: Any, given: Mapping[str, Any]) -> str | None:
    betas = [_given(given, "actor.optimizer.beta1"), _given(given, "actor.optimizer.beta2")]
    return f"actor.betas={as_yaml(betas)}" if all(number(b) is not None for b in betas) else None


def _lora(value: Any, given: Mapping[str, Any]) -> str | None:
    """use_lora (the actor's or the engine's) with lora_rank: grpo's LoRA is on where model.lora.rank > 0."""
    use = given.get("actor.use_lora", given.get("rollout.use_lora"))
    if use is False:
        return "model.lora.rank=0"
    rank = integer(_given(given, "actor.lora_rank"))
    return f"model.lora.rank={rank}" if use is True and rank is not None else None


def _every(steps_or_secs: str, key: str, per: float) -> Callable[[Any, Mapping[str, Any]], str | None]:
    """saver's and recover's frequencies as grpo's one checkpoint's: the more frequent of the two (null: never)."""
    def beside(value: Any, given: Mapping[str, Any]) -> str | None:
        given_here = [given[n] for n in (f"saver.freq_{steps_or_secs}", f"recover.freq_{steps_or_secs}")
                      if n in given]
        if any(v is not None and (number(v) is None or v <= 0) for v in given_here):
            return None
        frequencies = [float(v) for v in given_here if v is not None]
        return f"{key}={_whole(min(frequencies) / per) if frequencies else 0}"
    return beside


def _wandb(value: Any, given: Mapping[str, Any]) -> str | None:
    project = given.get("stats_logger.wandb.project")
    return f"logging.wandb_project={as_yaml(project)}" if (
        given.get("stats_logger.wandb.mode") == "online" and project) else None


def _retries(tries: Any, given: Mapping[str, Any]) -> str | None:
    """request_retries counts the tries in all, grpo's max_retries the retries after the first."""
    count = integer(tries)
    return f"rollout.max_retries={count - 1}" if count is not None and count >= 1 else None


def _temperature(value: Any, given: Mapping[str, Any]) -> str | None:
    """actor.temperature: the trained log-probs'; grpo's one temperature is both the sampler's and the trainer's."""
    sampled = given.get("gconfig.temperature", value)
    return f"rollout.temperature={as_yaml(value)}" if number(value) is not None and sampled == value else None


def _kl(coef: Any, given: Mapping[str, Any]) -> str | None:
    return f"algo.kl_coef={as_yaml(coef)}" if number(coef) == 0 else None


def _advantages(value: Any, given: Mapping[str, Any]) -> str | None:
    """reward_norm as grpo's advantages, where AReaL normalizes nothing after it (adv_norm off): group mean and
    std are algo.advantage_norm=group, whose eps a reward_scaling s divides ((s r - s m) / (s sd + eps)); group
    mean alone is none, where no scaling multiplies the advantages."""
    if any(given.get(f"actor.adv_norm.{level}") is not None for level in ("mean_level", "std_level")):
        return None
    mean, std = given.get("actor.reward_norm.mean_level"), given.get("actor.reward_norm.std_level")
    scale = number(_given(given, "actor.reward_scaling"))
    if mean != "group" or _given(given, "actor.reward_norm.mean_leave1out") or not scale or scale <= 0:
        return None
    if std is None and "actor.reward_norm.std_level" in given:
        return "algo.advantage_norm=none" if scale == 1 else None
    eps = number(_given(given, "actor.reward_norm.eps"))
    if std != "group" or eps is None:
        return None
    spread = "sample" if _given(given, "actor.reward_norm.std_unbiased") else "population"
    eps = float(f"{eps / scale:.12g}")  # 1e-5 / 10 is 1.0000000000000002e-06 in floats
    return f"algo.advantage_norm=group algo.advantage_std={spread} algo.advantage_eps={as_yaml(eps)}"


def _dynamic_sampling(on: Any, given: Mapping[str, Any]) -> str | None:
    """DAPO's dynamic sampling as AReaL does it: the groups whose rewards are all equal leave the batch, which is
    not refilled."""
    if not isinstance(on, bool):
        return None
    return "rollout.filter_zero_variance=true rollout.max_refill_rounds=0" if on else \
        "rollout.filter_zero_variance=false"


def _tensorboard(path: Any, given: Mapping[str, Any]) -> str | None:
    return "logging.tensorboard=true" if path else None


_NOTHING = "nothing grpo needs: leave it out"
_GPUS = "grpo's processes are torchrun's: torchrun --nnodes N --nproc-per-node G -m grpo train"
_TOKENS = "grpo's micro-batches are algo.micro_batch_size rows, grouped by length"
_STALE = "grpo caps the proximal/behaviour weight at algo.importance_cap (truncates) rather than drop the token"
_OVERLONG = ("DAPO's overlong punishment: no grpo reward has it built in; a reward function of yours reads "
             "completion_ids (task.reward)")
_SHARDING = "grpo shards with FSDP2 over torchrun's ranks, without offload: grpo plan shows the memory"
_REFERENCE_KNOB = ("grpo's reference is a frozen copy of model.name, loaded with algo.kl_coef > 0: its knobs are the "
                   "policy's")
_ADVANTAGES = ("with adv_norm off: mean and std group are algo.advantage_norm=group algo.advantage_std=sample "
               "algo.advantage_eps=eps/reward_scaling; mean group alone is algo.advantage_norm=none")
_TWICE = ("AReaL normalizes the advantages again over the batch's tokens; grpo's are normalized once, per group "
          "(algo.advantage_norm): no exact equivalent")
_SAVED = "a grpo checkpoint is a loadable model and a run's resume state: the more frequent of saver's and recover's"
_SERVER_FLAG = "a server flag: rollout.server.extra_args, with the others of its section"
_MERGED = "grpo's server serves the merged weights its sync writes: no adapters, no adapter names"
_DATA = ("openai/gsm8k: task.name=gsm8k task.path=hub; others: task.name=dataset with task.path or the split's "
         "files")
_SAMPLING = "grpo samples with rollout.temperature and rollout.top_p alone"
# Each of AReaL's parts is given its own copy of the experiment's names and paths.
_COPIES = ("rollout.experiment_name", "rollout.trial_name", "rollout.fileroot", "rollout.tokenizer_path",
           "rollout.scheduling_spec", "actor.experiment_name", "actor.trial_name", "actor.scheduling_spec",
           *(f"{part}.{name}" for part in ("saver", "recover", "evaluator", "stats_logger")
             for name in ("experiment_name", "trial_name", "fileroot")))


def _engine_names(engine: str, model: str, seed: str, fraction: str, batch: str) -> dict[str, ForeignName]:
    return {f"{engine}.{model}": ForeignName(("model.name",), "the policy's"),
            f"{engine}.{seed}": ForeignName(("train.seed",), "grpo starts its server with train.seed"),
            f"{engine}.dtype": ForeignName(("model.dtype",), "grpo's server runs the model's dtype",
                                           {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}),
            f"{engine}.skip_tokenizer_init": ForeignName((), "grpo sends token ids: leave it out"),
            f"{engine}.{fraction}": ForeignName(("rollout.server.memory_fraction",)),
            f"{engine}.{batch}": ForeignName(("rollout.server.max_concurrent_requests",), "grpo always passes "
                                             "rollout.server.max_concurrent_requests as the server's batch limit; "
                                             "null: it is still passed", beside=lambda v, g: (
                                                 f"rollout.server.max_concurrent_requests={v}"
                                                 if integer(v) is not None and v > 0 else None))}


AREAL_NAMES: dict[str, ForeignName] = {
    # the experiment
    "experiment_name": ForeignName(("name",)),
    "trial_name": ForeignName((), "grpo names a run by name alone and writes it to run_dir: another trial is "
                                  "another name or run_dir"),
    "seed": ForeignName(("train.seed",), "grpo's one seed also seeds sampling and its server"),
    "total_train_epochs": ForeignName(("train.epochs",)),
    "total_train_steps": ForeignName(("train.steps",), "", {None: None}, only_values=False),
    "total_train_n_seqs": ForeignName((), "grpo counts steps (train.steps) or epochs, not samples"),
    "tokenizer_path": ForeignName((), "grpo uses the model's tokenizer; task.chat_template gives another template"),
    "enable_offload": ForeignName((), _SHARDING),
    "allocation_mode": ForeignName(("rollout.engine", "rollout.server.replicas"), "the generation part: the "
                                   "engine and its servers; its tensor parallelism is a server flag (--tp, "
                                   f"--tensor-parallel-size); the trainer's GPUs: {_GPUS}", beside=_engine),
    "async_training": ForeignName(("rollout.max_staleness",), "false: rollout.max_staleness=0; grpo generates "
                                  "ahead of the update where rollout.max_staleness > 0",
                                  beside=lambda v, g: "rollout.max_staleness=0" if v is False else None),
    "dynamic_bs": ForeignName(("rollout.max_refill_rounds",), "true: a step trains the groups its filter kept, "
                              "no refill: rollout.max_refill_rounds=0", {True: 0}),
    **{f"cluster.{name}": ForeignName((), _GPUS) for name in ("n_nodes", "n_gpus_per_node")},
    "cluster.fileroot": ForeignName(("run_dir",), "grpo writes one run directory, run_dir (runs/{name})",
                                    carries=False),
    "cluster.name_resolve.*": ForeignName((), _NOTHING),
    "cluster.cluster_name": ForeignName((), _NOTHING),
    "scheduler.*": ForeignName((), _NOTHING),
    "launcher.*": ForeignName((), "resources of AReaL's launcher: grpo's server and trainer take what the machine "
                                  "has (memory.limit_gib bounds the trainer's)"),
    "perf_tracer.*": ForeignName((), _NOTHING),
    "memory_profiler.*": ForeignName((), _NOTHING),
    # gconfig
    "gconfig.n_samples": ForeignName(("rollout.samples_per_problem",)),
    "gconfig.max_new_tokens": ForeignName(("rollout.max_new_tokens",)),
    "gconfig.temperature": ForeignName(("rollout.temperature",)),
    "gconfig.top_p": ForeignName(("rollout.top_p",)),
    "gconfig.stop": ForeignName(("rollout.stop",), "", {None: []}, only_values=False),
    "gconfig.min_new_tokens": ForeignName((), "grpo sets no minimum length (AReaL's default 0)"),
    "gconfig.greedy": ForeignName((), "grpo's rollouts always sample (rollout.temperature > 0)"),
    **{f"gconfig.{name}": ForeignName((), _SAMPLING) for name in ("top_k", "frequency_penalty", "stop_token_ids")},
    "gconfig.max_tokens": ForeignName((), "grpo bounds a sequence with task.max_prompt_tokens and "
                                          "rollout.max_new_tokens"),
    "gconfig.lora_name": ForeignName((), _MERGED),
    "eval_gconfig.*": ForeignName((), "a run's evaluations are greedy, one answer a problem; grpo eval --samples N "
                                      "--temperature T samples"),
    # rollout (AReaL's InferenceEngineConfig)
    **dict.fromkeys(_COPIES, ForeignName((), _NOTHING)),
    "rollout.backend": ForeignName(("rollout.engine", "rollout.server.replicas"), "2026's allocation_mode for the "
                                   "engine: as allocation_mode", beside=_engine),
    "rollout.max_concurrent_rollouts": ForeignName(("rollout.server.max_concurrent_requests",), "AReaL's counts "
                                                   "prompts over all servers, each with gconfig.n_samples requests; "
                                                   "grpo's counts requests per server: max_concurrent_rollouts x "
                                                   "n_samples / servers", beside=_concurrency),
    "rollout.queue_size": ForeignName((), "grpo's staleness bound alone sizes what it generates ahead "
                                          "(rollout.max_staleness)"),
    "rollout.consumer_batch_size": ForeignName(("rollout.problems_per_step",)),
    "rollout.max_head_offpolicyness": ForeignName(("rollout.max_staleness",), "grpo generates each batch with one "
                                                  "policy version; AReaL may interrupt a generation for a weight "
                                                  "update and continue it", beside=_staleness),
    "rollout.enable_rollout_tracing": ForeignName((), "grpo's events.jsonl records its server's failures: leave it "
                                                      "out"),
    "rollout.dump_to_file": ForeignName((), "grpo writes logging.samples_per_step completions a step to "
                                            "samples.jsonl, not every one"),
    "rollout.request_timeout": ForeignName(("rollout.server.request_timeout_s",), "grpo also finds a hung server "
                                           "by its health check (rollout.server.health_timeout_s, stall_s), "
                                           "whatever this says"),
    "rollout.request_retries": ForeignName(("rollout.max_retries",), "AReaL's counts the tries in all, grpo's the "
                                           "retries after the first", beside=_retries),
    "rollout.setup_timeout": ForeignName(("rollout.server.startup_timeout_s",)),
    "rollout.use_lora": ForeignName(("model.lora.rank",), "with actor.lora_rank", beside=_lora),
    **{f"rollout.{name}": ForeignName((), _NOTHING) for name in ("schedule_policy", "check_trajectory_format",
                                                                   "pause_grace_period")},
    # actor (AReaL's PPOActorConfig)
    "actor.path": ForeignName(("model.name",)),
    "actor.init_from_scratch": ForeignName((), "grpo starts from the model's weights"),
    "actor.disable_dropout": ForeignName((), "grpo trains with the model's own dropout (0 in most causal LMs' "
                                             "configs, Qwen2.5's and Qwen3's too)"),
    "actor.gradient_checkpointing": ForeignName(("model.gradient_checkpointing",)),
    "actor.dtype": ForeignName(("model.dtype",), "grpo keeps fp32 master weights under bfloat16 "
                               "(actor.fp32_master_weights)", {"bfloat16": "bfloat16", "float16": "float16",
                                                               "float32": "float32"}),
    "actor.attn_impl": ForeignName(("model.attn_implementation",), "", {
        "sdpa": "sdpa", "flash_attention_2": "flash_attention_2", "eager": "eager"}),
    "actor.mb_spec.*": ForeignName((), _TOKENS),
    "actor.pad_to_maximum": ForeignName((), _TOKENS),
    "actor.backend": ForeignName((), "grpo shards with FSDP2 over torchrun's ranks: torchrun --nproc-per-node N "
                                     "-m grpo train"),
    "actor.fsdp.*": ForeignName((), _SHARDING),
    "actor.megatron.*": ForeignName((), "grpo trains with FSDP2 over torchrun's ranks, not Megatron"),
    "actor.grad_reduce_dtype": ForeignName((), _NOTHING),
    "actor.weight_update_mode": ForeignName((), "grpo writes the weights for its server to reload "
                                                "(rollout.server.weights_dir) and checks them with a probe"),
    "actor.group_size": ForeignName(("rollout.samples_per_problem",)),
    "actor.temperature": ForeignName(("rollout.temperature",), "grpo's one temperature is the sampler's and the "
                                     "trainer's", beside=_temperature),
    "actor.max_new_tokens": ForeignName(("rollout.max_new_tokens",)),
    "actor.optimizer": ForeignName((), "null: no optimizer (a frozen model); grpo's reference is frozen"),
    "actor.optimizer.type": ForeignName((), "grpo's optimizer is torch's AdamW, AReaL's adam: leave it out; sgd "
                                            "and adam_bf16 have no grpo equivalent"),
    "actor.optimizer.lr": ForeignName(("actor.lr",)),
    "actor.optimizer.weight_decay": ForeignName(("actor.weight_decay",), "AReaL's default 0.01, grpo's 0"),
    "actor.optimizer.beta1": ForeignName(("actor.betas",), "both betas as a list", beside=_betas),
    "actor.optimizer.beta2": ForeignName(("actor.betas",), "both betas as a list", beside=_betas),
    "actor.optimizer.eps": ForeignName(("actor.eps",)),
    "actor.optimizer.lr_scheduler_type": ForeignName(("actor.schedule",), "", {
        "constant": "constant", "linear": "linear", "cosine": "cosine"}),
    "actor.optimizer.min_lr_ratio": ForeignName(("actor.min_lr_ratio",), "AReaL's linear schedule ignores it"),
    "actor.optimizer.gradient_clipping": ForeignName(("actor.max_grad_norm",)),
    "actor.optimizer.warmup_steps_proportion": ForeignName(("actor.warmup_steps",), "a number of steps: int("
                                                           "proportion x epochs x steps an epoch), as AReaL rounds "
                                                           "it; 0: actor.warmup_steps=0", {0: 0}),
    **{f"actor.optimizer.{name}": ForeignName((), _NOTHING) for name in (
        "offload", "initial_loss_scale", "min_loss_scale", "loss_scale_window", "hysteresis")},
    "actor.eps_clip": ForeignName(("algo.clip_low", "algo.clip_high"), "both bounds, where eps_clip_higher is not "
                                  "given", beside=_clip),
    "actor.eps_clip_higher": ForeignName(("algo.clip_high",)),
    "actor.c_clip": ForeignName((), "AReaL's dual clip caps a negative-advantage token's loss at c_clip times the "
                                    "advantage's size; grpo's surrogate has no dual clip"),
    "actor.reward_scaling": ForeignName((), "grpo has no reward scaling; under reward_norm's group mean and std a "
                                            "scale s only divides its eps (algo.advantage_eps)"),
    "actor.reward_bias": ForeignName((), "grpo has no reward bias; a group's mean subtracts it"),
    "actor.reward_clip": ForeignName((), "grpo clips no reward"),
    "actor.kl_ctl": ForeignName(("algo.kl_coef",), "AReaL subtracts kl_ctl x KL from each token's reward; grpo's "
                                "KL is a loss term: 0 is the same, above 0 has no grpo equivalent", beside=_kl),
    "actor.kl_estimator": ForeignName((), "the estimator of AReaL's in-reward KL; grpo's KL is a loss term "
                                          "(algo.kl_coef, algo.kl_estimator)"),
    "actor.ppo_n_minibatches": ForeignName(("algo.updates_per_batch",), "one mini-batch is one optimizer step on "
                                           "the whole batch; more are several steps on parts of one generation, "
                                           "which grpo does not do", {1: 1}),
    "actor.recompute_logprob": ForeignName(("algo.recompute_old_logprobs",)),
    "actor.use_decoupled_loss": ForeignName((), "AReaL's also weights each token by proximal/behaviour when "
                                                "synchronous; grpo uses the decoupled objective where "
                                                "rollout.max_staleness > 0"),
    "actor.behav_imp_weight_cap": ForeignName((), f"AReaL drops a token whose weight exceeds it; {_STALE}"),
    "actor.rejection_sampling.*": ForeignName((), f"2026's filter of stale tokens; {_STALE}"),
    "actor.prox_logp_method": ForeignName((), "grpo recomputes the proximal log-probs"),
    "actor.importance_sampling_level": ForeignName(("algo.ratio_level",), "sequence is GSPO's geometric mean, as "
                                                   "grpo's", {"token": "token", "sequence": "sequence"}),
    "actor.dynamic_sampling": ForeignName(("rollout.filter_zero_variance", "rollout.max_refill_rounds"), "AReaL "
                                          "drops the groups whose rewards are all equal and does not refill",
                                          beside=_dynamic_sampling),
    "actor.overlong_reward_penalty": ForeignName((), _OVERLONG),
    "actor.overlong_tokens": ForeignName((), _OVERLONG),
    "actor.overlong_penalty_factor": ForeignName((), _OVERLONG),
    "actor.mask_no_eos_with_zero": ForeignName((), "AReaL sets the reward of an answer cut at the budget to 0 "
                                                   "after normalization; grpo's algo.mask_truncated leaves such "
                                                   "answers out of the loss"),
    "actor.discount": ForeignName((), "GAE's discount: with no critic and 1.0 every token's advantage is the "
                                      "answer's, as grpo's"),
    "actor.gae_lambda": ForeignName((), "GAE's lambda: with no critic and 1.0 every token's advantage is the "
                                        "answer's, as grpo's"),
    "actor.m2_threshold": ForeignName((), "M2PO's token filter: no grpo equivalent"),
    **{f"actor.{name}": ForeignName((), "SAPO's loss: no grpo equivalent") for name in (
        "use_sapo_loss", "sapo_tau_pos", "sapo_tau_neg")},
    **{f"actor.reward_norm.{level}": ForeignName(("algo.advantage_norm", "algo.advantage_std"), _ADVANTAGES,
                                                 beside=_advantages)
       for level in ("mean_level", "std_level", "std_unbiased", "eps", "mean_leave1out")},
    "actor.reward_norm": ForeignName((), "null: no normalization at all; grpo always centres by the group's mean"),
    "actor.reward_norm.group_size": ForeignName(("rollout.samples_per_problem",)),
    "actor.adv_norm": ForeignName((), "null: no second normalization, as grpo's"),
    **{f"actor.adv_norm.{level}": ForeignName((), _TWICE) for level in (
        "mean_level", "std_level", "std_unbiased", "eps", "mean_leave1out", "group_size")},
    "actor.use_lora": ForeignName(("model.lora.rank",), "with actor.lora_rank", beside=_lora),
    "actor.lora_rank": ForeignName(("model.lora.rank",), "where use_lora is true", beside=_lora),
    "actor.lora_alpha": ForeignName(("model.lora.alpha",)),
    "actor.target_modules": ForeignName(("model.lora.target_modules",)),
    "actor.peft_type": ForeignName((), "grpo's adapters are LoRA's: leave it out"),
    "actor.is_critic": ForeignName((), "GRPO trains no critic"),
    **{f"actor.{name}": ForeignName((), _NOTHING) for name in ("log_agent_stats", "log_agent_stats_keys")},
    "ref.path": ForeignName((), "grpo's reference is model.name's initial weights, loaded only with "
                                "algo.kl_coef > 0"),
    "ref.*": ForeignName((), _REFERENCE_KNOB),
    "critic.*": ForeignName((), "GRPO trains no critic"),
    "teacher.*": ForeignName((), "grpo has no distillation from a teacher"),
    # the servers: every SGLang and vLLM flag AReaL passes through, and those with a grpo key of their own
    **_engine_names("sglang", "model_path", "random_seed", "mem_fraction_static", "max_running_requests"),
    **_engine_names("vllm", "model", "seed", "gpu_memory_utilization", "max_num_seqs"),
    **{f"{engine}.{name}": ForeignName((), _MERGED) for engine, name in (
        ("vllm", "enable_lora"), ("vllm", "lora_modules"), ("sglang", "enable_lora"), ("sglang", "max_lora_rank"),
        ("sglang", "lora_target_modules"), ("sglang", "lora_paths"), ("sglang", "max_loaded_loras"),
        ("sglang", "max_loras_per_batch"), ("sglang", "lora_backend"))},
    **{f"{engine}.{name}": ForeignName((), _NOTHING) for engine, name in (
        ("vllm", "worker_extension_cls"), ("vllm", "distributed_executor_backend"), ("vllm", "uvicorn_log_level"),
        ("vllm", "enable_sleep_mode"), ("sglang", "enable_memory_saver"))},
    "sglang.*": ForeignName(("rollout.server.extra_args",), _SERVER_FLAG, beside=_server_flags),
    "vllm.*": ForeignName(("rollout.server.extra_args",), _SERVER_FLAG, beside=_server_flags),
    # data
    "train_dataset.batch_size": ForeignName(("rollout.problems_per_step",)),
    "train_dataset.path": ForeignName(("task.name", "task.path", "task.train_files"), _DATA,
                                      {"openai/gsm8k": "gsm8k"}, form="task.name={} task.path=hub"),
    "valid_dataset.path": ForeignName(("task.name", "task.path", "task.test_files"), _DATA,
                                      {"openai/gsm8k": "gsm8k"}, form="task.name={} task.path=hub"),
    **{f"{split}.max_length": ForeignName(("task.max_prompt_tokens",), "AReaL drops a prompt whose user message "
                                          "is longer; grpo refuses a longer (templated) prompt at load, or with "
                                          "task.truncate_prompts=left cuts it", carries=False)
       for split in ("train_dataset", "valid_dataset")},
    "train_dataset.shuffle": ForeignName((), "grpo always draws each epoch in a shuffled order seeded by "
                                             "train.seed"),
    "valid_dataset.shuffle": ForeignName((), "grpo evaluates the first eval.max_samples problems of the test "
                                             "split"),
    "valid_dataset.batch_size": ForeignName((), "a run's evaluations batch with rollout's"),
    **{f"{split}.{name}": ForeignName((), _NOTHING) for split in ("train_dataset", "valid_dataset")
       for name in ("type", "pin_memory", "num_workers", "drop_last", "scheduling_spec")},
    # saver, recover, evaluator, stats_logger
    **{f"{timer}.freq_steps": ForeignName(("checkpoint.every_steps",), _SAVED, beside=_every(
        "steps", "checkpoint.every_steps", 1)) for timer in ("saver", "recover")},
    **{f"{timer}.freq_secs": ForeignName(("checkpoint.every_minutes",), _SAVED, beside=_every(
        "secs", "checkpoint.every_minutes", 60)) for timer in ("saver", "recover")},
    **{f"{timer}.freq_epochs": ForeignName((), "grpo saves by steps and minutes and at the end "
                                               "(checkpoint.save_final), not by epochs")
       for timer in ("saver", "recover")},
    "recover.mode": ForeignName(("recover",), "auto: auto; disabled starts over in the same directories, where "
                                "grpo's recover=off refuses a run directory with checkpoints: give a new run_dir",
                                {"auto": "auto"}),
    "recover.retries": ForeignName((), "grpo does not relaunch itself; its guard and its server's supervision "
                                       "act within a run"),
    "evaluator.freq_steps": ForeignName(("eval.every_steps",), "grpo's evaluation is greedy over eval.max_samples "
                                        "problems; AReaL's samples with gconfig", {None: 0}, only_values=False),
    "evaluator.freq_epochs": ForeignName((), "grpo evaluates every eval.every_steps steps and, with "
                                             "eval.after_training, at the end; not by epochs"),
    "evaluator.freq_secs": ForeignName((), "grpo evaluates by steps"),
    "stats_logger.wandb.mode": ForeignName(("logging.wandb_project",), "online: logging.wandb_project=PROJECT; "
                                           "disabled is grpo's default; offline: WANDB_MODE=offline in the "
                                           "environment", beside=_wandb),
    "stats_logger.wandb.project": ForeignName(("logging.wandb_project",), "where wandb.mode is online",
                                              beside=_wandb),
    "stats_logger.wandb.wandb_api_key": ForeignName((), "grpo's W&B reads WANDB_API_KEY from the environment; no "
                                                        "key holds it"),
    "stats_logger.wandb.*": ForeignName((), "grpo names the W&B run after name; the other W&B settings are "
                                            "wandb's environment variables (WANDB_ENTITY, ...)"),
    "stats_logger.tensorboard.path": ForeignName(("logging.tensorboard",), "grpo writes under RUN_DIR/tensorboard",
                                                 beside=_tensorboard),
    "stats_logger.swanlab.*": ForeignName((), "grpo logs to TensorBoard and W&B, not SwanLab"),
    "stats_logger.trackio.*": ForeignName((), "grpo logs to TensorBoard and W&B, not Trackio"),
}

# Names AReaL users' own training scripts read beside AReaL's: the GSM8K scripts of our first users
# (nexthybrid/AReaL's examples/docker_gsm8k and cloud_gsm8k gsm8k_grpo_train.py) and AReaL's retool example's;
# docs/coming-from-areal.md's second table.
SCRIPT_NAMES: dict[str, ForeignName] = {
    "max_train_samples": ForeignName(("task.max_train_problems",), "the first N problems, as grpo's; null: all"),
    "training_mode": ForeignName((), _NOTHING),
    "circuit_breaker_enabled": ForeignName(("guard.zero_reward.enabled",), "grpo's zero_reward breaker is on by "
                                           "default"),
    "circuit_breaker_threshold": ForeignName(("guard.zero_reward.patience", "guard.zero_reward.action"), "the "
                                             "zero-reward steps in a row before the run saves and stops",
                                             form="guard.zero_reward.patience={} guard.zero_reward.action=stop"),
    "retool.*": ForeignName((), "the retool example's tool-use turns: grpo's rollouts are single-turn"),
}

_ALL = {**AREAL_NAMES, **SCRIPT_NAMES}
AREAL = NameTable("AReaL", "docs/coming-from-areal.md", {k: v for k, v in _ALL.items() if not k.endswith(".*")},
                  {k.removesuffix("*"): v for k, v in _ALL.items() if k.endswith(".*")},
                  stranger="not an AReaL name grpo knows", why_none=True)


def _unused(engine: str, picked: str) -> ForeignName:
    return ForeignName((), f"unused: AReaL reads {engine}.* only with its {_ENGINES[engine]} backend, and the "
                           f"allocation picks {_ENGINES[picked]}")


def _areal(value: Any) -> Any:
    """A value as AReaL's OmegaConf reads it where PyYAML reads it otherwise: `1e-8` is a number."""
    return float(value) if isinstance(value, str) and _NUMBER.fullmatch(value) else value


def _dotted(value: Any, name: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {n: v for key, inner in value.items() for n, v in _dotted(inner, f"{name}.{key}").items()}
    return {name: _areal(value)}


def unknown_names(data: Mapping[Any, Any], cls: type = RunConfig, prefix: str = "") -> dict[str, Any]:
    """The names in `data` that are not grpo's keys, dotted (`actor.optimizer.lr`), at any depth: inside grpo's own
    sections too, and the entries of a section given where grpo has a value (AReaL's `recover: {mode: auto}`)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if key not in hints:
            out |= _dotted(value, name)
        elif dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            out |= unknown_names(value, hints[key], f"{name}.")
        elif isinstance(value, dict):
            out |= {n: v for n, v in _dotted(value, name).items() if n != name}
    return out


def _resolved(names: Mapping[str, Any], value: Any) -> Any:
    """`${a.b}` as OmegaConf resolves it against `names`; `${oc.env:...}` and a reference to a name not given as
    they are."""
    seen = 0
    while isinstance(value, str) and (match := _REFERENCE.fullmatch(value)) and match.group(1) in names:
        value, seen = names[match.group(1)], seen + 1
        if seen > len(names):  # a reference to itself, round a cycle
            break
    return value


def is_areal_name(name: str) -> bool:
    return AREAL.entry(name) is not None


def areal_names_error(data: Mapping[Any, Any], theirs: Callable[[str], bool] = lambda name: False) -> str | None:
    """The error for a config (or overrides) holding AReaL's names: one message for every name grpo does not know
    (one line for a single name); None when none is AReaL's. A name `theirs` also claims (TRL's `seed`) does not
    alone make the config AReaL's."""
    flat = unknown_names(data)
    if not any(is_areal_name(name) and not theirs(name) for name in flat):
        return None
    given = {name: _resolved(flat, value) for name, value in flat.items()}
    allocation = _allocation(given)
    table = AREAL
    if allocation is not None:
        other = "vllm" if allocation[0] == "sglang" else "sglang"
        table = dataclasses.replace(AREAL, names={**AREAL.names, **{
            name: _unused(other, allocation[0]) for name in given if name.startswith(f"{other}.")}})
    if len(given) == 1:
        ((name, value),) = given.items()
        return name_error(table, name, name, value)
    return names_error(table, "the config", given)
