"""A chat prompt from a messages column: `[{"role", "content"}, ...]` as chat templates take it, or ShareGPT's
`[{"from", "value"}, ...]` (LLaMA-Factory, Open-Reasoner-Zero) with its speakers read as roles."""

from __future__ import annotations

from typing import Any

from grpo.errors import ConfigError
from grpo.tasks.fields import short

# ShareGPT's speakers and the chat roles they are.
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
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
    return tuple(message for message, _ in read), any(sharegpt for _, sharegpt in read)
