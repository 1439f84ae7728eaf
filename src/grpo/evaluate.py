"""Held-out evaluation: greedy accuracy, and pass@k / majority@k when sampling k answers per problem.

Under the guarantees of training: an answer the engine failed to produce (a dead or hung server, a
garbled answer) is retried like a rollout and never scored; an evaluation with answers still failed
after the retries has no accuracy and raises EvaluationFailed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Callable

from grpo.config import TaskConfig
from grpo.dist import SINGLE, Ranks
from grpo.rollout.seeds import sample_seed
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus, SamplingParams
from grpo.tasks.prompts import encode_prompt
from grpo.rewards import Reward, TrainerState, extract_answer, parse_number, score
from grpo.tasks import Problem, reward_inputs


ENGINE_FAILURES = (SampleStatus.FAILED, SampleStatus.TIMEOUT)  # not answers: an empty answer is one


class EvaluationFailed(Exception):
    """Answers still failed after their retries: the evaluation has no accuracy."""

    def __init__(self, message: str, evidence: dict[str, Any]) -> None:
        super().__init__(message)
        self.evidence = evidence


def generate_answers(engine: RolloutEngine, prompts: list[list[int]], params: SamplingParams,
                     seeds: list[int] | None = None, *, max_retries: int = 2, retry_backoff_s: float = 0.5,
                     sleep: Callable[[float], None] = time.sleep,
                     ranks: Ranks = SINGLE) -> tuple[list[Completion], int]:
    """Every prompt answered: failed answers retried with backoff (on a server, the engine restarts
    and verifies a failed server first). -> (the completions, how many retries it took), or
    EvaluationFailed. With `ranks`, each rank's share: the ranks retry, and fail, together (a server
    engine's calls under torchrun are collective)."""
    completions = engine.generate(prompts, params, seeds)
    retried = 0
    for attempt in range(max_retries):
        failed = [i for i, c in enumerate(completions) if c.status in ENGINE_FAILURES]
        if not ranks.any(bool(failed)):
            break
        retried += len(failed)
        sleep(retry_backoff_s * 2**attempt)
        again = engine.generate([prompts[i] for i in failed], params, [seeds[i] for i in failed] if seeds else None)
        for i, completion in zip(failed, again):
            completions[i] = completion
    failed = [i for i, c in enumerate(completions) if c.status in ENGINE_FAILURES]
    if ranks.any(bool(failed)):
        raise EvaluationFailed(
            f"{len(failed)} of {len(prompts)} answers still failed after {max_retries} retries "
            f"(first: {completions[failed[0]].error if failed else 'on another rank'})",
            {"answers": len(prompts), "failed": len(failed), "retried": retried, "max_retries": max_retries,
             "errors": sorted({str(completions[i].error) for i in failed})[:5]})
    return completions, retried


def _answer_key(text: str) -> str | None:
    answer = extract_answer(text)
    if answer is None:
        return None
    number = parse_number(answer)
    return f"{number:.9g}" if number is not None else answer.strip()


def evaluate(
    engine: RolloutEngine,
    tokenizer,
    problems: list[Problem],
    task_cfg: TaskConfig,
    reward_fns: Sequence[Reward],
    *,
    max_new_tokens: int,
    samples: int = 1,
    temperature: float = 1.0,
    seed: int = 0,
    keep_answers: bool = False,
    max_retries: int = 2,
    retry_backoff_s: float = 0.5,
    ranks: Ranks = SINGLE,
    max_prompt_tokens: int | None = None,
) -> dict[str, Any]:
    """Greedy accuracy: the fraction of scored answers judged correct, a reward of at least
    task.correct_threshold (and pass@k / maj@k with samples > 1); with keep_answers, every greedy answer
    with its problem, reward and status under "answers". Failed answers are retried (`max_retries`,
    `retry_backoff_s`, as rollouts); EvaluationFailed when some never succeed. `max_prompt_tokens`: prompts are
    cut from the left to this (task.truncate_prompts)."""
    threshold = task_cfg.correct_threshold
    prompts = [encode_prompt(tokenizer, p, task_cfg, max_prompt_tokens) for p in problems]
    retries = {"max_retries": max_retries, "retry_backoff_s": retry_backoff_s, "ranks": ranks}
    greedy, retried = generate_answers(engine, prompts, SamplingParams(max_new_tokens, temperature=0.0), **retries)
    rewards = _score(reward_fns, problems, greedy)
    scored = [r for r in rewards if r is not None]
    result = {
        "n": len(problems),
        "accuracy": sum(r >= threshold for r in scored) / len(scored) if scored else 0.0,
        "mean_reward": sum(scored) / len(scored) if scored else 0.0,
        "unscorable": len(rewards) - len(scored),
        "empty": sum(c.status == SampleStatus.EMPTY for c in greedy),
        "retried": retried,  # answers the engine failed to produce at first: generated again, never scored
        "mean_length": sum(len(c.token_ids) for c in greedy) / max(len(greedy), 1),
    }
    if keep_answers:
        result["answers"] = [{"id": p.id, "question": p.question, "gold": p.gold, "completion": c.text,
                              "reward": r, "status": c.status.value} for p, c, r in zip(problems, greedy, rewards)]
    if samples > 1:
        params = SamplingParams(max_new_tokens, temperature=temperature)
        seeds = [sample_seed(seed, i, j) for i in range(len(prompts)) for j in range(samples)]
        sampled, _ = generate_answers(engine, [p for p in prompts for _ in range(samples)], params, seeds, **retries)
        sample_rewards = _score(reward_fns, [p for p in problems for _ in range(samples)], sampled)
        correct = [r is not None and r >= threshold for r in sample_rewards]
        keys = [_answer_key(c.text) for c in sampled]
        pass_k = maj_k = 0
        for i in range(len(problems)):
            rows = range(i * samples, (i + 1) * samples)
            pass_k += any(correct[r] for r in rows)
            votes = Counter(keys[r] for r in rows if keys[r] is not None)
            if votes:
                top = votes.most_common(1)[0][0]
                maj_k += any(correct[r] for r in rows if keys[r] == top)
        result[f"pass@{samples}"] = pass_k / len(problems)
        result[f"maj@{samples}"] = maj_k / len(problems)
        result["sample_accuracy"] = sum(correct) / len(correct)
    return result


def _score(reward_fns: Sequence[Reward], problems: list[Problem], completions: list) -> list[float | None]:
    inputs = reward_inputs(problems, [c.text for c in completions], [c.token_ids for c in completions])
    return score(reward_fns, {**inputs, "trainer_state": TrainerState(0)}).total


def merge_evaluations(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One evaluation from each rank's share of the problems: counts add up, rates are weighted."""
    if len(parts) == 1:
        return parts[0]
    n = sum(p["n"] for p in parts)
    scored = [p["n"] - p["unscorable"] for p in parts]
    merged: dict[str, Any] = {
        "n": n,
        "accuracy": sum(p["accuracy"] * k for p, k in zip(parts, scored)) / max(sum(scored), 1),
        "mean_reward": sum(p["mean_reward"] * k for p, k in zip(parts, scored)) / max(sum(scored), 1),
        "unscorable": sum(p["unscorable"] for p in parts),
        "empty": sum(p["empty"] for p in parts),
        "retried": sum(p["retried"] for p in parts),
        "mean_length": sum(p["mean_length"] * p["n"] for p in parts) / max(n, 1),
    }
    for key in parts[0]:
        if key.startswith(("pass@", "maj@")) or key == "sample_accuracy":
            merged[key] = sum(p[key] * p["n"] for p in parts) / max(n, 1)
    if "answers" in parts[0]:
        merged["answers"] = [a for p in parts for a in p["answers"]]
    return merged


def format_table(results: dict[str, float], title: str = "evaluation") -> str:
    width = max(len(k) for k in results)
    lines = [title, "-" * (width + 12)]
    for key, value in results.items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}  {shown:>10}")
    return "\n".join(lines)
