"""Every config key says what it means: `grpo config show` prints it, and this keeps it so."""

import dataclasses

from grpo.config import ActorConfig, RunConfig, ServerConfig, load_config
from grpo.config.doc import field_help, reference_markdown, render, undocumented


def test_every_key_has_a_meaning():
    assert undocumented() == []


def test_each_key_has_its_meaning_as_metadata():
    assert field_help(ActorConfig)["lr"] == "peak learning rate"
    assert field_help(ServerConfig)["urls"].startswith("Attach to servers you run yourself")


def test_config_show_prints_values_defaults_and_meanings():
    text = render(load_config("tiny", ["actor.lr=3e-6"]))
    assert "  lr: 3.0e-06  # [default 1.0e-06] peak learning rate\n" in text
    assert "  server:  # An inference server that generates rollouts" in text  # a section's docstring


def _keys(section, prefix=""):
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            yield from _keys(value, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


def test_the_reference_lists_every_key_with_its_type_default_meaning_and_check():
    text = reference_markdown()
    for key in _keys(RunConfig()):
        assert f"- **`{key}`** (" in text, key
    assert "- **`rollout.problems_per_step`** (`int`, default `8`): groups per step. Its value must be at least 1." \
        in text
    assert "- **`guard.zero_reward.patience`** (`int`, default `10`): " in text  # a breaker's own default
    assert "## `rollout.server`\n\nAn inference server that generates rollouts" in text
    assert "(one of `group`, `batch`, `none`, default `group`)" in text
