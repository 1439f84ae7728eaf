"""Rewards in the shape of Unsloth's Qwen3 (4B) GRPO notebook: chat completions that continue after the template's
`<start_working_out>` (so the opening tag is not in the completion), `<end_working_out>`, then
`<SOLUTION>...</SOLUTION>` and possibly the tokenizer's eos; `check_answer` and `check_numbers` take
`prompts, completions, answer` by name, the latter printing every fifth call from a module-level counter.
Modelled on https://github.com/unslothai/notebooks/blob/0114b779decfaadf0888c002eae1a19334258dc6/nb/Qwen3_(4B)-GRPO.ipynb;
written here, not copied."""

from __future__ import annotations

import re

EOS = "</s>"
END, OPEN, CLOSE = "<end_working_out>", "<SOLUTION>", "</SOLUTION>"
LAYOUT = re.compile(rf"{END}.*?{OPEN}(.+?){CLOSE}\s*(?:{re.escape(EOS)})?\s*$", re.MULTILINE | re.DOTALL)
NUMBER = re.compile(rf"{OPEN}.*?\s*([-]?[\d.,]+)", re.MULTILINE | re.DOTALL)
calls = 0


def _texts(completions) -> list[str]:
    return [completion[0]["content"] for completion in completions]


def layout_exact(completions, **kwargs) -> list[float]:
    return [3.0 if LAYOUT.search(text) else 0.0 for text in _texts(completions)]


def layout_approximate(completions, **kwargs) -> list[float]:
    return [sum(0.5 if text.count(tag) == 1 else -1.0 for tag in (END, OPEN, CLOSE)) for text in _texts(completions)]


def answer_check(prompts, completions, answer, **kwargs) -> list[float]:
    rewards = []
    for text, gold in zip(_texts(completions), answer, strict=True):
        found = LAYOUT.search(text)
        if found is None:
            rewards.append(-2.0)
        elif found.group(1) == gold:
            rewards.append(5.0)
        elif found.group(1).strip() == gold.strip():
            rewards.append(3.5)
        else:
            try:
                ratio = float(found.group(1)) / float(gold)
            except (ValueError, ZeroDivisionError):
                rewards.append(-4.5)
                continue
            rewards.append(2.0 if 0.9 <= ratio <= 1.1 else 1.5 if 0.8 <= ratio <= 1.2 else -2.5)
    return rewards


def number_check(prompts, completions, answer, **kwargs) -> list[float]:
    global calls
    texts = _texts(completions)
    guesses = [found.group(1) if (found := NUMBER.search(text)) else None for text in texts]
    if calls % 5 == 0:
        print(f"Question:\n{prompts[0][-1]['content']}\nAnswer:\n{answer[0]}\nResponse:\n{texts[0]}")
    calls += 1
    rewards = []
    for guess, gold in zip(guesses, answer, strict=True):
        if guess is None:
            rewards.append(-2.5)
            continue
        try:
            rewards.append(3.5 if float(guess.strip().replace(",", "")) == float(gold.strip()) else -1.5)
        except ValueError:
            rewards.append(0.0)
    return rewards
