"""Math rewards for chat data with a LaTeX `solution` column and <think>/<answer> completions, in the shape of
open-r1's: `completions` as chat message lists read by `completion[0]["content"]`, the gold in `solution`,
math_verify deciding equality, a gold it cannot read scored 1.0 (skipped, as open-r1 does), and a length
reward that compares the completions of one call with each other. Modelled on
https://github.com/huggingface/open-r1/blob/0056faa6b77d73663b353d5422a4828bc9d83218/src/open_r1/rewards.py
(accuracy, format, tag-count, reasoning-steps and length rewards); written here, not copied."""

from __future__ import annotations

import re

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

OPEN_THINK, CLOSE_THINK, OPEN_ANSWER, CLOSE_ANSWER = "<think>", "</think>", "<answer>", "</answer>"
STEP_MARKER = re.compile(r"^\s*(?:step\s+\d+\b|\d+[.)]\s|[-*]\s)|\b(?:first|second|then|next|finally)\b",
                         re.IGNORECASE | re.MULTILINE)


def _final_part(text: str) -> str:
    """What follows the reasoning: the answer is looked for there, not among the reasoning's numbers."""
    return text.rpartition(CLOSE_THINK)[2]


def _correct(text: str, solution: str) -> bool:
    """Whether the answer equals the gold; True for a gold with no LaTeX math math_verify can read."""
    gold = parse(solution, extraction_config=[LatexExtractionConfig()])
    if not gold:
        return True
    given = parse(_final_part(text), extraction_config=[LatexExtractionConfig(boxed_match_priority=0),
                                                        ExprExtractionConfig()])
    return bool(given) and verify(gold, given)


def math_answer_reward(completions, solution, **kwargs) -> list[float]:
    """1.0 where the answer after the reasoning equals the `solution` column's, as math_verify compares them."""
    return [float(_correct(completion[0]["content"], gold)) for completion, gold in zip(completions, solution,
                                                                                         strict=True)]


def think_answer_layout_reward(completions, **kwargs) -> list[float]:
    """1.0 for <think>, its text, </think>, <answer>, its text, </answer>, each tag on a line of its own."""
    rewards = []
    for completion in completions:
        head, between, tail = completion[0]["content"].partition(f"\n{CLOSE_THINK}\n{OPEN_ANSWER}\n")
        laid_out = head.startswith(f"{OPEN_THINK}\n") and tail.endswith(f"\n{CLOSE_ANSWER}")
        rewards.append(1.0 if between and laid_out else 0.0)
    return rewards


def tag_once_reward(completions, **kwargs) -> list[float]:
    """A quarter for each of the four tags used exactly once."""
    return [sum(0.25 for tag in (OPEN_THINK, CLOSE_THINK, OPEN_ANSWER, CLOSE_ANSWER)
                if completion[0]["content"].count(tag) == 1) for completion in completions]


def step_marker_reward(completions, **kwargs) -> list[float]:
    """Full credit from three step markers on (numbered or bulleted lines, ordinal words), a third per marker."""
    return [min(1.0, len(STEP_MARKER.findall(completion[0]["content"])) / 3) for completion in completions]


def length_vs_correct_reward(completions, solution, **kwargs) -> list[float]:
    """Kimi 1.5's length reward (https://arxiv.org/abs/2501.12599): 0.5 for the shortest completion of the call
    down to -0.5 for the longest; a wrong answer keeps only the penalty. All of one length: 0."""
    texts = [completion[0]["content"] for completion in completions]
    shortest, longest = min(map(len, texts)), max(map(len, texts))
    if shortest == longest:
        return [0.0] * len(texts)
    rewards = []
    for text, gold in zip(texts, solution, strict=True):
        value = 0.5 - (len(text) - shortest) / (longest - shortest)
        rewards.append(value if _correct(text, gold) else min(0.0, value))
    return rewards
