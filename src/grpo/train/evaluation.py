"""Held-out accuracy during a run: each rank evaluates its share of the task's evaluation problems with
the policy's current weights, and the shares are merged."""

from __future__ import annotations

from typing import Any

from grpo import progress
from grpo.config import RunConfig
from grpo.dist import Ranks
from grpo.evaluate import evaluate, merge_evaluations
from grpo.policy.policy import Policy
from grpo.rewards import Reward, TrainerState
from grpo.rollout.engines import GenerationCancelled, RolloutEngine
from grpo.tasks import Task


def evaluate_held_out(cfg: RunConfig, task: Task, engine: RolloutEngine, policy: Policy, rewards: list[Reward],
                      ranks: Ranks, label: str, state: TrainerState,
                      max_prompt_tokens: int | None = None) -> dict[str, Any] | None:
    """-> the merged result, or None when a stop signal cut the evaluation short. `state`: the run's, for
    reward functions. `max_prompt_tokens`: prompts are cut from the left to this (task.truncate_prompts)."""
    problems = task.eval_problems(cfg.eval.max_samples)[ranks.rank :: ranks.world]
    try:
        with progress.phase(f"evaluate ({label})"), policy.unsharded():
            result = evaluate(engine, policy.tokenizer, problems, cfg.task, rewards,
                              max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens, ranks=ranks,
                              trainer_state=state, max_prompt_tokens=max_prompt_tokens)
    except GenerationCancelled:
        return None
    return merge_evaluations(ranks.gather(result))
