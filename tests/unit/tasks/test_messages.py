"""Chat prompts as {role, content} messages or ShareGPT's {from, value}."""

import pytest

from grpo.errors import ConfigError
from grpo.tasks.messages import chat_messages


def test_role_content_messages_are_kept_as_given():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q", "name": "n"}]
    assert chat_messages(messages, "f:1", "chat") == (tuple(messages), False)


def test_sharegpt_speakers_become_roles():
    messages = [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"},
                {"from": "user", "value": "q2", "loss": False}]
    assert chat_messages(messages, "f:1", "conversations") == ((
        {"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2", "loss": False}), True)


def test_a_sharegpt_speaker_that_is_no_role_is_refused():
    with pytest.raises(ConfigError, match=r"^f:1: column 'c' holds ShareGPT messages, but message 0 is from "
                                          r"'observation'; a prompt's speakers are human, user, gpt, assistant, system$"):
        chat_messages([{"from": "observation", "value": "x"}], "f:1", "c")


def test_a_sharegpt_message_without_text_is_refused_like_any_other():
    with pytest.raises(ConfigError, match=r"message 0 is \{'from': 'human'\}; each must be"):
        chat_messages([{"from": "human"}], "f:1", "c")
