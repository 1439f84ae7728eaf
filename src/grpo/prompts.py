"""Turning a problem into prompt token ids through the model's chat template."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from grpo.config import TaskConfig
from grpo.tasks.base import Problem


def build_messages(problem: Problem, cfg: TaskConfig) -> list[dict[str, str]]:
    """A chat prompt as given; a text prompt as a user message with the instruction appended, after the
    system prompt."""
    if problem.messages is not None:
        return [dict(message) for message in problem.messages]
    messages = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    content = f"{problem.question}\n{cfg.instruction}" if cfg.instruction else problem.question
    messages.append({"role": "user", "content": content})
    return messages


def encode_prompt(tokenizer: PreTrainedTokenizerBase, problem: Problem, cfg: TaskConfig) -> list[int]:
    text = tokenizer.apply_chat_template(build_messages(problem, cfg), tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]
