"""The run configuration's schema: a typed dataclass per section, each key's default, meaning and check
beside it (`knob(...)`), each section's rules across its keys (`check_section`), and `validate`, which
applies every rule. `grpo.config.loader` reads YAML files and dotted overrides into these dataclasses.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from grpo.checks import CHECKS
from grpo.config.keys import Rule, above, at_least, finite, knob, problems, rule, within
from grpo.errors import ConfigError

# apply_chat_template's own arguments, which grpo sets when it renders a prompt: not template variables.
TEMPLATE_ARGUMENTS = frozenset({"conversation", "messages", "chat_template", "tools", "documents",
                                "add_generation_prompt", "continue_final_message", "tokenize", "padding",
                                "truncation", "max_length", "return_tensors", "return_dict",
                                "return_assistant_tokens_mask", "tokenizer_kwargs"})

@dataclass
class TinyModelConfig:
    """A randomly initialised Llama-style model with a character-level tokenizer (tests, smoke runs)."""

    hidden_size: int = knob(64, "width")
    num_layers: int = knob(2, "decoder layers")
    num_heads: int = knob(4, "attention heads (vLLM-CPU needs hidden_size / num_heads >= 32)")
    intermediate_size: int = knob(128, "MLP width")

    def check_section(self, at: str) -> list[Rule]:
        sizes = (self.hidden_size, self.num_layers, self.num_heads, self.intermediate_size)
        return [(min(sizes) >= 1 and self.hidden_size % self.num_heads == 0,
                 f"{at} needs positive sizes and hidden_size divisible by num_heads", dataclasses.asdict(self))]


@dataclass
class LoraConfig:
    """LoRA adapters through PEFT (pip install 'grpo[lora]'): only the adapters train, the base stays frozen."""

    rank: int = knob(0, "adapter rank; 0: off (full fine-tuning)", check=at_least(0, zero_means="off"))
    alpha: float | None = knob(None, "the update is scaled by alpha / rank; null: alpha = 2 x rank",
                               check=rule(lambda v: v > 0 and math.isfinite(v),
                                          "must be above 0 (or null for 2 x rank)"))
    dropout: float = knob(0.0, "on the adapters' input in training; 0 keeps the PPO ratio exactly 1 on first use",
                          check=within("[0, 1)"))
    target_modules: list[str] = knob(factory=lambda: ["all-linear"], help="Module names to adapt (suffixes, e.g. "
                                     "[q_proj, v_proj]), or [all-linear]: every linear layer but the output head. "
                                     "Embeddings and the head cannot be adapted (they are tied in small models).",
                                     check=rule(lambda v: bool(v) and ("all-linear" not in v or len(v) == 1),
                                                "must be module names (e.g. [q_proj,v_proj]) or [all-linear] alone"))

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass
class ModelConfig:
    """The policy: which model, in which precision, on which device."""

    name: str = knob("smollm2-135m-instruct", "A hub name, a local model directory, a short name "
                     "(`smollm2-135m-instruct`) or `tiny`.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = knob("auto", help=(
        "the weights' precision (fp32 AdamW master copies under bf16/fp16). auto: bfloat16 on a GPU and on a CPU "
        "with AMX; on a CPU with bf16 instructions but no AMX, whichever multiplies faster, measured at the start "
        "(bf16 on an AMD EPYC 9004, fp32 on a Xeon whose AMX is hidden); float32 on a CPU without bf16 "
        "instructions, where bf16 products are emulated, about 100x slower (grpo.precision, bench/RESULTS.md)"
    ))
    device: str = knob("auto", "auto | cpu | cuda | cuda:N")
    attn_implementation: Literal["auto", "eager", "sdpa", "flash_attention_2"] = knob("auto", help=(
        "auto: eager on CPU (faster than SDPA's CPU kernels for short RL sequences; for Llama, Mistral and Qwen "
        "models without copying keys and values per query head: grpo.policy.attention), sdpa on GPU (for those "
        "models in the form that also runs the update's micro-batch packed, one pass)"
    ))
    gradient_checkpointing: bool = knob(False, "recompute activations in the backward pass: less memory, more time")
    lora: LoraConfig = field(default_factory=LoraConfig)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)


@dataclass
class ArithConfig:
    """Procedural arithmetic: `min_digits`..`max_digits`-digit operands joined by `ops`."""

    min_digits: int = knob(2, "digits of the smallest operand")
    max_digits: int = knob(2, "digits of the largest operand")
    num_operands: int = knob(2, "operands per problem")
    ops: list[str] = knob(factory=lambda: ["+"], help="drawn from + - *")
    seed: int = knob(1234, "the problem set's seed (held-out problems are disjoint by construction)")


@dataclass
class TaskConfig:
    """Where problems come from, how they become prompts, and how answers are scored."""

    name: Literal["arith", "gsm8k", "dataset"] = knob("arith", help=(
        "arith: generated arithmetic; gsm8k: GSM8K; dataset: any JSONL, Parquet or CSV files, or a hub dataset."
    ))
    path: str | None = knob(None, "gsm8k, dataset: a directory with the split files (train.jsonl, test.parquet, "
                            "data/train-*.parquet, ...), relative to the working directory, or hub:ORG/NAME[:CONFIG] "
                            "(gsm8k: `hub`). gsm8k, null: searched for.")
    train_files: list[str] = knob(factory=list, help="dataset: training files or globs (.jsonl, .json, .parquet, "
                                  ".csv), instead of path's")
    test_files: list[str] = knob(factory=list, help="dataset: held-out files or globs, instead of path's")
    train_split: str = knob("train", "dataset: the training split: file name stem under path, or hub split")
    test_split: str = knob("test", "dataset: the held-out split, likewise")
    held_out: int | None = knob(None, "dataset: N problems drawn out of the training data as the held-out split "
                                "(the same N for every run over the same data; never trained on), for data without "
                                "one of its own; null: the test split", check=at_least(1, " (or null)"))
    prompt_column: str = knob("prompt", "dataset: the prompt's column, or a dotted path to a field inside one: text (a "
                              "user message, instruction appended) or [{role, content}, ...] (or ShareGPT's [{from, "
                              "value}, ...]) as given")
    prompt_template: str | None = knob(None, "dataset: a text prompt made of several columns: each {COLUMN} (or "
                                       "dotted path) is replaced by the row's value, a list of texts one item per "
                                       "line, and \\n is a new line (e.g. '{question}\\n{options}', Alpaca's "
                                       "'{instruction}\\n\\n{input}'); null: task.prompt_column")
    answer_column: str | None = knob("answer", "dataset: the gold answer's column, or a dotted path to a field inside "
                                     "one (reward_model.ground_truth); null: none (gold is \"\")")
    gold_pattern: str | None = knob(None, "dataset: a regex; the gold is its first group (or whole match) at the "
                                    "answer's last match; null: after GSM8K's ####, else in the last \\boxed{}, else "
                                    "all of it")
    max_train_problems: int | None = knob(None, "use only the first N training problems; null: all",
                                          check=at_least(1, " (or null for all)"))
    system_prompt: str | None = knob(None, "a system message before each text prompt")
    instruction: str = knob("Put your final answer within \\boxed{}.", "appended to text prompts on a new line")
    chat_template: str | None = knob(None, "a Jinja chat template, or a file holding one; null: the tokenizer's")
    chat_template_kwargs: dict[str, str | bool | int | float] = knob(factory=dict, help=(
        "variables the chat template reads, given to every prompt it renders (TRL's chat_template_kwargs): "
        "{enable_thinking: false} for Qwen3, {reasoning_effort: low} for gpt-oss; {}: the template's defaults"),
        check=rule(lambda v: not set(v) & TEMPLATE_ARGUMENTS, "sets the template's own variables; "
                   + ", ".join(sorted(TEMPLATE_ARGUMENTS)) + " are apply_chat_template's arguments, set by grpo"))
    text_prompts: Literal["chat", "raw"] = knob("chat", help=(
        "chat: a text prompt is sent as a user message through the chat template, task.instruction appended and "
        "task.system_prompt before it; raw: as it is, as TRL sends one (tokenized with the tokenizer's own special "
        "tokens, e.g. a BOS; no template, no instruction): for prompts already chat-formatted, or a base model "
        "without a chat template. Message-list prompts go through the chat template either way"))
    truncate_prompts: Literal["no", "left"] = knob("no", help=(
        "A prompt that with its answer budget (max_new_tokens) exceeds the model's context, or is longer than "
        "task.max_prompt_tokens: no: refused at load; left: its first tokens are cut off so that it fits, and the "
        "cut prompts are counted"))
    max_prompt_tokens: int | None = knob(None, "The most tokens a prompt may have (TRL's max_prompt_length, which "
                                         "cut silently): a longer one is refused at load, or with "
                                         "task.truncate_prompts=left keeps its last N tokens. null: what the model's "
                                         "context leaves beside the answer budget",
                                         check=at_least(1, " (or null for the context's limit)"))
    reward: str | list[str] = knob("math", "A registered reward name or `module:function` (a module in the working "
                                   "directory imports as Python would), or a list of them, summed with "
                                   "task.reward_weights; each is logged on its own.")
    reward_weights: list[float] | None = knob(None, "one weight per task.reward entry; null: each 1",
                                              check=rule(lambda v: all(math.isfinite(w) for w in v),
                                                         "must be finite numbers"))
    correct_threshold: float = knob(1.0, "An answer whose total reward is at least this counts as correct: "
                                    "reward/accuracy in training, and evaluation's accuracy, pass@k and maj@k (never "
                                    "the mean reward)", check=finite())
    arith: ArithConfig = field(default_factory=ArithConfig)

    def check_section(self, at: str) -> list[Rule]:
        rewards = 1 if isinstance(self.reward, str) else len(self.reward)
        raw = self.text_prompts == "raw"
        return [(self.prompt_template is None or self.prompt_column == TaskConfig.prompt_column,
                 f"{at}.prompt_template makes the prompt from the columns it names, and {at}.prompt_column names the "
                 "prompt's column: keep one", self.prompt_column),
                (self.reward_weights is None or len(self.reward_weights) == rewards,
                 f"{at}.reward_weights needs one weight per {at}.reward entry", self.reward_weights),
                (not raw or self.system_prompt is None,
                 (f"{at}.text_prompts=raw sends text prompts as they are: {at}.system_prompt has nowhere to go (put "
                  f"it in the text, or use {at}.text_prompts=chat)"), self.system_prompt),
                (not raw or self.instruction in ("", TaskConfig.instruction),
                 (f"{at}.text_prompts=raw sends text prompts as they are: {at}.instruction is not appended (put it "
                  f"in the text, or use {at}.text_prompts=chat)"), self.instruction)]


@dataclass
class ServerConfig:
    """An inference server that generates rollouts (rollout.engine=vllm|sglang), started and watched by grpo."""

    urls: list[str] = knob(factory=list, help="Attach to servers you run yourself (http://host:port) instead of "
                           "starting one: grpo then watches them but cannot restart them.",
                           check=rule(lambda v: all(u.startswith("http://") for u in v),
                                      "must look like http://HOST:PORT"))
    replicas: int = knob(1, "How many servers grpo starts (each supervised and restarted on its own, requests spread "
                         "over the verified ones); with urls, one per URL.", check=at_least(1))
    python: str | None = knob(None, "The Python of the server's own environment (e.g. .venv-vllm/bin/python); null: "
                              "this one.")
    command: str | None = knob(None, "Replaces the launch command; {python} {model} {host} {port} {dtype} {seed} are "
                               "filled in.")
    extra_args: list[str] = knob(factory=list, help="appended to the launch command")
    env: list[str] = knob(factory=list, help="KEY=VALUE for the server process",
                          check=rule(lambda v: all("=" in kv for kv in v), "entries must look like KEY=VALUE"))
    host: str = knob("127.0.0.1", "where a started server listens (loopback by default)")
    port: int = knob(0, "0: a free port")
    memory_fraction: float | None = knob(None, "the accelerator memory fraction the server may take (vLLM "
                                         "--gpu-memory-utilization, SGLang --mem-fraction-static), a knob to tune "
                                         "after an OOM; null leaves the server's default", check=within("(0, 1]"))
    kv_cache_gib: float | None = knob(None, "the server's KV cache in GiB (vLLM-CPU VLLM_CPU_KVCACHE_SPACE, SGLang "
                                      "--max-total-tokens from the model's shape), a knob to "
                                      "tune after an OOM; null leaves the server's default. grpo refuses, before any "
                                      "server starts, a cache too small for one sequence or too large for the "
                                      "memory beside the trainer (grpo plan shows it)",
                                      check=above(0, " (or null for the server's default)"))
    max_concurrent_requests: int = knob(64, "requests in flight per server (and the server's batch limit)",
                                        check=at_least(1))
    request_timeout_s: float = knob(300.0, "a generation request slower than this counts as timed out", check=above(0))
    startup_timeout_s: float = knob(600.0, "from launch to the first one-token generation", check=above(0))
    health_timeout_s: float = knob(30.0, "a one-token generation slower than this is a hung server", check=above(0))
    stall_s: float = knob(10.0, "a server grpo started on this machine that owes answers and has been stopped "
                          "(SIGSTOP) or has used no CPU for this long is hung, whatever request_timeout_s says; 0: "
                          "only the request timeout finds a hang", check=at_least(0, zero_means="off"))
    max_restarts: int = knob(3, "per run; past it the guard stops the run with a diagnosis", check=at_least(0))
    restart_backoff_s: float = knob(2.0, "wait before the first restart, doubling for each one after")
    probe_tolerance: float | None = knob(None, "|server - trainer| log-prob allowed on the weight probe (max over its "
                                         "tokens in fp32, mean in bf16/fp16); null: by dtype (see "
                                         "grpo.rollout.server.weights).")
    sync_retries: int = knob(1, "failed probes fixed by syncing again, before a restart is tried", check=at_least(0))
    deterministic: bool = knob(False, "SGLang: start the server with --enable-deterministic-inference, so that a "
                               "request's seed fixes its sample (SGLang ignores seeds otherwise; its CPU attention "
                               "backends refuse the flag). grpo checks at each server's first start whether seeds "
                               "are honoured and says so in events, `grpo health` and the doctor.")
    weights_dir: str | None = knob(None, "Where each sync writes the weights the server loads; null: /dev/shm "
                                   "(memory), else the run directory.")

    def check_section(self, at: str) -> list[Rule]:
        return [(not self.urls or self.replicas in (1, len(self.urls)),
                 f"{at}.replicas must be 1 or the number of {at}.urls (one server per URL)", self.replicas),
                (self.replicas == 1 or self.port == 0, f"{at}.port must be 0 (a free port each) with several replicas",
                 self.port)]


@dataclass
class RolloutConfig:
    """Generating the groups of answers: the engine, sampling, and retries of failed samples."""

    engine: Literal["auto", "embedded", "transformers", "vllm", "sglang"] = knob("embedded", help=(
        "embedded: generate with the training model in-process; transformers: the same through transformers' own "
        "generate (slower: a reference); vllm / sglang: a supervised server; auto: vllm when it is importable and "
        "CUDA is present, otherwise embedded."
    ))
    server: ServerConfig = field(default_factory=ServerConfig)
    problems_per_step: int = knob(8, "groups per step", check=at_least(1))
    samples_per_problem: int = knob(8, "the group size G: answers compared with each other",
                                    check=at_least(2, ": GRPO learns by comparing answers to the same problem, and a "
                                                      "group of one has no advantage"))
    max_new_tokens: int = knob(40, "the answer length budget; longer answers are cut off (truncated)",
                               check=at_least(1))
    temperature: float = knob(1.0, "sampling temperature for rollouts (evaluation is greedy)",
                              check=above(0, ": greedy answers to one problem are all the same, so no group would "
                                                 "carry a learning signal"))
    top_p: float = knob(1.0, "nucleus sampling; 1 samples from the whole distribution", check=within("(0, 1]"))
    stop: list[str] = knob(factory=list, help="strings that end an answer")
    generation_batch_size: int = knob(64, "an in-process engine's rows per forward pass", check=at_least(1))
    max_retries: int = knob(2, "A failed sample is retried this many times (exponential backoff with jitter), then "
                            "dropped.", check=at_least(0))
    retry_backoff_s: float = knob(0.5, "the first retry's wait, doubling (with jitter) for each one after",
                                  check=at_least(0))
    max_refill_rounds: int = knob(2, "Extra generation rounds allowed per step to refill groups lost to failures or "
                                  "filtering.", check=at_least(0))
    filter_zero_variance: bool = knob(False, "DAPO dynamic sampling: drop groups whose rewards are all equal and "
                                      "oversample to refill.")
    max_staleness: int = knob(0, "How many policy versions a trained sample may lag behind the policy being updated: "
                              "the batch of step k is generated by the weights after step max(0, k-1-max_staleness), "
                              "in the background while the trainer updates (grpo.rollout.queue); 0 generates each "
                              "step's batch with its own weights, in turn. Stale samples can cost accuracy where the "
                              "policy moves fast: on the quickstart, 1 ended 20 points lower over 3 seeds "
                              "(docs/async.md).",
                              check=at_least(0, zero_means="synchronous"))

    def check_section(self, at: str) -> list[Rule]:
        return [(not self.server.deterministic or self.engine == "sglang",
                 f"{at}.server.deterministic is SGLang's --enable-deterministic-inference: set it only with "
                 f"{at}.engine=sglang (vLLM has no such switch; grpo's health check says whether its samples are "
                 "reproducible)", self.server.deterministic)]


@dataclass
class AlgoConfig:
    """The GRPO objective and its variants (DAPO, Dr.GRPO, GSPO): advantages, clipping, aggregation, KL."""

    advantage_norm: Literal["group", "batch", "none"] = knob("group", help=(
        "group: (r - mean) / std per group (GRPO); none: r - mean (Dr.GRPO); batch: std over the batch."
    ))
    advantage_std: Literal["population", "sample"] = knob("population", help=(
        "The standard deviation group and batch divide by: population (rewards [1, 1, 0, 0] give [1, 1, -1, -1]) "
        "or sample (Bessel's, TRL's scale_rewards: sqrt((G-1)/G) of the population's advantages; with "
        "advantage_eps=1e-4 TRL's exactly)."
    ))
    advantage_eps: float = knob(1e-6, "added to that standard deviation (TRL's: 1e-4)",
                                check=rule(lambda v: v > 0 and math.isfinite(v), "must be a positive number"))
    clip_low: float = knob(0.2, "PPO clip: the ratio is kept above 1 - clip_low", check=within("[0, 1)"))
    clip_high: float = knob(0.2, "... and below 1 + clip_high (DAPO clip-higher: e.g. 0.28)", check=at_least(0))
    ratio_level: Literal["token", "sequence"] = knob("token", help=(
        "The clipped surrogate's ratio pi/pi_old. token: one per token (GRPO, DAPO); sequence: GSPO (Group Sequence "
        "Policy Optimization, Qwen 2025), one per completion, exp of the mean over its tokens of log(pi/pi_old), "
        "clipped per completion; TRL's importance_sampling_level, verl's actor.policy_loss.loss_mode=gspo. GSPO's "
        "clip range is about 1000x narrower than the token ratio's: algo.clip_low=3e-4 algo.clip_high=4e-4 with "
        "algo.loss_agg=seq_mean (TRL's loss_type=grpo), as the paper and TRL recommend."
    ))
    loss_agg: Literal["token_mean", "seq_mean", "seq_sum_norm"] = knob("token_mean", help=(
        "token_mean: over all tokens in the batch (DAPO); seq_mean: per sequence then over sequences (GRPO paper); "
        "seq_sum_norm: token sum divided by max_new_tokens (Dr.GRPO)."
    ))
    mask_truncated: bool = knob(False, "Leave completions that reached rollout.max_new_tokens without ending out "
                                "of the loss (TRL's mask_truncated_completions, DAPO's overlong filtering): no "
                                "gradient, and out of the loss's normaliser. Their rewards still count in their "
                                "group's advantages, which are computed before the masking.")
    kl_coef: float = knob(0.0, "0 loads no reference model", check=at_least(0))
    kl_estimator: Literal["k1", "k3"] = knob("k3", "k1: log-ratio; k3: the unbiased, non-negative estimator")
    updates_per_batch: int = knob(1, "optimizer steps on each batch (>1: off-policy, the clip matters)",
                                  check=at_least(1))
    micro_batch_size: int = knob(16, "rows per forward/backward; gradients accumulate over the batch",
                                 check=at_least(1))
    recompute_old_logprobs: bool | None = knob(None, "Recompute old log-probs with a training forward pass instead of "
                                               "using the sampler's; null: recompute with a server engine (its "
                                               "kernels differ from the trainer's) or LoRA in half precision "
                                               "(generation merges the adapters into rounded weights), not otherwise "
                                               "with the embedded one.")
    importance_cap: float = knob(5.0, "With rollout.max_staleness > 0: the importance weight proximal/behaviour of "
                                 "each token (the decoupled objective, grpo.algo.offpolicy) is truncated at this "
                                 "value.",
                                 check=rule(lambda v: v >= 1 and math.isfinite(v),
                                            "must be a finite number of at least 1"))


@dataclass
class ActorConfig:
    """The optimizer: AdamW and its learning-rate schedule."""

    lr: float = knob(1e-6, "peak learning rate",
                     check=rule(lambda v: v > 0 and math.isfinite(v), "must be a positive number"))
    weight_decay: float = knob(0.0, "AdamW's decoupled weight decay", check=at_least(0))
    betas: list[float] = knob(factory=lambda: [0.9, 0.999], help="AdamW's moment decay rates",
                              check=rule(lambda v: len(v) == 2 and all(0 <= b < 1 for b in v),
                                         "must be two numbers in [0, 1)"))
    eps: float = knob(1e-8, "AdamW's denominator epsilon", check=above(0))
    max_grad_norm: float = knob(1.0, "clip the gradient to this global norm; 0 turns clipping off")
    warmup_steps: int = knob(0, "linear warm-up from 0 over these steps", check=at_least(0))
    schedule: Literal["constant", "linear", "cosine"] = knob("constant", "after warm-up")
    min_lr_ratio: float = knob(0.0, "linear/cosine decay ends at lr x this", check=within("[0, 1]"))
    fp32_master_weights: bool = knob(True, "Keep fp32 master weights and AdamW state when the model runs in bf16/fp16.")


@dataclass
class TrainConfig:
    """How long to train, and the seed of everything random (data order, sampling, init)."""

    steps: int | None = knob(None, "None: epochs over the task's training problems",
                             check=at_least(1, " (or null to run train.epochs over the data)"))
    epochs: int = knob(1, "passes over the training problems when steps is null", check=at_least(1))
    seed: int = knob(0, "one seed for data order, sampling and the tiny model's init")


@dataclass
class EvalConfig:
    """Held-out greedy accuracy, to eval.jsonl, TensorBoard and W&B."""

    every_steps: int = knob(0, "0 disables periodic evaluation", check=at_least(0, zero_means="off"))
    before_training: bool = knob(False, "evaluate once before the first step (a fresh run only)")
    after_training: bool = knob(False, "and once after the last")
    max_samples: int = knob(128, "held-out problems per evaluation (the first N of the test split)", check=at_least(1))
    max_new_tokens: int | None = knob(None, "None: rollout.max_new_tokens", check=at_least(1))
    batch_size: int = knob(64, "grpo eval's rows per generation batch (--batch-size); a run's evaluations use "
                           "rollout's", check=at_least(1))
    reward: str | list[str] | None = knob(None, "the reward that scores evaluations (e.g. plain `math` while training "
                                          "with a shaped reward), or a list of them (weights 1); null: task.reward "
                                          "with task.reward_weights")


@dataclass
class CheckpointConfig:
    """When to save, and what to keep (the newest healthy one and the best are always kept)."""

    every_steps: int = knob(50, "0: not by step count", check=at_least(0, zero_means="off"))
    every_minutes: float = knob(30.0, "also save when this long has passed since the last save; 0: never",
                                check=at_least(0, zero_means="off"))
    keep_last: int = knob(2, "the newest checkpoints kept", check=at_least(1))
    keep_best: bool = knob(True, "keep the best-scoring healthy checkpoint (by held-out accuracy)")
    save_final: bool = knob(True, "save after the last step")
    stop_grace_s: float = knob(10.0, "SIGTERM/SIGINT: save the state reached unless that would run past this many "
                               "seconds after the signal (judged by the last save's time): docker stop kills after "
                               "10 s. A run stopped without saving resumes exactly from its newest checkpoint and "
                               "redoes the steps after it. 0: always save.",
                               check=at_least(0, zero_means="always save"))


@dataclass
class LoggingConfig:
    """Where metrics go besides metrics.jsonl, and what the console shows."""

    tensorboard: bool = knob(True, "scalars, evaluations and sample texts under RUN_DIR/tensorboard")
    wandb_project: str | None = knob(None, "also log to this Weights & Biases project (pip install 'grpo[wandb]')")
    progress: bool = knob(True, "Progress inside rollout, update and evaluation: a status line on a terminal, else a "
                          "log line every progress_interval_s (to the console and train.log).")
    progress_interval_s: float = knob(30.0, "seconds between progress log lines when the console is not a terminal "
                                      "(see progress)")
    samples_per_step: int = knob(4, "completions per step written to samples.jsonl (and TensorBoard, W&B)")
    report: bool = knob(True, "write RUN_DIR/report.html when a run ends (`grpo report RUN_DIR` draws it any time)")


@dataclass
class BreakerConfig:
    """One circuit breaker: trips after `patience` bad steps in a row, then acts."""

    threshold: float = knob(help="the breaker's own measure (see its meaning in guard) at which a step is bad",
                            check=finite())
    action: Literal["warn", "pause", "rollback", "stop"] = knob("rollback", "what a trip does")
    patience: int = knob(1, "consecutive steps over the threshold before tripping", check=at_least(1))
    enabled: bool = knob(True, "false turns this breaker off")


def _breaker(name: str) -> BreakerConfig:
    """A breaker's defaults: the check's own, from the one registry the doctor and the watch read too."""
    check = CHECKS[name]
    return BreakerConfig(check.threshold, check.action, check.patience)  # type: ignore[arg-type]


@dataclass
class GuardConfig:
    """Circuit breakers. Defaults are loose enough that a healthy run never trips them."""

    enabled: bool = knob(True, "false turns every breaker off")
    failed_rollouts: BreakerConfig = knob(factory=lambda: _breaker("failed_rollouts"), help=(
        "fraction of a step's samples still failed, timed out or empty after every retry (their groups dropped); "
        "a sample a retry recovered does not count"
    ))
    unscorable_rewards: BreakerConfig = knob(factory=lambda: _breaker("unscorable_rewards"), help=(
        "fraction of generated answers the reward could not score: bad gold answers or a broken reward function; a "
        "stop, because rolling back cannot fix data"
    ))
    zero_reward: BreakerConfig = knob(factory=lambda: _breaker("zero_reward"), help=(
        "mean reward exactly 0 for `patience` steps in a row"
    ))
    reward_collapse: BreakerConfig = knob(factory=lambda: _breaker("reward_collapse"), help=(
        "mean reward below `threshold` x its moving baseline, for `patience` steps"
    ))
    zero_loss: BreakerConfig = knob(factory=lambda: _breaker("zero_loss"), help=(
        "loss exactly 0 with an update applied, for `patience` steps"
    ))
    nonfinite: BreakerConfig = knob(factory=lambda: _breaker("nonfinite"), help=(
        "a non-finite loss, gradient or parameter (the update is never applied)"
    ))
    grad_norm_spike: BreakerConfig = knob(factory=lambda: _breaker("grad_norm_spike"), help=(
        "grad norm above `threshold` x its moving median (after warm-up)"
    ))
    kl_explosion: BreakerConfig = knob(factory=lambda: _breaker("kl_explosion"), help=(
        "KL to the reference (or to the sampling policy) above `threshold`"
    ))
    empty_responses: BreakerConfig = knob(factory=lambda: _breaker("empty_responses"), help=(
        "fraction of responses that came back empty (a dead server looks like this)"
    ))
    truncated_responses: BreakerConfig = knob(factory=lambda: _breaker("truncated_responses"), help=(
        "fraction of responses cut at max_new_tokens (rambling, or a length budget too small)"
    ))
    offpolicy_kl: BreakerConfig = knob(factory=lambda: _breaker("offpolicy_kl"), help=(
        "with rollout.max_staleness > 0: KL(behaviour || proximal) per token over a batch, before its update"
    ))
    baseline_steps: int = knob(20, "healthy steps in the moving baselines (reward, grad norm)", check=at_least(1))
    max_rollbacks: int = knob(3, "per run; past it a rollback becomes a stop", check=at_least(0))
    rollback_lr_factor: float = knob(0.5, "each rollback multiplies the learning rate by this", check=within("(0, 1]"))
    pause_poll_s: float = knob(10.0, "how often a paused run looks for RUN_DIR/PAUSED to be gone", check=above(0))
    pause_timeout_s: float = knob(3600.0, "a pause nobody ends becomes a stop after this", check=at_least(0))
    on_trip_command: str | None = knob(None, "shell command; event JSON on stdin")
    on_trip_webhook: str | None = knob(None, "URL; event JSON POSTed")


@dataclass
class FaultsConfig:
    """Deliberate failures, to rehearse the guard (grpo.faults carries them out). All empty by default."""

    fail_rollouts_at_steps: list[int] = knob(factory=list, help="samples fail (as a dead server's would)")
    fail_fraction: float = knob(1.0, "fraction of samples failed at those steps", check=within("[0, 1]"))
    empty_rollouts_at_steps: list[int] = knob(factory=list, help="every answer comes back empty")
    zero_reward_at_steps: list[int] = knob(factory=list, help="every answer scores 0")
    reward_raises_at_steps: list[int] = knob(factory=list, help="the reward function raises")
    nan_loss_at_steps: list[int] = knob(factory=list, help="the loss is NaN")
    nan_loss_on_rank: int | None = knob(None, "under torchrun: only this rank's loss is NaN; null: every rank's")
    kill_rank_at_step: list[int] = knob(factory=list, help="under torchrun: [rank, step] SIGKILLs that rank mid-step, "
                                        "once per run (a restarted group goes on)")
    crash_at_step: int | None = knob(None, "raise after this step's checkpoint (tests exact resume)")
    stop_before_record_at_step: int | None = knob(None, "SIGSTOP the trainer just before it records this step "
                                                  "(metrics line, checkpoint), so a tool such as strace can be "
                                                  "attached to inject kills or disk errors into those writes; SIGCONT "
                                                  "resumes it.")
    kill_server_at_steps: list[int] = knob(factory=list, help="Server engines: SIGKILL the server mid-rollout, "
                                           "SIGSTOP it (a hang), skip the weight sync after the update, sync with the "
                                           "server's stock reload (a stale tied head), sync without resetting the "
                                           "prefix cache, or turn the server's answers to garbage, at these steps.")
    hang_server_at_steps: list[int] = knob(factory=list, help="SIGSTOP, found by a request timeout")
    kill_server_actor_at_steps: list[int] = knob(factory=list, help="under `--launcher ray`: SIGKILL the first "
                                                 "server's Ray actor mid-rollout (its server goes with it)")
    kill_server_in_sync_at_steps: list[int] = knob(factory=list, help="SIGKILL the first server as the weight "
                                                   "sync after the step's update asks it to reload")
    skip_weight_sync_at_steps: list[int] = knob(factory=list, help="the probe must catch it")
    stale_head_sync_at_steps: list[int] = knob(factory=list, help="vLLM's stock reload_weights")
    no_cache_reset_at_steps: list[int] = knob(factory=list, help="generation reads stale KV")
    garbage_server_at_steps: list[int] = knob(factory=list, help="answers that do not parse")


@dataclass
class TestingConfig:
    """For rehearsals and tests only: nothing here belongs in a real run's config."""

    faults: FaultsConfig = field(default_factory=FaultsConfig)


@dataclass
class MemoryConfig:
    """`grpo train` predicts the run's peak memory before loading anything (`grpo plan` shows it by phase)
    and refuses a run that cannot fit, naming the knob to change."""

    check: bool = knob(True, "false: run even when the predicted peak exceeds the memory available")
    limit_gib: float | None = knob(None, "The memory the run may take, in GiB; null: MemAvailable (CPU, or the "
                                   "cgroup's room when lower), or the GPU's free memory (less a same-GPU server's "
                                   "memory fraction)", check=above(0, " (or null for what the machine has available)"))


@dataclass
class RunConfig:
    name: str = knob("grpo", "the run's name (W&B, the default run_dir)")
    run_dir: str = knob("runs/{name}", "where config, metrics, events, checkpoints and logs go")
    recover: Literal["auto", "off"] = knob("auto", help=(
        "auto: a run directory with checkpoints resumes from the newest valid one; off: refuse it"
    ))
    resume_with_changes: bool = knob(False, "true: resume even though the data, model or reward differ from the "
                                     "run's (this start only; see grpo.rundir.identity for what may change on "
                                     "resume without it)")
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    testing: TestingConfig = field(default_factory=TestingConfig)

    @property
    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir.format(name=self.name))


def validate(cfg: RunConfig) -> None:
    """Refuse values that cannot train, before any work, in one line that says what to change: each key's check
    (beside the key), each section's rules across its keys (its `check_section`), then the rules across sections."""
    rules = problems(cfg) + _across_sections(cfg)
    for ok, message, value in rules:
        if not ok:
            raise ConfigError(f"{message}; got {value!r}")


def _across_sections(cfg: RunConfig) -> list[Rule]:
    lora = cfg.model.lora
    return [
        (cfg.rollout.max_staleness == 0 or cfg.algo.recompute_old_logprobs is not False, "rollout.max_staleness > 0 "
         "trains on proximal log-probs recomputed before the update: leave algo.recompute_old_logprobs unset (or "
         "true)", cfg.algo.recompute_old_logprobs),
        # Checked here, not at import time, so the message comes before any work and names the extra.
        (not lora.enabled or importlib.util.find_spec("peft") is not None,
         "model.lora needs the peft package: pip install 'grpo[lora]'", f"model.lora.rank={lora.rank}"),
    ]
