"""Typed run configuration: dataclasses, YAML files and dotted CLI overrides.

Every key is checked against the dataclasses: an unknown or mistyped key is an error that names the
valid keys, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from grpo.errors import ConfigError

PRESET_DIR = Path(__file__).parent / "configs"


@dataclass
class TinyModelConfig:
    """A randomly initialised Llama-style model with a character-level tokenizer (tests, smoke runs)."""

    hidden_size: int = 64  # width
    num_layers: int = 2  # decoder layers
    num_heads: int = 4  # attention heads (vLLM-CPU needs hidden_size / num_heads >= 32)
    intermediate_size: int = 128  # MLP width


@dataclass
class LoraConfig:
    """LoRA adapters through PEFT (pip install 'grpo[lora]'): only the adapters train, the base stays frozen."""

    rank: int = 0  # adapter rank; 0: off (full fine-tuning)
    alpha: float | None = None  # the update is scaled by alpha / rank; null: alpha = 2 x rank
    dropout: float = 0.0  # on the adapters' input in training; 0 keeps the PPO ratio exactly 1 on first use
    # Module names to adapt (suffixes, e.g. [q_proj, v_proj]), or [all-linear]: every linear layer
    # but the output head. Embeddings and the head cannot be adapted (they are tied in small models).
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass
class ModelConfig:
    """The policy: which model, in which precision, on which device."""

    # A hub name, a local model directory, a short name (`smollm2-135m-instruct`) or `tiny`.
    name: str = "smollm2-135m-instruct"
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"  # the weights' precision (fp32 AdamW master copies)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # auto: eager on CPU (faster than SDPA's CPU kernels for short RL sequences; for Llama, Mistral and Qwen
    # models without copying keys and values per query head: grpo.policy.attention), sdpa on GPU
    attn_implementation: Literal["auto", "eager", "sdpa", "flash_attention_2"] = "auto"
    gradient_checkpointing: bool = False  # recompute activations in the backward pass: less memory, more time
    lora: LoraConfig = field(default_factory=LoraConfig)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)


@dataclass
class ArithConfig:
    """Procedural arithmetic: `min_digits`..`max_digits`-digit operands joined by `ops`."""

    min_digits: int = 2  # digits of the smallest operand
    max_digits: int = 2  # digits of the largest operand
    num_operands: int = 2  # operands per problem
    ops: list[str] = field(default_factory=lambda: ["+"])  # drawn from + - *
    seed: int = 1234  # the problem set's seed (held-out problems are disjoint by construction)


@dataclass
class TaskConfig:
    """Where problems come from, how they become prompts, and how answers are scored."""

    # arith: generated arithmetic; gsm8k: GSM8K; dataset: any JSONL, Parquet or CSV files, or a hub dataset.
    name: Literal["arith", "gsm8k", "dataset"] = "arith"
    # gsm8k, dataset: a directory with the split files (train.jsonl, test.parquet, data/train-*.parquet, ...),
    # relative to the working directory, or hub:ORG/NAME[:CONFIG] (gsm8k: `hub`). gsm8k, null: searched for.
    path: str | None = None
    train_files: list[str] = field(default_factory=list)  # dataset: training files or globs, instead of path's
    test_files: list[str] = field(default_factory=list)  # dataset: held-out files or globs, instead of path's
    train_split: str = "train"  # dataset: the training split: file name stem under path, or hub split
    test_split: str = "test"  # dataset: the held-out split, likewise
    # dataset: the prompt's column: text (a user message, instruction appended) or [{role, content}, ...] as given
    prompt_column: str = "prompt"
    answer_column: str | None = "answer"  # dataset: the gold answer's column; null: none (gold is "")
    # dataset: a regex; the gold is its first group (or whole match) at the answer's last match; null: all of it
    gold_pattern: str | None = None
    max_train_problems: int | None = None  # use only the first N training problems; null: all
    system_prompt: str | None = None  # a system message before each text prompt
    instruction: str = "Put your final answer within \\boxed{}."  # appended to text prompts on a new line
    chat_template: str | None = None  # a Jinja chat template, or a file holding one; null: the tokenizer's
    # A registered reward name or `module:function` (a module in the working directory imports as
    # Python would), or a list of them, summed with task.reward_weights; each is logged on its own.
    reward: str | list[str] = "math"
    reward_weights: list[float] | None = None  # one weight per task.reward entry; null: each 1
    # An answer whose total reward is at least this counts as correct: reward/accuracy in training, and
    # evaluation's accuracy, pass@k and maj@k (never the mean reward)
    correct_threshold: float = 1.0
    arith: ArithConfig = field(default_factory=ArithConfig)


@dataclass
class ServerConfig:
    """An inference server that generates rollouts (rollout.engine=vllm|sglang), started and watched by grpo."""

    # Attach to servers you run yourself (http://host:port) instead of starting one: grpo then
    # watches them but cannot restart them.
    urls: list[str] = field(default_factory=list)
    # How many servers grpo starts (each supervised and restarted on its own, requests spread over
    # the verified ones); with urls, one per URL.
    replicas: int = 1
    # The Python of the server's own environment (e.g. .venv-vllm/bin/python); null: this one.
    python: str | None = None
    # Replaces the launch command; {python} {model} {host} {port} {dtype} {seed} are filled in.
    command: str | None = None
    extra_args: list[str] = field(default_factory=list)  # appended to the launch command
    env: list[str] = field(default_factory=list)  # KEY=VALUE for the server process
    host: str = "127.0.0.1"  # where a started server listens (loopback by default)
    port: int = 0  # 0: a free port
    # Memory knobs users tune after an OOM: the accelerator memory fraction the server may take
    # (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static) and the KV cache size in GiB
    # (vLLM-CPU VLLM_CPU_KVCACHE_SPACE); null leaves the server's default.
    memory_fraction: float | None = None
    kv_cache_gib: float | None = None  # see memory_fraction
    max_concurrent_requests: int = 64  # requests in flight per server (and the server's batch limit)
    request_timeout_s: float = 300.0  # a generation request slower than this counts as timed out
    startup_timeout_s: float = 600.0  # from launch to the first one-token generation
    health_timeout_s: float = 30.0  # a one-token generation slower than this is a hung server
    max_restarts: int = 3  # per run; past it the guard stops the run with a diagnosis
    restart_backoff_s: float = 2.0  # wait before the first restart, doubling for each one after
    # |server - trainer| log-prob allowed on the weight probe (max over its tokens in fp32, mean in
    # bf16/fp16); null: by dtype (see grpo.rollout.server.weights).
    probe_tolerance: float | None = None
    sync_retries: int = 1  # failed probes fixed by syncing again, before a restart is tried
    # Where each sync writes the weights the server loads; null: /dev/shm (memory), else the run directory.
    weights_dir: str | None = None


@dataclass
class RolloutConfig:
    """Generating the groups of answers: the engine, sampling, and retries of failed samples."""

    # embedded: generate with the training model in-process; vllm / sglang: a supervised server;
    # auto: vllm when it is importable and CUDA is present, otherwise embedded.
    engine: Literal["auto", "embedded", "vllm", "sglang"] = "embedded"
    server: ServerConfig = field(default_factory=ServerConfig)
    problems_per_step: int = 8  # groups per step
    samples_per_problem: int = 8  # the group size G: answers compared with each other
    max_new_tokens: int = 40  # the answer length budget; longer answers are cut off (truncated)
    temperature: float = 1.0  # sampling temperature for rollouts (evaluation is greedy)
    top_p: float = 1.0  # nucleus sampling; 1 samples from the whole distribution
    stop: list[str] = field(default_factory=list)  # strings that end an answer
    generation_batch_size: int = 64  # the embedded engine's rows per forward pass
    # A failed sample is retried this many times (exponential backoff with jitter), then dropped.
    max_retries: int = 2
    retry_backoff_s: float = 0.5  # the first retry's wait, doubling (with jitter) for each one after
    # Extra generation rounds allowed per step to refill groups lost to failures or filtering.
    max_refill_rounds: int = 2
    # DAPO dynamic sampling: drop groups whose rewards are all equal and oversample to refill.
    filter_zero_variance: bool = False
    # How many policy versions a trained sample may lag behind the policy being updated: the batch of
    # step k is generated by the weights after step max(0, k-1-max_staleness), in the background while
    # the trainer updates (grpo.rollout.ahead); 0 generates each step's batch with its own weights, in turn.
    max_staleness: int = 0


@dataclass
class AlgoConfig:
    """The GRPO objective and its variants (DAPO, Dr.GRPO): advantages, clipping, aggregation, KL."""

    # group: (r - mean) / std per group (GRPO); none: r - mean (Dr.GRPO); batch: std over the batch.
    advantage_norm: Literal["group", "batch", "none"] = "group"
    clip_low: float = 0.2  # PPO clip: the ratio is kept above 1 - clip_low
    clip_high: float = 0.2  # ... and below 1 + clip_high (DAPO clip-higher: e.g. 0.28)
    # token_mean: over all tokens in the batch (DAPO); seq_mean: per sequence then over sequences
    # (GRPO paper); seq_sum_norm: token sum divided by max_new_tokens (Dr.GRPO).
    loss_agg: Literal["token_mean", "seq_mean", "seq_sum_norm"] = "token_mean"
    kl_coef: float = 0.0  # 0 loads no reference model
    kl_estimator: Literal["k1", "k3"] = "k3"  # k1: log-ratio; k3: the unbiased, non-negative estimator
    updates_per_batch: int = 1  # optimizer steps on each batch (>1: off-policy, the clip matters)
    micro_batch_size: int = 16  # rows per forward/backward; gradients accumulate over the batch
    # Recompute old log-probs with a training forward pass instead of using the sampler's; null:
    # recompute with a server engine (its kernels differ from the trainer's) or LoRA in half precision
    # (generation merges the adapters into rounded weights), not otherwise with the embedded one.
    recompute_old_logprobs: bool | None = None
    # With rollout.max_staleness > 0: the importance weight proximal/behaviour of each token (the
    # decoupled objective, grpo.algo.offpolicy) is truncated at this value.
    importance_cap: float = 5.0


@dataclass
class ActorConfig:
    """The optimizer: AdamW and its learning-rate schedule."""

    lr: float = 1e-6  # peak learning rate
    weight_decay: float = 0.0  # AdamW's decoupled weight decay
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW's moment decay rates
    eps: float = 1e-8  # AdamW's denominator epsilon
    max_grad_norm: float = 1.0  # clip the gradient to this global norm; 0 turns clipping off
    warmup_steps: int = 0  # linear warm-up from 0 over these steps
    schedule: Literal["constant", "linear", "cosine"] = "constant"  # after warm-up
    min_lr_ratio: float = 0.0  # linear/cosine decay ends at lr x this
    # Keep fp32 master weights and AdamW state when the model runs in bf16/fp16.
    fp32_master_weights: bool = True


@dataclass
class TrainConfig:
    """How long to train, and the seed of everything random (data order, sampling, init)."""

    steps: int | None = None  # None: epochs over the task's training problems
    epochs: int = 1  # passes over the training problems when steps is null
    seed: int = 0  # one seed for data order, sampling and the tiny model's init


@dataclass
class EvalConfig:
    """Held-out greedy accuracy, to eval.jsonl, TensorBoard and W&B."""

    every_steps: int = 0  # 0 disables periodic evaluation
    before_training: bool = False  # evaluate once before the first step (a fresh run only)
    after_training: bool = False  # and once after the last
    max_samples: int = 128  # held-out problems per evaluation (the first N of the test split)
    max_new_tokens: int | None = None  # None: rollout.max_new_tokens
    batch_size: int = 64  # grpo eval's rows per generation batch (--batch-size); a run's evaluations use rollout's
    # the reward that scores evaluations (e.g. plain `math` while training with a shaped reward), or a list of
    # them (weights 1); null: task.reward with task.reward_weights
    reward: str | list[str] | None = None


@dataclass
class CheckpointConfig:
    """When to save, and what to keep (the newest healthy one and the best are always kept)."""

    every_steps: int = 50  # 0: not by step count
    every_minutes: float = 30.0  # also save when this long has passed since the last save; 0: never
    keep_last: int = 2  # the newest checkpoints kept
    keep_best: bool = True  # keep the best-scoring healthy checkpoint (by held-out accuracy)
    save_final: bool = True  # save after the last step


@dataclass
class LoggingConfig:
    """Where metrics go besides metrics.jsonl, and what the console shows."""

    tensorboard: bool = True  # scalars, evaluations and sample texts under RUN_DIR/tensorboard
    wandb_project: str | None = None  # also log to this Weights & Biases project (pip install 'grpo[wandb]')
    # Progress inside rollout, update and evaluation: a status line on a terminal, else a log line
    # every progress_interval_s (to the console and train.log).
    progress: bool = True
    progress_interval_s: float = 30.0  # see progress
    samples_per_step: int = 4  # completions per step written to samples.jsonl (and TensorBoard, W&B)
    report: bool = True  # write RUN_DIR/report.html when a run ends (`grpo report RUN_DIR` draws it any time)


@dataclass
class BreakerConfig:
    """One circuit breaker: trips after `patience` bad steps in a row, then acts."""

    threshold: float  # the breaker's own measure (see its comment in guard) at which a step is bad
    action: Literal["warn", "pause", "rollback", "stop"] = "rollback"  # what a trip does
    patience: int = 1  # consecutive steps over the threshold before tripping
    enabled: bool = True  # false turns this breaker off


@dataclass
class GuardConfig:
    """Circuit breakers. Defaults are loose enough that a healthy run never trips them."""

    enabled: bool = True  # false turns every breaker off
    # fraction of generation attempts in a step that failed, timed out or came back empty
    failed_rollouts: BreakerConfig = field(default_factory=lambda: BreakerConfig(0.5, "rollback", 2))
    # fraction of generated answers the reward could not score: bad gold answers or a broken reward
    # function; a stop, because rolling back cannot fix data
    unscorable_rewards: BreakerConfig = field(default_factory=lambda: BreakerConfig(0.5, "stop", 2))
    # mean reward exactly 0 for `patience` steps in a row
    zero_reward: BreakerConfig = field(default_factory=lambda: BreakerConfig(0.0, "rollback", 10))
    # mean reward below `threshold` x its moving baseline, for `patience` steps
    reward_collapse: BreakerConfig = field(default_factory=lambda: BreakerConfig(0.2, "warn", 5))
    # loss exactly 0 with an update applied, for `patience` steps
    zero_loss: BreakerConfig = field(default_factory=lambda: BreakerConfig(0.0, "warn", 20))
    # a non-finite loss, gradient or parameter (the update is never applied)
    nonfinite: BreakerConfig = field(default_factory=lambda: BreakerConfig(0.0, "rollback", 1))
    # grad norm above `threshold` x its moving median (after warm-up)
    grad_norm_spike: BreakerConfig = field(default_factory=lambda: BreakerConfig(50.0, "warn", 1))
    # KL to the reference (or to the sampling policy) above `threshold`
    kl_explosion: BreakerConfig = field(default_factory=lambda: BreakerConfig(10.0, "rollback", 2))
    # fraction of responses that came back empty (a dead server looks like this)
    empty_responses: BreakerConfig = field(default_factory=lambda: BreakerConfig(1.0, "rollback", 2))
    # fraction of responses cut at max_new_tokens (rambling, or a length budget too small)
    truncated_responses: BreakerConfig = field(default_factory=lambda: BreakerConfig(1.0, "warn", 10))
    # with rollout.max_staleness > 0: KL(behaviour || proximal) per token over a batch, before its update
    offpolicy_kl: BreakerConfig = field(default_factory=lambda: BreakerConfig(0.5, "rollback", 2))
    baseline_steps: int = 20  # healthy steps in the moving baselines (reward, grad norm)
    max_rollbacks: int = 3  # per run; past it a rollback becomes a stop
    rollback_lr_factor: float = 0.5  # each rollback multiplies the learning rate by this
    pause_poll_s: float = 10.0  # how often a paused run looks for RUN_DIR/PAUSED to be gone
    pause_timeout_s: float = 3600.0  # a pause nobody ends becomes a stop after this
    on_trip_command: str | None = None  # shell command; event JSON on stdin
    on_trip_webhook: str | None = None  # URL; event JSON POSTed


@dataclass
class FaultsConfig:
    """Deliberate failures, to rehearse the guard. All empty by default."""

    fail_rollouts_at_steps: list[int] = field(default_factory=list)  # samples fail (as a dead server's would)
    fail_fraction: float = 1.0  # fraction of samples failed at those steps
    empty_rollouts_at_steps: list[int] = field(default_factory=list)  # every answer comes back empty
    zero_reward_at_steps: list[int] = field(default_factory=list)  # every answer scores 0
    reward_raises_at_steps: list[int] = field(default_factory=list)  # the reward function raises
    nan_loss_at_steps: list[int] = field(default_factory=list)  # the loss is NaN
    nan_loss_on_rank: int | None = None  # under torchrun: only this rank's loss is NaN; null: every rank's
    # under torchrun: [rank, step] SIGKILLs that rank mid-step, once per run (a restarted group goes on)
    kill_rank_at_step: list[int] = field(default_factory=list)
    crash_at_step: int | None = None  # raise after this step's checkpoint (tests exact resume)
    # SIGSTOP the trainer just before it records this step (metrics line, checkpoint), so a tool such
    # as strace can be attached to inject kills or disk errors into those writes; SIGCONT resumes it.
    stop_before_record_at_step: int | None = None
    # Server engines: SIGKILL the server mid-rollout, SIGSTOP it (a hang), skip the weight sync
    # after the update, sync with the server's stock reload (a stale tied head), sync without
    # resetting the prefix cache, or turn the server's answers to garbage, at these steps.
    kill_server_at_steps: list[int] = field(default_factory=list)
    hang_server_at_steps: list[int] = field(default_factory=list)  # SIGSTOP, found by a request timeout
    # under `--launcher ray`: SIGKILL the first server's Ray actor mid-rollout (its server goes with it)
    kill_server_actor_at_steps: list[int] = field(default_factory=list)
    skip_weight_sync_at_steps: list[int] = field(default_factory=list)  # the probe must catch it
    stale_head_sync_at_steps: list[int] = field(default_factory=list)  # vLLM's stock reload_weights
    no_cache_reset_at_steps: list[int] = field(default_factory=list)  # generation reads stale KV
    garbage_server_at_steps: list[int] = field(default_factory=list)  # answers that do not parse


@dataclass
class MemoryConfig:
    """`grpo train` predicts the run's peak memory before loading anything (`grpo plan` shows it by phase)
    and refuses a run that cannot fit, naming the knob to change."""

    check: bool = True  # false: run even when the predicted peak exceeds the memory available
    # The memory the run may take, in GiB; null: MemAvailable (CPU, or the cgroup's room when lower), or the
    # GPU's free memory (less a same-GPU server's memory fraction)
    limit_gib: float | None = None


@dataclass
class RunConfig:
    name: str = "grpo"  # the run's name (W&B, the default run_dir)
    run_dir: str = "runs/{name}"  # where config, metrics, events, checkpoints and logs go
    # auto: a run directory with checkpoints resumes from the newest valid one; off: refuse it
    recover: Literal["auto", "off"] = "auto"
    # true: resume even though the data, model or reward differ from the run's (this start only; see
    # grpo.rundir.identity for what may change on resume without it)
    resume_with_changes: bool = False
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
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    @property
    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir.format(name=self.name))


# --------------------------------------------------------------------------------------------
# Loading


def resolve_config_path(name_or_path: str) -> Path:
    """A file path, or a preset name such as `quickstart` or `gsm8k/fast`."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.is_dir():
        hint = f"; did you mean {path / 'config.yaml'}?" if (path / "config.yaml").is_file() else ""
        raise ConfigError(f"config {name_or_path!r} is a directory, not a YAML file{hint}")
    preset = PRESET_DIR / (name_or_path if name_or_path.endswith(".yaml") else f"{name_or_path}.yaml")
    if preset.is_file():
        return preset
    presets = sorted(str(p.relative_to(PRESET_DIR).with_suffix("")) for p in PRESET_DIR.rglob("*.yaml"))
    raise ConfigError(f"config {name_or_path!r} is neither a file nor a preset; presets: {', '.join(presets)}")


def split_overrides(overrides: list[str]) -> tuple[list[str], str | None]:
    """-> (the config's overrides, the checkpoint named by resume_from=, if any): resume_from acts on
    this start of a run and is not part of its saved config."""
    resume_from = None
    kept = []
    for override in overrides:
        if override.startswith("resume_from="):
            resume_from = override.split("=", 1)[1]
        else:
            kept.append(override)
    return kept, resume_from


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    data: dict[str, Any] = {}
    if path is not None:
        resolved = resolve_config_path(str(path))
        try:
            data = yaml.safe_load(resolved.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(yaml_error_line(resolved, exc)) from None
        if not isinstance(data, dict):
            raise ConfigError(f"{resolved}: the top level must be a mapping of keys, got {type(data).__name__}")
    for override in overrides or []:
        apply_override(data, override)
    cfg = from_dict(RunConfig, data)
    validate(cfg)
    return cfg


def yaml_error_line(path: Path, exc: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line naming the file and the place; tabs get their fix."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if "\\t" in problem or "\t" in problem:  # PyYAML writes a tab as \\t
        return f"{where}: not valid YAML: a tab indents this line; YAML indents with spaces: use spaces"
    return f"{where}: not valid YAML: {problem}"


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply `a.b.c=value` to a nested dict; the value is parsed as YAML (`[1,2]`, `true`, `null`)."""
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r} must look like section.key=value")
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {part!r} is a value, not a section")
        node = child
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if "#" in raw and (value is None or isinstance(value, str) and "#" not in value):
        # YAML read the '#' as a comment start (`task.gold_pattern=####(.*)`); on a command line it is text.
        value = raw.strip()
    node[parts[-1]] = value


def from_dict(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"the config must be a mapping of keys, got {data!r}")
    return _merge_section(cls, cls(), data, "")


def _merge_section(cls: type, base: Any, data: dict[str, Any], path: str) -> Any:
    """Keys the data leaves out keep `base`'s values (a nested section keeps its own defaults)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    prefix = f"{path}." if path else ""
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            where = path or "the top level"
            raise ConfigError(f"unknown key {prefix}{key}{hint}; valid keys in {where}: {', '.join(names)}")
    updates = {
        name: _coerce(value, hints[name], f"{prefix}{name}", getattr(base, name)) for name, value in data.items()
    }
    return dataclasses.replace(base, **updates)


def _coerce(value: Any, hint: Any, path: str, current: Any = None) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{path} is a section; set its keys, e.g. {path}.<key>=..., got {value!r}")
        return _merge_section(hint, current if current is not None else hint(), value, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, path, current)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{path} cannot be {value!r}")
    if origin is Literal:
        if isinstance(value, bool):  # YAML 1.1 reads off/on/no/yes as booleans
            spelled = [a for a in args if str(a).lower() in (("on", "true", "yes") if value else ("off", "false", "no"))]
            value = spelled[0] if spelled else value
        if value not in args:
            raise ConfigError(f"{path} must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if origin is list:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        return [_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{path} must be a number, got {value!r}")
    if hint is str:
        if value is None or isinstance(value, (dict, list)):
            raise ConfigError(f"{path} must be a string, got {value!r}")
        return str(value)
    return value


def validate(cfg: RunConfig) -> None:
    """Refuse values that cannot train, before any work, in one line that says what to change."""
    r, a, act, g = cfg.rollout, cfg.algo, cfg.actor, cfg.guard
    rules: list[tuple[bool, str, Any]] = [
        (cfg.train.steps is None or cfg.train.steps >= 1,
         "train.steps must be at least 1 (or null to run train.epochs over the data)", cfg.train.steps),
        (cfg.train.epochs >= 1, "train.epochs must be at least 1", cfg.train.epochs),
        (r.problems_per_step >= 1, "rollout.problems_per_step must be at least 1", r.problems_per_step),
        (r.samples_per_problem >= 2, "rollout.samples_per_problem must be at least 2: GRPO learns by comparing "
         "answers to the same problem, and a group of one has no advantage", r.samples_per_problem),
        (r.max_new_tokens >= 1, "rollout.max_new_tokens must be at least 1", r.max_new_tokens),
        (r.temperature > 0, "rollout.temperature must be above 0: greedy answers to one problem are all the same, "
         "so no group would carry a learning signal", r.temperature),
        (0 < r.top_p <= 1, "rollout.top_p must be in (0, 1]", r.top_p),
        (r.generation_batch_size >= 1, "rollout.generation_batch_size must be at least 1", r.generation_batch_size),
        (r.max_retries >= 0, "rollout.max_retries must be 0 or more", r.max_retries),
        (r.retry_backoff_s >= 0, "rollout.retry_backoff_s must be 0 or more", r.retry_backoff_s),
        (r.max_refill_rounds >= 0, "rollout.max_refill_rounds must be 0 or more", r.max_refill_rounds),
        (r.max_staleness >= 0, "rollout.max_staleness must be 0 (synchronous) or more", r.max_staleness),
        (r.max_staleness == 0 or a.recompute_old_logprobs is not False, "rollout.max_staleness > 0 trains on "
         "proximal log-probs recomputed before the update: leave algo.recompute_old_logprobs unset (or true)",
         a.recompute_old_logprobs),
        (a.importance_cap >= 1 and math.isfinite(a.importance_cap), "algo.importance_cap must be a finite number "
         "of at least 1", a.importance_cap),
        (a.updates_per_batch >= 1, "algo.updates_per_batch must be at least 1", a.updates_per_batch),
        (a.micro_batch_size >= 1, "algo.micro_batch_size must be at least 1", a.micro_batch_size),
        (cfg.eval.batch_size >= 1, "eval.batch_size must be at least 1", cfg.eval.batch_size),
        (0 <= a.clip_low < 1, "algo.clip_low must be in [0, 1)", a.clip_low),
        (a.clip_high >= 0, "algo.clip_high must be 0 or more", a.clip_high),
        (a.kl_coef >= 0, "algo.kl_coef must be 0 or more", a.kl_coef),
        (act.lr > 0 and math.isfinite(act.lr), "actor.lr must be a positive number", act.lr),
        (act.weight_decay >= 0, "actor.weight_decay must be 0 or more", act.weight_decay),
        (len(act.betas) == 2 and all(0 <= b < 1 for b in act.betas), "actor.betas must be two numbers in [0, 1)",
         act.betas),
        (act.eps > 0, "actor.eps must be above 0", act.eps),
        (act.warmup_steps >= 0, "actor.warmup_steps must be 0 or more", act.warmup_steps),
        (0 <= act.min_lr_ratio <= 1, "actor.min_lr_ratio must be in [0, 1]", act.min_lr_ratio),
        (cfg.eval.every_steps >= 0, "eval.every_steps must be 0 (off) or more", cfg.eval.every_steps),
        (cfg.eval.max_samples >= 1, "eval.max_samples must be at least 1", cfg.eval.max_samples),
        (cfg.eval.max_new_tokens is None or cfg.eval.max_new_tokens >= 1, "eval.max_new_tokens must be at least 1",
         cfg.eval.max_new_tokens),
        (cfg.checkpoint.every_steps >= 0, "checkpoint.every_steps must be 0 (off) or more", cfg.checkpoint.every_steps),
        (cfg.checkpoint.every_minutes >= 0, "checkpoint.every_minutes must be 0 (off) or more",
         cfg.checkpoint.every_minutes),
        (cfg.checkpoint.keep_last >= 1, "checkpoint.keep_last must be at least 1", cfg.checkpoint.keep_last),
        (cfg.task.reward_weights is None or len(cfg.task.reward_weights) == (
            1 if isinstance(cfg.task.reward, str) else len(cfg.task.reward)),
         "task.reward_weights needs one weight per task.reward entry", cfg.task.reward_weights),
        (cfg.task.reward_weights is None or all(math.isfinite(w) for w in cfg.task.reward_weights),
         "task.reward_weights must be finite numbers", cfg.task.reward_weights),
        (math.isfinite(cfg.task.correct_threshold), "task.correct_threshold must be a finite number",
         cfg.task.correct_threshold),
        (cfg.task.max_train_problems is None or cfg.task.max_train_problems >= 1,
         "task.max_train_problems must be at least 1 (or null for all)", cfg.task.max_train_problems),
        (g.max_rollbacks >= 0, "guard.max_rollbacks must be 0 or more", g.max_rollbacks),
        (0 < g.rollback_lr_factor <= 1, "guard.rollback_lr_factor must be in (0, 1]", g.rollback_lr_factor),
        (g.baseline_steps >= 1, "guard.baseline_steps must be at least 1", g.baseline_steps),
        (g.pause_poll_s > 0, "guard.pause_poll_s must be above 0", g.pause_poll_s),
        (g.pause_timeout_s >= 0, "guard.pause_timeout_s must be 0 or more", g.pause_timeout_s),
        (cfg.memory.limit_gib is None or cfg.memory.limit_gib > 0, "memory.limit_gib must be above 0 (or null for "
         "what the machine has available)", cfg.memory.limit_gib),
        (0 <= cfg.faults.fail_fraction <= 1, "faults.fail_fraction must be in [0, 1]", cfg.faults.fail_fraction),
    ]
    for field_ in dataclasses.fields(GuardConfig):
        breaker = getattr(g, field_.name)
        if isinstance(breaker, BreakerConfig):
            rules.append((breaker.patience >= 1, f"guard.{field_.name}.patience must be at least 1", breaker.patience))
            rules.append((math.isfinite(breaker.threshold), f"guard.{field_.name}.threshold must be a finite number",
                          breaker.threshold))
    server_faults = [name for name in ("kill_server_at_steps", "kill_server_actor_at_steps", "hang_server_at_steps",
                                       "garbage_server_at_steps",
                                       "skip_weight_sync_at_steps", "stale_head_sync_at_steps",
                                       "no_cache_reset_at_steps") if getattr(cfg.faults, name)]
    rules.append((not server_faults or cfg.rollout.engine in ("vllm", "sglang"),
                  f"faults.{server_faults[0] if server_faults else ''} needs a server engine: set rollout.engine=vllm "
                  "or sglang", cfg.rollout.engine))
    s = cfg.rollout.server
    rules += [
        (s.max_concurrent_requests >= 1, "rollout.server.max_concurrent_requests must be at least 1",
         s.max_concurrent_requests),
        (min(s.request_timeout_s, s.startup_timeout_s, s.health_timeout_s) > 0,
         "rollout.server timeouts must be above 0", [s.request_timeout_s, s.startup_timeout_s, s.health_timeout_s]),
        (s.max_restarts >= 0 and s.sync_retries >= 0, "rollout.server.max_restarts and sync_retries must be 0 or more",
         [s.max_restarts, s.sync_retries]),
        (s.memory_fraction is None or 0 < s.memory_fraction <= 1, "rollout.server.memory_fraction must be in (0, 1]",
         s.memory_fraction),
        (all("=" in kv for kv in s.env), "rollout.server.env entries must look like KEY=VALUE", s.env),
        (all(u.startswith("http://") for u in s.urls), "rollout.server.urls must look like http://HOST:PORT", s.urls),
        (s.replicas >= 1, "rollout.server.replicas must be at least 1", s.replicas),
        (not s.urls or s.replicas in (1, len(s.urls)), "rollout.server.replicas must be 1 or the number of "
         "rollout.server.urls (one server per URL)", s.replicas),
        (s.replicas == 1 or s.port == 0, "rollout.server.port must be 0 (a free port each) with several replicas",
         s.port),
    ]
    lora = cfg.model.lora
    rules += [
        (lora.rank >= 0, "model.lora.rank must be 0 (off) or more", lora.rank),
        (lora.alpha is None or (lora.alpha > 0 and math.isfinite(lora.alpha)), "model.lora.alpha must be above 0 "
         "(or null for 2 x rank)", lora.alpha),
        (0 <= lora.dropout < 1, "model.lora.dropout must be in [0, 1)", lora.dropout),
        (bool(lora.target_modules) and ("all-linear" not in lora.target_modules or len(lora.target_modules) == 1),
         "model.lora.target_modules must be module names (e.g. [q_proj,v_proj]) or [all-linear] alone",
         lora.target_modules),
        # Checked here, not at import time, so the message comes before any work and names the extra.
        (not lora.enabled or importlib.util.find_spec("peft") is not None,
         "model.lora needs the peft package: pip install 'grpo[lora]'", f"model.lora.rank={lora.rank}"),
    ]
    tiny = cfg.model.tiny
    rules.append((min(tiny.hidden_size, tiny.num_layers, tiny.num_heads, tiny.intermediate_size) >= 1
                  and tiny.hidden_size % tiny.num_heads == 0,
                  "model.tiny needs positive sizes and hidden_size divisible by num_heads", dataclasses.asdict(tiny)))
    for ok, message, value in rules:
        if not ok:
            raise ConfigError(f"{message}; got {value!r}")


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False)
