"""A reward in the shape of trl.rewards' reasoning_accuracy_reward, which TRL's QLoRA GRPO notebook trains with:
the answer is what follows the last `</think>` (0.0 where the reasoning never closes), compared with the `solution`
column by math_verify, None where that gold does not parse; the parsed gold and answer are handed to TRL's
`log_extra` keyword as columns of the completions table. Modelled on
https://github.com/huggingface/trl/blob/f2cd57710ae345ea6428ae95363267fcf38a3dc8/trl/rewards/accuracy_rewards.py
as https://github.com/huggingface/trl/blob/f2cd57710ae345ea6428ae95363267fcf38a3dc8/examples/notebooks/grpo_trl_lora_qlora.ipynb
uses it; written here, not copied. The notebook's other reward is think_format_reward
(../trl_reward_shapes/trl_builtin.py's think_first_reward)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from math_verify import LatexExtractionConfig, parse, verify


def after_think_accuracy_reward(completions, solution, log_extra: Callable[[str, list], None] | None = None,
                                **kwargs) -> list[float | None]:
    # math_verify times out with signal.alarm, which only the main thread may set.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    rewards: list[float | None] = []
    golds, answers = [], []
    for completion, gold_text in zip(completions, solution, strict=True):
        text = completion[0]["content"]
        if "</think>" not in text:
            rewards.append(0.0)
            golds.append("[incomplete reasoning]")
            answers.append("[incomplete reasoning]")
            continue
        gold = parse(gold_text, parsing_timeout=timeout)
        if not gold:
            rewards.append(None)
            golds.append("[unparseable]")
            answers.append("[skipped]")
            continue
        given = parse(text.split("</think>")[-1], extraction_config=[LatexExtractionConfig(
            boxed_match_priority=0, try_extract_without_anchor=False)], extraction_mode="first_match",
            parsing_timeout=timeout)
        rewards.append(float(verify(gold, given, timeout_seconds=timeout)))
        golds.append(str(gold))
        answers.append(str(given) if given else "[unparseable]")
    if log_extra is not None:
        log_extra("gold_parsed", golds)
        log_extra("answer_parsed", answers)
    return rewards
