"""Rewards in two shapes from TRL issue threads: an object whose `__call__` is the reward, named by a `__name__`
attribute it sets on itself, reading a `response` column and summing three weighted parts (huggingface/trl#2961,
whose format, length and answer parts are not shown there: written here for text completions); and a reward
that gives every completion 0 (huggingface/trl#2983's `dummy_reward_func`). Written here, not copied."""

from __future__ import annotations

import re


class RewardSystem:
    def __init__(self, ratio_format: float = 1.0, ratio_length: float = 1.0, ratio_answer: float = 1.0):
        self.ratio_format, self.ratio_length, self.ratio_answer = ratio_format, ratio_length, ratio_answer
        self.__name__ = "reward_system"

    @staticmethod
    def format_reward(text: str) -> float:
        return 1.0 if re.search(r"<think>.*?</think>", text, re.DOTALL) else -1.0

    @staticmethod
    def thought_length_reward(text: str) -> float:
        thought = re.search(r"<think>(.*?)</think>", text, re.DOTALL)
        return min(len(thought.group(1).split()) / 20, 1.0) if thought else 0.0

    @staticmethod
    def answer_reward(text: str, answer: str) -> float:
        return 1.0 if answer.strip() and answer.strip() in text.rsplit("</think>", 1)[-1] else 0.0

    def __call__(self, completions, response, **kwargs) -> list[float]:
        rewards = []
        for output, answer_only in zip(completions, response):
            parts = self.format_reward(output), self.thought_length_reward(output), self.answer_reward(output,
                                                                                                       answer_only)
            print(f"reward: form {parts[0]}, len {parts[1]}, ans {parts[2]}")
            rewards.append(self.ratio_format * parts[0] + self.ratio_length * parts[1] + self.ratio_answer * parts[2])
        return rewards


def dummy_reward_func(completions, **kwargs) -> list[float]:
    return [0.0] * len(completions)


reward_system = RewardSystem()
