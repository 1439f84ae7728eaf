"""GSM8K rewards for chat data answering in <reasoning> and <answer> tags, in the shape of willccbb's GSM8K demo
rewards: `prompts` and `completions` as chat message lists, the gold number in an `answer` column, the other
rewards taking **kwargs. Modelled on https://gist.github.com/willccbb/4676755236bb08cab5f4e54a0475d6fb
(grpo_demo.py) as https://github.com/Azuma413/grpo_test (reward_functions.py, commit 3f863e77) passes them to
TRL's GRPOTrainer over openai/gsm8k mapped to a chat `prompt` beside GSM8K's own `question`; written here,
not copied."""

from __future__ import annotations

import re

ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
INTEGER = re.compile(r"-?\d+")
STRICT_LAYOUT = re.compile(r"<reasoning>\n(?:.+\n)+</reasoning>\n<answer>\n.+\n</answer>\n?")
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")


def _answer(text: str) -> str:
    """The last <answer> block's text, stripped; empty without one."""
    blocks = ANSWER_BLOCK.findall(text)
    return blocks[-1].strip() if blocks else ""


def answer_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """2.0 where the answer block is the gold number; "$10" counts as 10 when the question is about dollars."""
    rewards = []
    for prompt, completion, gold in zip(prompts, completions, answer, strict=True):
        given = _answer(completion[0]["content"]).replace(",", "")
        if "$" in prompt[-1]["content"]:
            given = given.removeprefix("$")
        rewards.append(2.0 if given == gold else 0.0)
    return rewards


def integer_answer_reward(completions, **kwargs) -> list[float]:
    """0.5 where the answer block is a whole number, the shape GSM8K's golds have."""
    return [0.5 if INTEGER.fullmatch(_answer(completion[0]["content"])) else 0.0 for completion in completions]


def strict_layout_reward(completions, **kwargs) -> list[float]:
    """0.5 where every tag stands on its own line, reasoning first, nothing after the answer."""
    return [0.5 if STRICT_LAYOUT.fullmatch(completion[0]["content"]) else 0.0 for completion in completions]


def loose_layout_reward(completions, **kwargs) -> list[float]:
    """0.5 where the four tags appear in order, however they are spaced."""
    rewards = []
    for completion in completions:
        text = completion[0]["content"]
        places = [text.find(tag) for tag in TAGS]
        rewards.append(0.5 if -1 not in places and places == sorted(places) else 0.0)
    return rewards


def tag_tally_reward(completions, **kwargs) -> list[float]:
    """Partial credit per tag used once (more on a line of its own), less a little per character after the
    closing tag: a gradient towards the strict layout."""
    rewards = []
    for completion in completions:
        text = completion[0]["content"]
        lines = [line.strip() for line in text.splitlines()]
        tally = sum(0.125 if lines.count(tag) == 1 else 0.0625 for tag in TAGS if text.count(tag) == 1)
        trailing = text.rpartition("</answer>")[2].strip() if "</answer>" in text else ""
        rewards.append(tally - 0.001 * len(trailing))
    return rewards
