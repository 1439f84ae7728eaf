"""Rewards in the shape of Hugging Face's cookbook notebook on GRPO with advanced rewards (GSM8K in chat form, the
`answer` column replaced by the number after `####`): `<start_working_out>...<end_working_out><SOLUTION>...</SOLUTION>`
checked whole (3.0) and tag by tag (+-0.5), the solution graded against `answer` by ratio (an int 0 where nothing
matched), and a number found after `<SOLUTION>` (1.5). Modelled on
https://github.com/huggingface/cookbook/blob/ed2c6467015cee5bd962606a5caa0ece10483982/notebooks/en/trl_grpo_reasoning_advanced_reward.ipynb;
written here, not copied."""

from __future__ import annotations

import re

START, END, OPEN, CLOSE = "<start_working_out>", "<end_working_out>", "<SOLUTION>", "</SOLUTION>"
WHOLE = re.compile(rf"^\s*{START}.+?{END}.*?{OPEN}(.+?){CLOSE}\s*$", re.MULTILINE | re.DOTALL)
NUMBER_AFTER_OPEN = re.compile(rf"{OPEN}.*?([\d.]+)", re.MULTILINE | re.DOTALL)


def _texts(completions) -> list[str]:
    return [completion[0]["content"] for completion in completions]


def whole_layout_reward(completions, **kwargs) -> list[float]:
    return [3.0 if WHOLE.search(text) else 0.0 for text in _texts(completions)]


def tag_by_tag_reward(completions, **kwargs) -> list[float]:
    return [sum(0.5 if text.count(tag) == 1 else -0.5 for tag in (START, END, OPEN, CLOSE))
            for text in _texts(completions)]


def graded_solution_reward(prompts, completions, answer, **kwargs) -> list[float]:
    scores: list[float] = []
    for text, gold in zip(_texts(completions), answer, strict=True):
        found = WHOLE.search(text)
        if found is None:
            scores.append(0)
            continue
        guess = found.group(1)
        if guess.strip() == gold.strip():
            scores.append(3.0)
            continue
        try:
            ratio = float(guess) / float(gold)
        except (ValueError, ZeroDivisionError):
            scores.append(-0.5)
            continue
        scores.append(1.5 if 0.9 <= ratio <= 1.1 else 0.5 if 0.8 <= ratio <= 1.2 else -0.5)
    return scores


def solution_number_reward(prompts, completions, answer, **kwargs) -> list[float]:
    scores: list[float] = []
    for text, gold in zip(_texts(completions), answer, strict=True):
        found = NUMBER_AFTER_OPEN.search(text)
        try:
            scores.append(0 if found is None else 1.5 if float(found.group(1)) == float(gold.strip()) else 0.0)
        except ValueError:
            scores.append(0)
    return scores
