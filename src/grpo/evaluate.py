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
from grpo.rewards import (
    Reward,
    Scores,
    TrainerState,
    extract_answer,
    math_batch_reward,
    math_format_reward,
    parse_number,
    score,
)
from grpo.rollout.engines import Completion, RolloutEngine, SampleStatus, SamplingParams
from grpo.rollout.seeds import sample_seed
from grpo.tasks import Problem, reward_inputs
from grpo.tasks.prompts import encode_prompt

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


def _vote(text: str, reads_last_number: bool) -> str | None:
    """What a sampled answer votes for in maj@k: the final answer it states, as a number where it is one; with
    a reward that reads a bare last number as the answer (the built-in math ones) that too, and nothing when
    no answer is found; with any other reward, failing a stated answer, its whole text. Trimmed, with case
    and spacing folded."""
    answer = extract_answer(text, last_number=reads_last_number)
    if answer is None and reads_last_number:
        return None
    number = parse_number(answer) if answer is not None else None
    if number is not None:
        return f"{number:.9g}"
    folded = " ".join((answer if answer is not None else text).split()).casefold().rstrip(".!?").rstrip()
    return folded or None


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
    trainer_state: TrainerState | None = None,
    max_prompt_tokens: int | None = None,
) -> dict[str, Any]:
    """Greedy accuracy: the fraction of scored answers judged correct, a reward of at least
    task.correct_threshold (and pass@k / maj@k with samples > 1). Failed answers are retried (`max_retries`,
    `retry_backoff_s`, as rollouts); EvaluationFailed when some never succeed.

    Every figure is over the same rows, the `scored` ones: the rows whose greedy answer the reward scored (a
    row without a usable gold has none). sample_accuracy is over their k sampled answers each, and a sampled
    answer of theirs the reward could not score counts as not correct (`unscorable_samples`).

    With keep_answers, "answers" holds one entry per problem: its greedy answer ("completion", "reward",
    "status", "correct", "scored": whether it is one of the figures' rows) and, with samples > 1, its
    "samples" (each with "completion", "reward", "status", "correct" and the "vote" it casts) and the
    "majority" they voted for ("vote", "votes", "correct"; None when none voted). `trainer_state`: what reward
    functions are given (the run's, during training); None: as at the end of training. `max_prompt_tokens`:
    prompts are cut from the left to this (task.truncate_prompts)."""
    state = trainer_state or TrainerState.finished(None)
    threshold = task_cfg.correct_threshold
    prompts = [encode_prompt(tokenizer, p, task_cfg, max_prompt_tokens) for p in problems]
    retries = {"max_retries": max_retries, "retry_backoff_s": retry_backoff_s, "ranks": ranks}
    greedy, retried = generate_answers(engine, prompts, SamplingParams(max_new_tokens, temperature=0.0), **retries)
    scores = _score(reward_fns, problems, greedy, state)
    rewards = scores.total
    rows = [i for i, r in enumerate(rewards) if r is not None]  # the scored rows: every figure's denominator
    scored = [rewards[i] for i in rows]
    result = {
        "n": len(problems),
        "scored": len(rows),
        "unscorable": len(problems) - len(rows),
        "accuracy": _rate(sum(r >= threshold for r in scored), len(rows)),
        "mean_reward": _rate(sum(scored), len(rows)),
        "empty": sum(c.status == SampleStatus.EMPTY for c in greedy),
        "retried": retried,  # answers the engine failed to produce at first: generated again, never scored
        "mean_length": sum(len(c.token_ids) for c in greedy) / max(len(greedy), 1),
        **(_parts(scores.parts) if len(reward_fns) > 1 else {}),
    }
    answers = [{"id": p.id, "question": p.question, "gold": p.gold, "completion": c.text, "reward": r,
                "status": c.status.value, "correct": r is not None and r >= threshold, "scored": r is not None}
               for p, c, r in zip(problems, greedy, rewards)]
    if samples > 1:
        params = SamplingParams(max_new_tokens, temperature=temperature)
        seeds = [sample_seed(seed, i, j) for i in range(len(prompts)) for j in range(samples)]
        sampled, _ = generate_answers(engine, [p for p in prompts for _ in range(samples)], params, seeds, **retries)
        sample_rewards = _score(reward_fns, [p for p in problems for _ in range(samples)], sampled, state).total
        reads_last_number = any(r.fn in (math_batch_reward, math_format_reward) for r in reward_fns)
        for i, answer in enumerate(answers):
            answer["samples"] = [{"completion": c.text, "reward": r, "status": c.status.value,
                                  "correct": r is not None and r >= threshold,
                                  "vote": None if r is None else _vote(c.text, reads_last_number)}
                                 for c, r in zip(sampled[i * samples:(i + 1) * samples],
                                                 sample_rewards[i * samples:(i + 1) * samples])]
            answer["majority"] = _majority(answer["samples"])
        counted = [answers[i] for i in rows]
        result[f"pass@{samples}"] = _rate(sum(any(s["correct"] for s in a["samples"]) for a in counted), len(rows))
        result[f"maj@{samples}"] = _rate(sum(bool(a["majority"] and a["majority"]["correct"]) for a in counted),
                                         len(rows))
        result["sample_accuracy"] = _rate(sum(s["correct"] for a in counted for s in a["samples"]),
                                          len(rows) * samples)
        result["unscorable_samples"] = sum(s["reward"] is None for a in counted for s in a["samples"])
    if keep_answers:
        result["answers"] = answers
    return result


def _majority(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The answer most of a problem's samples vote for (ties: the one sampled first), None when none votes.
    Votes for the same answer that the reward judged differently (right and wrong) are counted apart: the
    reward, not the vote, says what an answer is."""
    votes = Counter((s["vote"], s["correct"]) for s in samples if s["vote"] is not None)
    if not votes:
        return None
    (vote, correct), count = votes.most_common(1)[0]
    return {"vote": vote, "votes": count, "correct": correct}


def _rate(count: float, of: int) -> float:
    return count / of if of else 0.0


def _score(reward_fns: Sequence[Reward], problems: list[Problem], completions: list, state: TrainerState) -> Scores:
    inputs = reward_inputs(problems, [c.text for c in completions], [c.token_ids for c in completions])
    return score(reward_fns, {**inputs, "trainer_state": state})


def _parts(parts: dict[str, list[float | None]]) -> dict[str, float | int | None]:
    """Each reward function's own mean over the greedy answers it scored (its None left out, as TRL's
    eval_rewards/NAME/mean), and how many it scored: where several are summed, which one moved."""
    figures: dict[str, float | int | None] = {}
    for name, values in parts.items():
        scored = [v for v in values if v is not None]
        figures[f"reward/{name}/mean"] = sum(scored) / len(scored) if scored else None
        figures[f"reward/{name}/scored"] = len(scored)
    return figures


def merge_evaluations(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One evaluation from each rank's share of the problems: counts add up, rates are weighted by the rows
    they are over (the scored ones)."""
    if len(parts) == 1:
        return parts[0]
    n = sum(p["n"] for p in parts)
    scored = sum(p["scored"] for p in parts)
    merged: dict[str, Any] = {"n": n, "scored": scored, "unscorable": sum(p["unscorable"] for p in parts)}
    for key in parts[0]:
        if key in ("accuracy", "mean_reward", "sample_accuracy") or key.startswith(("pass@", "maj@")):
            merged[key] = _rate(sum(p[key] * p["scored"] for p in parts), scored)
        elif key in ("empty", "retried", "unscorable_samples"):
            merged[key] = sum(p[key] for p in parts)
    merged["mean_length"] = sum(p["mean_length"] * p["n"] for p in parts) / max(n, 1)
    for key in (key for key in parts[0] if key.startswith("reward/") and key.endswith("/mean")):
        count = key.removesuffix("/mean") + "/scored"
        merged[count] = sum(p[count] for p in parts)
        merged[key] = (sum(p[key] * p[count] for p in parts if p[count]) / merged[count]) if merged[count] else None
    if "answers" in parts[0]:
        merged["answers"] = [a for p in parts for a in p["answers"]]
    return merged


def _denominators(result: dict[str, Any]) -> str:
    """What an evaluation's figures are over, in words: the line under its table."""
    n, scored = result["n"], result["scored"]
    rows = (f"all {n} rows" if scored == n else
            f"the {scored} scored rows of {n} ({n - scored} unscorable: the reward gave them no score)")
    k = next((int(key[len("pass@"):]) for key in result if key.startswith("pass@")), None)
    return f"every figure is over {rows}" + (f"; sample_accuracy over their {scored * k} sampled answers"
                                             if k else "")


def format_table(results: dict[str, Any], title: str = "evaluation") -> str:
    """An evaluation's figures, one a line, under `title` and what they are over."""
    shown = {k: v for k, v in results.items() if isinstance(v, (int, float))}
    width = max(len(k) for k in shown)
    lines = [title, _denominators(results), "-" * (width + 12)]
    for key, value in shown.items():
        text = f"{value:.4f}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}  {text:>10}")
    return "\n".join(lines)
