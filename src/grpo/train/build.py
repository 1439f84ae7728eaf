"""Every component of a training run, built from its config in one place and in dependency order: the
task (data errors surface here, before any model loads), the reward functions, the policy, the rollout
engine, the collector and the guard; the hooks an entry point gave wrap the parts they ask for."""

from __future__ import annotations

import logging
import math
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from grpo.config import FaultsConfig, RunConfig
from grpo.dist import Ranks
from grpo.errors import ConfigError
from grpo.guard.breakers import Guard
from grpo.hooks import Hooks
from grpo.policy.models import resolve_device
from grpo.policy.policy import Policy
from grpo.precision import AUTO, auto_choice, with_dtype
from grpo.rewards import Reward, check_golds, resolve_rewards
from grpo.rollout.collector import RolloutCollector
from grpo.rollout.engines import RolloutEngine
from grpo.rollout.engines.in_process import make_in_process
from grpo.rollout.engines.registry import ENGINES, EngineKind
from grpo.rollout.engines.select import resolve_engine
from grpo.rollout.queue import RolloutQueue
from grpo.tasks import Task, build_task
from grpo.tasks.context import fit_prompts, model_context, problems_to_check, prompt_lengths
from grpo.tasks.prompts import unfilled_template_columns
from grpo.train.signals import SignalWatch

if TYPE_CHECKING:
    from grpo.rollout.engines.server import ServerEngine


log = logging.getLogger(__name__)

@dataclass
class Components:
    task: Task
    total_steps: int
    rewards: list[Reward]  # the training reward functions, with their weights
    eval_rewards: list[Reward]  # what scores held-out evaluations (eval.reward, else the training rewards)
    device: torch.device
    policy: Policy
    engine: RolloutEngine
    server_engine: ServerEngine | None  # the one-process server engine, on the rank holding it (else None)
    recompute_old: bool  # recompute old log-probs with the trainer rather than trust the sampler's
    collector: RolloutCollector
    rollouts: RolloutQueue  # the rollout queue: each step's batch, in turn or ahead (rollout.max_staleness)
    guard: Guard
    eval_prompt_limit: int | None  # held-out prompts are cut from the left to this (task.truncate_prompts)


def _say_if_steps_repeat_problems(cfg: RunConfig, task: Task) -> None:
    per_step = cfg.rollout.problems_per_step
    if task.num_train is not None and task.num_train < per_step:
        log.warning("only %d training problems, fewer than rollout.problems_per_step=%d: each step repeats "
                    "problems (set rollout.problems_per_step=%d, or add rows)", task.num_train, per_step, task.num_train)


def build(cfg: RunConfig, ranks: Ranks, run_dir: Path, signals: SignalWatch,
          record_server_event: Callable[..., Any], hooks: Hooks, record_event: Callable[..., Any]) -> Components:
    """`record_server_event(kind, message, **evidence)`: a server's events, under the step in progress;
    `record_event(kind, step, message, **evidence)`: the rollout's, under the step it collects for."""
    if cfg.testing.faults != FaultsConfig() and not hooks.rehearse_faults:
        raise ConfigError("testing.faults.* are carried out by grpo.faults, which this run was not given: start it "
                          "through grpo.entry (grpo train, grpo.api), or pass TrainingLoop grpo.entry.hooks_for(cfg)")
    seed = cfg.train.seed
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
    evaluates = bool(cfg.eval.every_steps or cfg.eval.before_training or cfg.eval.after_training)
    task = build_task(cfg.task, splits=("train", "test") if evaluates else ("train",))  # no test split needed
    total_steps = _total_steps(cfg, task)
    _say_if_steps_repeat_problems(cfg, task)
    rewards = resolve_rewards(cfg.task.reward, cfg.task.reward_weights, "task.reward")
    eval_rewards = resolve_rewards(cfg.eval.reward, None, "eval.reward") if cfg.eval.reward else rewards
    draws = total_steps * cfg.rollout.problems_per_step
    check_golds(rewards, [p.gold for p in problems_to_check(task, seed, draws)], "the training problems")
    if evaluates:
        check_golds(eval_rewards, [p.gold for p in task.eval_problems(cfg.eval.max_samples)], "the held-out problems")
    device = resolve_device(cfg.model.device, ranks.local_rank)
    if cfg.model.dtype == AUTO:
        # Rank 0's choice for every rank (a CPU's may rest on a measurement); the policy, its server and
        # the plan agree on it.
        choice = ranks.broadcast(auto_choice(device.type) if ranks.main else None)
        cfg = with_dtype(cfg, choice.dtype)
        log.info("model.dtype=auto: %s on this %s (%s)", choice.dtype, device.type, choice.why)
    kind = ENGINES[resolve_engine(cfg.rollout.engine)]
    if ranks.distributed and cfg.rollout.max_staleness:
        raise ConfigError("rollout.max_staleness > 0 does not run under torchrun yet: set rollout.max_staleness=0")
    policy = Policy(cfg, device, ranks)
    server_engine = None
    if kind.server:
        engine, server_engine = _server_engine(cfg, kind, policy, ranks, run_dir, signals, record_server_event, hooks)
    else:
        # Ranks must stop together, at a step's end: a signal may not cut one rank's generation short.
        engine = make_in_process(kind, policy, cfg.rollout.generation_batch_size,
                                 cancel=None if ranks.distributed else signals.event)
    # A server's kernels differ from the trainer's, and LoRA merged into half-precision weights for
    # generation is rounded: then the sampler's log-probs are not the trainer's old log-probs. Off
    # policy (max_staleness > 0), the recomputed ones are the proximal policy's (grpo.algo.offpolicy).
    recompute_old = (cfg.algo.recompute_old_logprobs if cfg.algo.recompute_old_logprobs is not None
                     else kind.server or not policy.inference_is_exact or cfg.rollout.max_staleness > 0)
    prompt_limit, eval_prompt_limit = _fit_prompts(cfg, task, policy, total_steps, evaluates, record_event)
    collector = RolloutCollector(engine, policy.tokenizer, task, cfg.task, cfg.rollout, rewards, seed, total_steps,
                                 ranks=ranks, record=record_event, max_prompt_tokens=prompt_limit)
    collector.check_rewards()  # a broken reward function is a one-line error now, not in step 1
    collector = hooks.wrap_collector(collector)
    rollouts = RolloutQueue(collector, engine, policy, cfg.rollout.max_staleness, total_steps,
                           drain_before_sync=kind.server)
    return Components(task, total_steps, rewards, eval_rewards, device, policy, engine, server_engine,
                      recompute_old, collector, rollouts, Guard(cfg.guard), eval_prompt_limit)


def _fit_prompts(cfg: RunConfig, task: Task, policy: Policy, total_steps: int, evaluates: bool,
                 record_event: Callable[..., Any]) -> tuple[int | None, int | None]:
    """Every prompt the run sends, with its answer budget, against the model's context (grpo.tasks.context):
    refused, or cut and counted. -> the most tokens a training and a held-out prompt keep (None: all whole)."""
    context = model_context(policy.model.config.to_dict(), policy.tokenizer)
    splits = [(problems_to_check(task, cfg.train.seed, total_steps * cfg.rollout.problems_per_step),
               cfg.rollout.max_new_tokens, "rollout.max_new_tokens", "training prompts")]
    if evaluates:
        splits.append((task.eval_problems(cfg.eval.max_samples), cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                       "eval.max_new_tokens" if cfg.eval.max_new_tokens else "rollout.max_new_tokens",
                       "held-out prompts"))
    for note in unfilled_template_columns(policy.tokenizer, splits[0][0], cfg.task):
        log.warning("%s", note)
    limits = []
    for problems, budget, budget_key, what in splits:
        lengths = prompt_lengths(policy.tokenizer, problems, cfg.task)
        fit = fit_prompts(lengths, problems, context, budget, budget_key, cfg.task, what)
        if fit.cut:
            log.warning("%s", fit.message())
            record_event("prompts_truncated", 0, fit.message(), what=what, cut=fit.cut, total=fit.total,
                         longest=fit.longest, limit=fit.limit)
        limits.append(fit.limit)
    return limits[0], limits[1] if evaluates else None


def _server_engine(cfg: RunConfig, kind: EngineKind, policy: Policy, ranks: Ranks, run_dir: Path,
                   signals: SignalWatch, record_server_event: Callable[..., Any],
                   hooks: Hooks) -> tuple[RolloutEngine, ServerEngine | None]:
    """One process: the servers' engine. Under torchrun: rank 0 holds it, every rank's calls go
    through it (grpo.rollout.engines.ranked); a stop signal is acted on at a step's end, by all ranks.
    -> the engine the run calls, and the servers' engine where this rank holds it."""
    from grpo.rollout.engines.ranked import RankedEngine
    from grpo.rollout.engines.server import ServerEngine, make_backend

    if ranks.distributed and not ranks.main:
        return RankedEngine(None, ranks), None
    cancel = threading.Event() if ranks.distributed else signals.event
    engine = ServerEngine(hooks.wrap_backend(make_backend(kind.name, policy.device.type)), cfg.rollout.server, policy.tokenizer, run_dir=run_dir,
                          dtype=cfg.model.dtype, seed=cfg.train.seed, record=record_server_event, cancel=cancel)
    return (RankedEngine(engine, ranks) if ranks.distributed else engine), engine


def _total_steps(cfg: RunConfig, task: Task) -> int:
    if cfg.train.steps is not None:
        return cfg.train.steps
    if task.num_train is None:
        raise ConfigError(f"task {task.name} is unlimited: set train.steps")
    return math.ceil(task.num_train * cfg.train.epochs / cfg.rollout.problems_per_step)
