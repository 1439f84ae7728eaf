"""GSM8K rewards in the shape of an Unsloth Gemma 3 GRPO script: chat completions answering between
<start_working_out>/<end_working_out> and <SOLUTION></SOLUTION>, the gold number in the `answer` column the
script's map made (the text after GSM8K's `####`), one reward taking `prompts, completions, answer` by name.
Modelled on https://github.com/eliashossain001/efficient-gemma3-finetuning/blob/a4cd82acf992824a3f6ef4b8c1be6b465a6db2e2/rewards/scoring.py
(`match_format_exactly`, `match_format_approximately`, `check_answer`, `check_numbers`); written here, not
copied."""

from __future__ import annotations

import re

TAGS = ("<start_working_out>", "<end_working_out>", "<SOLUTION>", "</SOLUTION>")
LAYOUT = re.compile(r"^\s*<start_working_out>.+?<end_working_out>.*?<SOLUTION>(.+?)</SOLUTION>\s*$",
                    re.MULTILINE | re.DOTALL)
FIRST_NUMBER = re.compile(r"<SOLUTION>.*?([\d.]+)", re.MULTILINE | re.DOTALL)


def _texts(completions) -> list[str]:
    return [completion[0]["content"] for completion in completions]


def exact_layout_reward(completions, **kwargs) -> list[float]:
    return [3.0 if LAYOUT.search(text) else 0.0 for text in _texts(completions)]


def tag_balance_reward(completions, **kwargs) -> list[float]:
    """Half a point for each tag used once, half a point off for each used otherwise."""
    return [sum(0.5 if text.count(tag) == 1 else -0.5 for tag in TAGS) for text in _texts(completions)]


def solution_match_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """3 for the exact answer, 1.5 for it up to spaces, partial credit for a number within 10% or 20%."""
    rewards = []
    for text, gold in zip(_texts(completions), answer, strict=True):
        found = LAYOUT.search(text)
        if found is None:
            rewards.append(0.0)
            continue
        guess = found.group(1)
        if guess == gold:
            rewards.append(3.0)
        elif guess.strip() == gold.strip():
            rewards.append(1.5)
        else:
            try:
                ratio = float(guess) / float(gold)
            except (ValueError, ZeroDivisionError):
                rewards.append(-0.5)
                continue
            rewards.append(0.5 if 0.9 <= ratio <= 1.1 else 0.25 if 0.8 <= ratio <= 1.2 else -1.0)
    return rewards


def first_number_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """1.5 where the first number after <SOLUTION> is the gold."""
    rewards = []
    for text, gold in zip(_texts(completions), answer, strict=True):
        found = FIRST_NUMBER.search(text)
        try:
            rewards.append(1.5 if found and float(found.group(1)) == float(gold) else 0.0)
        except ValueError:
            rewards.append(0.0)
    return rewards
