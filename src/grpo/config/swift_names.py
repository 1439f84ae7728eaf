"""ms-swift's `swift rlhf --rlhf_type grpo` flags and grpo's keys for them, so an ms-swift launch script's flags
given to grpo, as `--flag value` words (after `grpo train`, with or without the command's own `swift rlhf`) or as
`flag=value` overrides, are answered in one message: each flag's grpo override where the meaning is the same, grpo's
keys where it must be set by hand, or what grpo does instead. ms-swift's GRPO arguments extend TRL's GRPOConfig:
the names whose meaning is TRL's are TRL's table's entries (grpo.config.trl_names); the rest are checked against
ms-swift's code (swift/arguments/rlhf_args.py's GRPO defaults, swift/rl_core/advantage.py's advantages,
swift/rlhf_trainers/grpo_trainer.py's KL and filters, template_args.py's system prompt, tuner_args.py's LoRA);
where they differ, the table says there is no exact equivalent rather than map it. docs/coming-from-swift.md's
names tables say the same for people; a test keeps them in step."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo.config.foreign_names import ForeignName, NameTable, as_yaml, integer, most_names_error, number
from grpo.config.openrlhf_names import OPENRLHF
from grpo.config.trl_names import ALL_NAMES, TRL

# ms-swift's defaults, where a flag's meaning depends on another the script leaves out.
_DEFAULTS = {"train_type": "lora", "lora_rank": 8, "lora_alpha": 32, "lora_dropout": 0.05, "beta": 0.04,
             "advantage_estimator": "grpo", "truncation_strategy": "left", "loss_type": "grpo"}
_DATA_FILES = (".jsonl", ".json", ".csv")  # the data files both read
_SCALES = {"group": "algo.advantage_norm=group algo.advantage_std=sample algo.advantage_eps=1e-4",
           "batch": "algo.advantage_norm=batch algo.advantage_std=sample algo.advantage_eps=1e-4",
           "none": "algo.advantage_norm=none"}
_SCALE_SWITCH = {True: "group", False: "none"}  # scale_rewards before October 2025: a switch
_COLUMNS = {"query": "task.prompt_column", "solution": "task.answer_column"}  # ms-swift's column -> grpo's key


def _given(given: Mapping[str, Any], name: str) -> Any:
    return given.get(name, _DEFAULTS.get(name))


def _tuning(given: Mapping[str, Any]) -> Any:
    """train_type, or ms-swift 4's tuner_type: lora unless given."""
    return given.get("tuner_type", _given(given, "train_type"))


def _lora(value: Any, given: Mapping[str, Any]) -> str | None:
    """train_type and tuner_type: full is no LoRA; lora is ms-swift's LoRA, its rank, alpha and dropout given or
    ms-swift's (8, 32, 0.05: grpo's alpha is 2 x rank, its dropout 0)."""
    if value == "full":
        return "model.lora.rank=0"
    if value != "lora":
        return None
    rank, alpha, dropout = (_given(given, name) for name in ("lora_rank", "lora_alpha", "lora_dropout"))
    if integer(rank) is None or number(alpha) is None or number(dropout) is None:
        return None
    return f"model.lora.rank={as_yaml(rank)} model.lora.alpha={as_yaml(alpha)} model.lora.dropout={as_yaml(dropout)}"


def _lora_knob(value: Any, given: Mapping[str, Any]) -> str | None:
    """lora_rank, lora_alpha and lora_dropout: ms-swift's LoRA as train_type says it (lora unless given), in one
    override; with train_type full they change nothing."""
    return _lora(_tuning(given), given) if _tuning(given) == "lora" else None


def _target_modules(value: Any, given: Mapping[str, Any]) -> str | None:
    modules = value if isinstance(value, list) else [value]
    if _tuning(given) != "lora" or not all(isinstance(module, str) for module in modules):
        return None
    return f"model.lora.target_modules={as_yaml(modules)}"


def _kl_in_reward(given: Mapping[str, Any]) -> bool:
    """Whether the KL is subtracted from the reward: kl_in_reward, else rloo's and reinforce_plus_plus's default."""
    if "kl_in_reward" in given:
        return given["kl_in_reward"] is True
    return _given(given, "advantage_estimator") in ("rloo", "reinforce_plus_plus")


def _kl(value: Any, given: Mapping[str, Any]) -> str | None:
    """beta and kl_in_reward: the KL loss's coefficient (0.04 unless given; ms-swift's k3, grpo's default), where the
    KL is a loss term; a KL in the reward grpo has not."""
    beta = _given(given, "beta")
    amount = number(beta)
    if amount is None or (amount != 0 and _kl_in_reward(given)):
        return None
    return f"algo.kl_coef={as_yaml(beta)}"


def _kl_switch(value: Any, given: Mapping[str, Any]) -> str | None:
    return _kl(value, given) if value is False else None


def _clip(value: Any, given: Mapping[str, Any]) -> str | None:
    """epsilon: the lower bound, and the upper one where epsilon_high is not given (ms-swift's None follows it)."""
    if number(value) is None:
        return None
    low = f"algo.clip_low={as_yaml(value)}"
    return low if given.get("epsilon_high") is not None else f"{low} algo.clip_high={as_yaml(value)}"


def _advantage(value: Any, given: Mapping[str, Any]) -> str | None:
    """advantage_estimator and scale_rewards: ms-swift's grpo estimator (r - group mean) over the group's sample
    standard deviation + 1e-4 (scale_rewards group, its default), the batch's, or none; rloo's leave-one-out and
    reinforce_plus_plus have no grpo equivalent."""
    if _given(given, "advantage_estimator") != "grpo":
        return None
    scale = given.get("scale_rewards", "group")
    return _SCALES.get(_SCALE_SWITCH[scale] if isinstance(scale, bool) else str(scale))


def _mask_truncated(value: Any, given: Mapping[str, Any]) -> str | None:
    """overlong_filter: false is grpo's default; true, where the loss is a mean over tokens (bnpo, dapo) as grpo's
    masked completions leave its normaliser (under ms-swift's grpo loss they count in the mean over sequences)."""
    if value is False:
        return "algo.mask_truncated=false"
    if value is True and _given(given, "loss_type") in ("bnpo", "dapo"):
        return "algo.mask_truncated=true"
    return None


def _colocated(given: Mapping[str, Any]) -> bool:
    """Whether vLLM runs inside the trainer (use_vllm, and not a `swift rollout` server: vllm_mode server, or, before
    ms-swift required vllm_mode, a server host given)."""
    served = given.get("vllm_mode") == "server" or any(
        given.get(name) not in (None, "") for name in ("vllm_server_host", "vllm_server_base_url"))
    return given.get("use_vllm") is True and not served


def _engine_args(value: Any, given: Mapping[str, Any]) -> str | None:
    """The vLLM knobs as the flags of grpo's server: every one given, in one list, so that each says all; none
    without a colocated vLLM, where they change nothing."""
    parallel, length, sequences = (integer(given.get(name)) for name in (
        "vllm_tensor_parallel_size", "vllm_max_model_len", "vllm_max_num_seqs"))
    args = ((["--tensor-parallel-size", parallel] if parallel is not None else [])
            + (["--max-model-len", length] if length is not None else [])
            + (["--max-num-seqs", sequences] if sequences is not None else [])
            + (["--enforce-eager"] if given.get("vllm_enforce_eager") is True else []))
    return f"rollout.server.extra_args={as_yaml(args)}" if args and _colocated(given) else None


def _memory(value: Any, given: Mapping[str, Any]) -> str | None:
    return f"rollout.server.memory_fraction={as_yaml(value)}" if number(value) is not None and _colocated(
        given) else None


def _files(value: Any) -> list[str] | None:
    """ms-swift's datasets, where every one is a whole data file grpo reads (no `:subset`, no `#N` draw)."""
    names = [str(name) for name in (value if isinstance(value, list) else [value])]
    return names if all(Path(name).suffix in _DATA_FILES and "#" not in name for name in names) else None


def _dataset(value: Any, given: Mapping[str, Any]) -> str | None:
    """dataset: data files, their prompts through the chat template with nothing appended, as ms-swift sends them.
    A hub id is ModelScope's unless --use_hf, registered ones with ms-swift's own column mapping, and `#N` draws N
    rows at random: none of them has an exact equivalent."""
    files = _files(value)
    return f"task.name=dataset task.train_files={as_yaml(files)} task.instruction=''" if files else None


def _columns(value: Any, given: Mapping[str, Any]) -> str | None:
    """columns: a data column renamed to ms-swift's query (the prompt) or solution (what the rewards read)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or not value or any(target not in _COLUMNS for target in value.values()):
        return None
    return " ".join(f"{_COLUMNS[target]}={as_yaml(column)}" for column, target in value.items())


def _system(value: Any, given: Mapping[str, Any]) -> str | None:
    """system: the text (a .txt path is read by ms-swift: its text is the value; `\\n` in the text is a new line,
    which an override cannot carry), quoted for the shell."""
    if not isinstance(value, str) or value.endswith(".txt") or "\\n" in value:
        return None
    return f"task.system_prompt={shlex.quote(as_yaml(value))}"


def _prompt_tokens(value: Any, given: Mapping[str, Any]) -> str | None:
    """max_length: in GRPO the most tokens a prompt, a longer one cut on the left (truncation_strategy left, GRPO's
    default); delete draws another sample instead, which grpo does not."""
    tokens = integer(value)
    if tokens is None or tokens < 1 or _given(given, "truncation_strategy") != "left":
        return None
    return f"task.max_prompt_tokens={tokens} task.truncate_prompts=left"


_GENERATOR = "grpo's vLLM is a server process beside the trainer; rollout.server.memory_fraction bounds its memory"
_ROLLOUT = ("grpo attaches to vLLM's own server (vllm serve), not `swift rollout`'s: rollout.server.urls=[http://"
            "HOST:PORT]; or grpo starts one (rollout.engine=vllm)")
_SHARDING = "grpo shards with FSDP2 over torchrun's ranks: grpo plan shows the memory"
_OVERLONG = ("DAPO's soft overlong penalty: no grpo reward has it built in; a reward function of yours reads "
             "completion_ids (task.reward)")
_NOTHING = "it changes nothing grpo does: leave it out"

SWIFT_OWN_NAMES: dict[str, ForeignName] = {
    # the algorithm
    "rlhf_type": ForeignName((), "grpo trains GRPO: leave it out (ms-swift's dpo, ppo, gkd, ... have no grpo "
                                 "equivalent)"),
    "advantage_estimator": ForeignName(("algo.advantage_norm", "algo.advantage_std", "algo.advantage_eps"),
                                       "grpo: ms-swift's group advantage over the sample standard deviation + 1e-4 "
                                       "(scale_rewards); rloo (K/(K-1) x grpo's algo.advantage_norm=none, the KL in "
                                       "the reward) and reinforce_plus_plus have no grpo equivalent",
                                       beside=_advantage),
    "scale_rewards": ForeignName(("algo.advantage_norm", "algo.advantage_std", "algo.advantage_eps"),
                                 "group (the default): the group's sample standard deviation + 1e-4; batch; none; "
                                 "gdpo and any with rloo or reinforce_plus_plus have no grpo equivalent",
                                 beside=_advantage),
    "beta": ForeignName(("algo.kl_coef",), "the KL loss's coefficient (0.04 unless given; ms-swift's k3 is grpo's "
                        "default estimator); a KL in the reward (kl_in_reward, rloo's default) grpo has not",
                        beside=_kl),
    "kl_in_reward": ForeignName((), "grpo's KL is a loss term: false is algo.kl_coef=<beta>; true has no grpo "
                                    "equivalent", beside=_kl_switch),
    "epsilon": ForeignName(("algo.clip_low", "algo.clip_high"), "both bounds, where epsilon_high is not given",
                           beside=_clip),
    "overlong_filter": ForeignName(("algo.mask_truncated",), "true: the same under loss_type bnpo or dapo; under "
                                   "ms-swift's grpo loss a masked completion still counts in the mean over "
                                   "sequences, in grpo's it leaves it", beside=_mask_truncated),
    "dynamic_sample": ForeignName(("rollout.filter_zero_variance", "rollout.max_refill_rounds"), "ms-swift "
                                  "resamples up to max_resample_times and then trains on the batch as first drawn; "
                                  "grpo drops the groups whose rewards are all equal and refills "
                                  "(rollout.max_refill_rounds)", {False: False}),
    "max_resample_times": ForeignName(("rollout.max_refill_rounds",), "grpo's extra generation rounds a step",
                                      carries=False),
    **dict.fromkeys(("soft_max_length", "soft_cache_length"), ForeignName((), _OVERLONG)),
    # the model
    "model": ForeignName(("model.name",), "ms-swift downloads from ModelScope unless --use_hf true, grpo from Hugging "
                         "Face: a name both publish (Qwen/...) is the same model"),
    "model_type": ForeignName((), "grpo reads the architecture from the model's config"),
    "ckpt_dir": ForeignName(("model.name",), "ms-swift 3's: a whole model's directory is model.name; adapters are "
                            "merged into their base first (grpo export --merged)", carries=False),
    "train_type": ForeignName(("model.lora.rank", "model.lora.alpha", "model.lora.dropout"), "full: "
                              "model.lora.rank=0; lora (ms-swift's default): ms-swift's rank, alpha and dropout (8, "
                              "32, 0.05 unless given); other tuners have no grpo equivalent", beside=_lora),
    "tuner_type": ForeignName(("model.lora.rank", "model.lora.alpha", "model.lora.dropout"), "train_type's name "
                              "since ms-swift 4", beside=_lora),
    "lora_rank": ForeignName(("model.lora.rank",), "with LoRA (train_type lora, its default)", beside=_lora_knob),
    "lora_alpha": ForeignName(("model.lora.alpha",), "ms-swift's default 32, grpo's 2 x rank", beside=_lora_knob),
    "lora_dropout": ForeignName(("model.lora.dropout",), "ms-swift's default 0.05, grpo's 0", beside=_lora_knob),
    "target_modules": ForeignName(("model.lora.target_modules",), "a list; all-linear, both defaults",
                                  beside=_target_modules),
    "attn_impl": ForeignName(("model.attn_implementation",), "flash_attn is flash_attention_2",
                             {"flash_attn": "flash_attention_2", "flash_attention_2": "flash_attention_2",
                              "sdpa": "sdpa", "eager": "eager"}),
    "padding_free": ForeignName((), "a speed knob: grpo packs a micro-batch where its attention allows "
                                    "(model.attn_implementation)"),
    "deepspeed": ForeignName((), _SHARDING),
    "sequence_parallel_size": ForeignName((), "grpo has no sequence parallelism"),
    # the data
    "dataset": ForeignName(("task.name", "task.train_files", "task.path"), "data files: task.name=dataset "
                           "task.train_files=[FILE] task.instruction='' (ms-swift reads the prompt from messages, "
                           "query, prompt, question or problem: task.prompt_column; the gold from solution: "
                           "task.answer_column); a hub id is ModelScope's and #N a random draw: no exact "
                           "equivalent (task.path=hub:ORG/NAME, task.max_train_problems takes the first N)",
                           beside=_dataset),
    "use_hf": ForeignName((), "grpo reads Hugging Face's hub: task.path=hub:ORG/NAME"),
    "columns": ForeignName(("task.prompt_column", "task.answer_column"), "a column renamed to query is "
                           "task.prompt_column, to solution task.answer_column", beside=_columns),
    "system": ForeignName(("task.system_prompt",), "the text; a .txt file's text is its value", beside=_system),
    "max_length": ForeignName(("task.max_prompt_tokens", "task.truncate_prompts"), "in GRPO the most tokens a "
                              "prompt, cut on the left (truncation_strategy left); with delete no equivalent",
                              beside=_prompt_tokens),
    "truncation_strategy": ForeignName(("task.truncate_prompts",), "left: task.truncate_prompts=left; delete draws "
                                       "another sample, which grpo does not (it refuses the data at load)",
                                       {"left": "left"}),
    "template": ForeignName((), "ms-swift's template names are its own: grpo renders the model's chat template "
                                "(task.chat_template: another)"),
    "enable_thinking": ForeignName((), "grpo renders the model's chat template with its defaults; another: "
                                       "task.chat_template"),
    "split_dataset_ratio": ForeignName(("task.held_out",), "a number of problems, not a ratio", carries=False),
    "val_dataset": ForeignName(("task.test_files", "task.test_split"), "evaluation's data", carries=False),
    **dict.fromkeys(("dataset_num_proc", "load_from_cache_file"), ForeignName((), _NOTHING)),
    # rewards
    "reward_funcs": ForeignName(("task.reward",), "grpo's built-ins (math, math_format) are not ms-swift's: "
                                "accuracy (math_verify against the solution column) is nearest grpo's math; format, "
                                "cosine, repetition, soft_overlong and a plugin's are functions of yours "
                                "(module:function)", carries=False),
    "external_plugins": ForeignName(("task.reward",), "a plugin's reward (orms[NAME]) becomes a function(completions, "
                                    "**columns) given by import path", carries=False),
    "reward_model": ForeignName((), "grpo takes reward functions, not reward models: load the model in a function "
                                    "and give its import path (task.reward)"),
    # vLLM
    "vllm_mode": ForeignName(("rollout.engine", "rollout.server.urls"), f"colocate: a vLLM grpo starts itself, "
                             f"beside the trainer; server: {_ROLLOUT}", {"colocate": "vllm"}),
    "vllm_gpu_memory_utilization": ForeignName(("rollout.server.memory_fraction",), "of a colocated vLLM",
                                               beside=_memory),
    **dict.fromkeys(("vllm_tensor_parallel_size", "vllm_max_model_len", "vllm_max_num_seqs", "vllm_enforce_eager"),
                    ForeignName(("rollout.server.extra_args",), "vLLM's --tensor-parallel-size, --max-model-len, "
                                "--max-num-seqs, --enforce-eager, in one list", beside=_engine_args)),
    **dict.fromkeys(("vllm_server_host", "vllm_server_port", "vllm_server_base_url"),
                    ForeignName(("rollout.server.urls",), _ROLLOUT, carries=False)),
    **dict.fromkeys(("sleep_level", "offload_model", "offload_optimizer", "vllm_enable_lora"),
                    ForeignName((), _GENERATOR)),
    "move_model_batches": ForeignName((), "grpo's weight sync is its own"),
    "async_generate": ForeignName(("rollout.max_staleness",), "true generates with the previous step's weights: "
                                  "grpo's rollout.max_staleness=1 with its decoupled objective (docs/async.md)",
                                  {False: 0}),
    "num_infer_workers": ForeignName((), "ms-swift 3.2-3.4's inference workers a node (nothing without use_vllm): "
                                         "grpo's servers are rollout.server.replicas"),
}

# TRL's GRPOConfig and TrainingArguments names, which ms-swift's GRPO arguments take with TRL's meaning.
_TRL_MEANING = (
    "output_dir", "reward_weights", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
    "generation_batch_size", "steps_per_generation", "max_completion_length", "temperature", "top_p", "top_k",
    "min_p", "repetition_penalty", "epsilon_high", "loss_type", "importance_sampling_level", "num_iterations",
    "learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "max_grad_norm", "weight_decay",
    "adam_beta1", "adam_beta2", "adam_epsilon", "num_train_epochs", "max_steps", "seed", "save_steps",
    "save_total_limit", "save_strategy", "save_only_model", "eval_strategy", "eval_steps", "report_to",
    "logging_steps", "log_completions", "use_vllm", "gradient_checkpointing", "torch_dtype",
    "per_device_eval_batch_size", "dataloader_num_workers", "optim", "overwrite_output_dir",
)
SWIFT_TRL_NAMES: dict[str, ForeignName] = {name: ALL_NAMES[name] for name in _TRL_MEANING}

SWIFT = NameTable("ms-swift", "docs/coming-from-swift.md", {**SWIFT_TRL_NAMES, **SWIFT_OWN_NAMES},
                  stranger="not an ms-swift flag grpo knows", why_none=True, command=("swift", "rlhf"))


def swift_names_error(given: Mapping[Any, Any]) -> str | None:
    """The error for the top level's unknown keys `given` when they hold ms-swift's flags: where ms-swift's table
    knows more of them than TRL's and OpenRLHF's (ms-swift's GRPO flags are mostly TRL's), one message for all of
    them (one line naming grpo's key for a single flag). None otherwise."""
    return most_names_error(SWIFT, (TRL, OPENRLHF), given)
