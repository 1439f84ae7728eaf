"""Every config key says what it means: `grpo config show` prints it, and this keeps it so."""

from grpo.config_doc import field_comments, undocumented
from grpo.config import ActorConfig, ServerConfig


def test_every_key_has_a_meaning():
    assert undocumented() == []


def test_field_comments_read_trailing_and_preceding_comments():
    assert field_comments(ActorConfig)["lr"] == "peak learning rate"
    assert field_comments(ServerConfig)["urls"].startswith("Attach to servers you run yourself")
