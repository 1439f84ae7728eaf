"""Rewards in the shape of Hugging Face's cookbook notebook on GRPO with vLLM (NuminaMath-TIR in chat form): a format
check on `completion[0]["content"]` and an accuracy reward reading the `solution` column through **kwargs, 1.0 where
the gold does not parse and 0.0 where verifying raises. Modelled on
https://github.com/huggingface/cookbook/blob/ed2c6467015cee5bd962606a5caa0ece10483982/notebooks/en/grpo_vllm_online_training.ipynb
(its `format_reward` and `accuracy_reward`); written here, not copied."""

from __future__ import annotations

import re
import threading

from math_verify import LatexExtractionConfig, parse, verify

THINK_THEN_ANSWER = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$")


def think_then_answer_reward(completions, **kwargs) -> list[float]:
    return [1.0 if THINK_THEN_ANSWER.match(completion[0]["content"]) else 0.0 for completion in completions]


def solution_or_pass_reward(completions, **kwargs) -> list[float]:
    """math_verify against kwargs["solution"]; a gold it cannot parse passes every answer (1.0)."""
    # math_verify times out with signal.alarm, which only the main thread may set.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    latex = [LatexExtractionConfig()]
    rewards = []
    for completion, gold_text in zip(completions, kwargs["solution"], strict=True):
        gold = parse(gold_text, extraction_mode="first_match", extraction_config=latex, parsing_timeout=timeout)
        if not gold:
            rewards.append(1.0)
            continue
        given = parse(completion[0]["content"], extraction_mode="first_match", extraction_config=latex,
                      parsing_timeout=timeout)
        try:
            rewards.append(float(verify(given, gold, timeout_seconds=timeout)))
        except Exception:  # noqa: BLE001 -- the notebook's own contract: a verification that breaks scores 0
            rewards.append(0.0)
    return rewards
