"""Rewards in the shape of Unsloth's LFM2.5 (1.2B) GRPO notebook (DAPO-Math in chat form, the `solution` copied to
`answer`): `</think>` then a final `\\boxed{...}` (3.0, the tokenizer's eos allowed at the end), `<think>` and
`</think>` counted (+0.5 / -1.0), the boxed answer graded against `answer` (5 / 3.5 / 2 / 1.5 / -2.5 / -4.5, -2
without one), and the first number compared as a float (3.5 / -1.5, -2.5 without one, 0 where it does not convert),
that last one printing every fifth call from a module-level counter. Modelled on
https://github.com/unslothai/notebooks/blob/bdda2efc7ad5ae129ea63cd2065d23c391406283/python_scripts/LFM2.5_(1.2B)-GRPO.py;
written here, not copied."""

from __future__ import annotations

import re

EOS = "</s>"
BOXED_AFTER_THINK = re.compile(r"</think>\s*.*?\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}\s*(?:" + re.escape(EOS) +
                               r")?\s*$", re.MULTILINE | re.DOTALL)
FIRST_NUMBER = re.compile(r".*?\s*(-?[\d.,]+)", re.MULTILINE | re.DOTALL)
PRINT_EVERY = 5
calls = 0


def _texts(completions) -> list[str]:
    return [completion[0]["content"] for completion in completions]


def boxed_after_think_reward(completions, **kwargs) -> list[float]:
    return [3.0 if BOXED_AFTER_THINK.search(text) else 0.0 for text in _texts(completions)]


def think_tags_reward(completions, **kwargs) -> list[float]:
    return [sum(0.5 if text.count(tag) == 1 else -1.0 for tag in ("<think>", "</think>"))
            for text in _texts(completions)]


def boxed_answer_reward(prompts, completions, answer, **kwargs) -> list[float]:
    scores: list[float] = []
    for text, gold in zip(_texts(completions), answer, strict=True):
        found = BOXED_AFTER_THINK.search(text)
        if found is None:
            scores.append(-2.0)
            continue
        guess = found.group(1)
        if guess == gold:
            scores.append(5.0)
        elif guess.strip() == gold.strip():
            scores.append(3.5)
        else:
            try:
                ratio = float(guess) / float(gold)
            except (ValueError, ZeroDivisionError):
                scores.append(-4.5)
                continue
            scores.append(2.0 if 0.9 <= ratio <= 1.1 else 1.5 if 0.8 <= ratio <= 1.2 else -2.5)
    return scores


def first_number_reward(prompts, completions, answer, **kwargs) -> list[float]:
    global calls
    texts = _texts(completions)
    found = [FIRST_NUMBER.search(text) for text in texts]
    if calls % PRINT_EVERY == 0:
        print(f"Question: {prompts[0][-1]['content'][:80]}\nAnswer: {answer[0]}\nResponse: {texts[0][:80]}")
    calls += 1
    scores: list[float] = []
    for match, gold in zip(found, answer, strict=True):
        if match is None:
            scores.append(-2.5)
            continue
        try:
            scores.append(3.5 if float(match.group(1).strip().replace(",", "")) == float(gold.strip()) else -1.5)
        except ValueError:
            scores.append(0)
    return scores
