"""The accuracy reward of TRL's GSPO example, in its shape: chat completions read by `completion[0]["content"]`,
the gold in the `solution` column, math_verify where the gold parses (None where verifying raises), a
normalised text comparison where it does not. Modelled on
https://github.com/huggingface/trl/blob/07e1b4fe3820e36e823ebc930e6a0989b19fb402/examples/scripts/gspo.py
(its `accuracy_reward`); written here, not copied. Its other reward is trl.rewards' think_format_reward,
modelled in ../trl_reward_shapes/trl_builtin.py."""

from __future__ import annotations

import threading

from math_verify import LatexExtractionConfig, parse, verify


def solution_accuracy_reward(completions, solution, **kwargs) -> list[float | None]:
    # math_verify times out with signal.alarm, which only the main thread may set.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    rewards: list[float | None] = []
    for completion, gold_text in zip(completions, solution, strict=True):
        text = completion[0]["content"]
        gold = parse(gold_text, extraction_mode="first_match", parsing_timeout=timeout)
        if not gold:
            rewards.append(float(text.strip().lower() == gold_text.strip().lower()))
            continue
        try:
            given = parse(text, extraction_config=[LatexExtractionConfig(boxed_match_priority=0,
                                                                         try_extract_without_anchor=False)],
                          extraction_mode="first_match", parsing_timeout=timeout)
            rewards.append(float(verify(gold, given, timeout_seconds=timeout)))
        except Exception:  # noqa: BLE001 -- the example's own contract: a verification that breaks scores None, not 0
            rewards.append(None)
    return rewards
