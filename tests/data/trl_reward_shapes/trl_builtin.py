"""Rewards in the shape of those TRL ships in trl.rewards: a think-block check on chat completions; a math
accuracy that returns None for a gold it cannot read and takes TRL's optional `log_extra` keyword (grpo does
not pass it); and a callable object, built by a factory, that scores `completion_ids` and names itself with a
`__name__` attribute. Modelled on https://github.com/huggingface/trl/tree/main/trl/rewards (format_rewards.py's
think_format_reward, accuracy_rewards.py's accuracy_reward, other_rewards.py's get_soft_overlong_punishment);
written here, not copied."""

from __future__ import annotations

import threading
from collections.abc import Callable

from math_verify import LatexExtractionConfig, parse, verify


def think_first_reward(completions, **kwargs) -> list[float]:
    """1.0 where the completion opens with the one <think> block it has and closes it."""
    rewards = []
    for completion in completions:
        text = completion[0]["content"]
        rewards.append(1.0 if text.startswith("<think>") and text.count("<think>") == 1 and "</think>" in text
                       else 0.0)
    return rewards


def verified_accuracy_reward(completions, solution, log_extra: Callable[[str, list], None] | None = None,
                             **kwargs) -> list[float | None]:
    """1.0 where math_verify finds the answer equal to the `solution` column's, None where that gold does not
    parse (the sample is not scored)."""
    # math_verify times out with signal.alarm, which only the main thread may set.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    rewards: list[float | None] = []
    for completion, gold_text in zip(completions, solution, strict=True):
        gold = parse(gold_text, parsing_timeout=timeout)
        if not gold:
            rewards.append(None)
            continue
        given = parse(completion[0]["content"], extraction_config=[LatexExtractionConfig(boxed_match_priority=0)],
                      extraction_mode="first_match", parsing_timeout=timeout)
        rewards.append(float(verify(gold, given, timeout_seconds=timeout)))
    if log_extra is not None:
        log_extra("verified", rewards)
    return rewards


class _OverlongPenalty:
    """0 up to `max_len - margin` tokens, then falling linearly to -1 at `max_len`, -1 beyond (DAPO's soft
    overlong punishment, https://arxiv.org/abs/2503.14476, eq. 13)."""

    __name__ = "overlong_penalty"

    def __init__(self, max_len: int, margin: int):
        self.max_len = max_len
        self.margin = margin

    def __call__(self, completion_ids, **kwargs) -> list[float]:
        return [max(-1.0, min(0.0, (self.max_len - self.margin - len(ids)) / self.margin)) for ids in completion_ids]


def overlong_penalty(max_len: int, margin: int) -> _OverlongPenalty:
    return _OverlongPenalty(max_len, margin)
