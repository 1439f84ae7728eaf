"""Held-out evaluation: greedy accuracy, and pass@k / majority@k when sampling k answers per problem."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from grpo.config import TaskConfig
from grpo.rollout.seeds import sample_seed
from grpo.rollout.engines import RolloutEngine, SamplingParams
from grpo.tasks.prompts import encode_prompt
from grpo.rewards import Reward, TrainerState, extract_answer, parse_number, score
from grpo.tasks import Problem, reward_inputs


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
) -> dict[str, Any]:
    """Greedy accuracy: the fraction of scored answers judged correct, a reward of at least
    task.correct_threshold (and pass@k / maj@k with samples > 1); with keep_answers, every greedy answer
    with its problem, reward and status under "answers"."""
    threshold = task_cfg.correct_threshold
    prompts = [encode_prompt(tokenizer, p, task_cfg) for p in problems]
    greedy = engine.generate(prompts, SamplingParams(max_new_tokens, temperature=0.0))
    rewards = _score(reward_fns, problems, greedy)
    scored = [r for r in rewards if r is not None]
    result = {
        "n": len(problems),
        "accuracy": sum(r >= threshold for r in scored) / len(scored) if scored else 0.0,
        "mean_reward": sum(scored) / len(scored) if scored else 0.0,
        "unscorable": len(rewards) - len(scored),
        "failed": sum(not c.status.trainable for c in greedy),
        "mean_length": sum(len(c.token_ids) for c in greedy) / max(len(greedy), 1),
    }
    if keep_answers:
        result["answers"] = [{"id": p.id, "question": p.question, "gold": p.gold, "completion": c.text,
                              "reward": r, "status": c.status.value} for p, c, r in zip(problems, greedy, rewards)]
    if samples > 1:
        params = SamplingParams(max_new_tokens, temperature=temperature)
        seeds = [sample_seed(seed, i, j) for i in range(len(prompts)) for j in range(samples)]
        sampled = engine.generate([p for p in prompts for _ in range(samples)], params, seeds)
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
        "failed": sum(p["failed"] for p in parts),
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
