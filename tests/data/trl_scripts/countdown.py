"""Countdown rewards in the shape of philschmid's mini-deepseek-r1 script: completions as strings (its prompts
are text it rendered with the chat template itself, the assistant's turn prefilled up to `<think>`), so each
reward puts the `<think>` back before reading; the `target` and `nums` columns as keyword lists. Modelled on
https://github.com/philschmid/deep-learning-pytorch-huggingface/blob/4a7cc932a9fdaadb89aa934221de59097228a640/training/scripts/run_r1_grpo.py
(`format_reward_func`, `equation_reward_func`); written here, not copied."""

from __future__ import annotations

import re

LAYOUT = re.compile(r"^<think>[^<]*(?:<(?!/?think>)[^<]*)*</think>\n<answer>[\s\S]*?</answer>$")
ANSWER = re.compile(r"<answer>(.*?)</answer>")
ARITHMETIC = re.compile(r"^[\d+\-*/().\s]+$")


def think_answer_format_reward(completions, target, **kwargs) -> list[float]:
    """1.0 for one <think> block, a newline, then one <answer> block, and nothing around them."""
    return [1.0 if LAYOUT.search("<think>" + text) else 0.0 for text in completions]


def equation_reward(completions, target, nums, **kwargs) -> list[float]:
    """1.0 where the answer is arithmetic on exactly the given numbers and equals the target."""
    rewards = []
    for text, wanted, numbers in zip(completions, target, nums, strict=True):
        found = ANSWER.search("<think>" + text)
        equation = found.group(1).strip() if found else ""
        used = sorted(int(n) for n in re.findall(r"\d+", equation))
        if not found or used != sorted(numbers) or not ARITHMETIC.match(equation):
            rewards.append(0.0)
            continue
        try:
            value = eval(equation, {"__builtins__": None}, {})  # digits, operators and brackets only
        except (SyntaxError, ZeroDivisionError):
            rewards.append(0.0)
            continue
        rewards.append(1.0 if abs(float(value) - float(wanted)) < 1e-5 else 0.0)
    return rewards
