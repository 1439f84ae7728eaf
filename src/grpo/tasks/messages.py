"""A chat prompt from a messages column: `[{"role", "content"}, ...]` as chat templates take it, or ShareGPT's
`[{"from", "value"}, ...]` (LLaMA-Factory, Open-Reasoner-Zero) with its speakers read as roles."""

from __future__ import annotations

from typing import Any

from grpo.errors import ConfigError
from grpo.tasks.base import Problem
from grpo.tasks.fields import short

# ShareGPT's speakers and the chat roles they are.
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
# How a prompt may end (TRL's rule): the model answers the user or a tool, or continues the assistant's message.
PROMPT_ENDS = ("user", "tool", "assistant")
SHAREGPT_NOTE = "chat messages given as ShareGPT's {from, value} read as {role, content} (human: user, gpt: assistant)"


def _message(given: Any, i: int, where: str, column: str) -> tuple[dict[str, Any], bool]:
    """The message as {role, content, ...}, and whether it was ShareGPT's."""
    message, sharegpt = given, False
    if isinstance(given, dict) and "role" not in given and isinstance(given.get("from"), str):
        speaker = given["from"]
        if speaker not in SHAREGPT_ROLES:
            raise ConfigError(f"{where}: column {column!r} holds ShareGPT messages, but message {i} is from "
                              f"{speaker!r}; a prompt's speakers are {', '.join(SHAREGPT_ROLES)}")
        rest = {key: value for key, value in given.items() if key not in ("from", "value")}
        message, sharegpt = {"role": SHAREGPT_ROLES[speaker], "content": given.get("value"), **rest}, True
    if not (isinstance(message, dict) and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)):
        raise ConfigError(f"{where}: column {column!r} holds chat messages, but message {i} is {short(given)}; "
                          'each must be {"role": "...", "content": "..."} with text values (or ShareGPT\'s '
                          '{"from": "...", "value": "..."})')
    return dict(message), sharegpt


def chat_messages(value: list | tuple, where: str, column: str) -> tuple[tuple[dict[str, Any], ...], bool]:
    """The messages of a prompt, and whether they were given as ShareGPT's."""
    if not value:
        raise ConfigError(f"{where}: column {column!r} holds an empty list of chat messages")
    read = [_message(message, i, where, column) for i, message in enumerate(value)]
    last = read[-1][0]["role"]
    if last not in PROMPT_ENDS:
        raise ConfigError(f"{where}: column {column!r}'s prompt ends with the {last}'s message; a prompt ends with the "
                          "user's (or a tool's) message, or with the assistant's begun answer, which the model "
                          "continues")
    return tuple(message for message, _ in read), any(sharegpt for _, sharegpt in read)


def prefills(problem: Problem) -> bool:
    """A message-list prompt whose last message is the assistant's: continued, not answered anew."""
    return problem.messages is not None and problem.messages[-1].get("role") == "assistant"


def prefill_note(count: int, example: str) -> str:
    """The load's words for prompts ending in the assistant's message (TRL's prefill), which ShareGPT data holding
    whole conversations also looks like."""
    return (f"{count} prompts end with the assistant's message (e.g. {example}), which the model continues as a begun "
            "answer, as TRL does; where that message is the answer itself, leave it out of the prompt column")
