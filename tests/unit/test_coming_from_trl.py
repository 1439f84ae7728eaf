"""docs/coming-from-trl.md's tables, grpo's side: every key they name is one of grpo's, every value they give
one grpo takes, every default they state grpo's. TRL's side is tests/integration/test_trl_names.py, in TRL's
environment."""

from __future__ import annotations

import re

import pytest
import yaml

from grpo.config import RunConfig, load_config, to_dict
from grpo.config.trl_names import TRL_NAMES
from grpo.errors import ConfigError
from tests.docs import in_backticks, table_under
from tests.trl_names import PAGE, defaults_rows, names_rows


def grpo_defaults(section: dict | None = None, prefix: str = "") -> dict[str, object]:
    """Every dotted key of grpo's config -> its default."""
    out: dict[str, object] = {}
    for name, value in (to_dict(RunConfig()) if section is None else section).items():
        if isinstance(value, dict):
            out |= grpo_defaults(value, f"{prefix}{name}.")
        else:
            out[prefix + name] = value
    return out


SECTIONS = tuple(name + "." for name, value in to_dict(RunConfig()).items() if isinstance(value, dict))


def test_every_grpo_key_the_names_table_gives_is_grpo_s_and_takes_its_value():
    keys = grpo_defaults()
    rows = table_under(PAGE, "## Names")[1:]
    assert len(rows) >= 20  # the table was found and read
    for _, grpo, notes in rows:
        assert in_backticks(grpo) or grpo == "—", grpo
        for text in in_backticks(grpo) + in_backticks(notes):
            for word in text.split():  # `algo.advantage_std=sample algo.advantage_eps=1e-4`: two settings
                key = word.split("=")[0]
                if key in keys:
                    if "=" in word:
                        load_config("tiny", [word])  # raises ConfigError for a value grpo refuses
                else:
                    assert not key.startswith(SECTIONS) and key not in {"run_dir", "name", "recover"}, word


def test_trl_s_step_maps_to_grpo_s_step_and_its_micro_batch_to_grpo_s_micro_batch():
    """TRL's step is per_device_train_batch_size x gradient_accumulation_steps x processes completions, its
    micro-batch per_device_train_batch_size alone (issue 46: the table mapped accumulation to the micro-batch)."""
    mapped: dict[str, set[str]] = {}
    for trl, grpo, _ in names_rows():
        for name in trl:
            mapped.setdefault(name.name, set()).update(grpo)
    assert mapped["gradient_accumulation_steps"] == {"rollout.problems_per_step"}
    assert mapped["per_device_train_batch_size"] == {"rollout.problems_per_step", "algo.micro_batch_size"}
    assert mapped["generation_batch_size"] == {"rollout.problems_per_step"}
    assert {"max_prompt_length", "warmup_ratio"}.isdisjoint(mapped)  # not in TRL 1.16's GRPOConfig


def test_the_names_the_loader_knows_as_trl_s_are_the_names_table_s():
    """A TRL name given to grpo is refused naming the grpo keys the table gives it (grpo.config.trl_names)."""
    mapped: dict[str, set[str]] = {}
    for trl, grpo, _ in names_rows():
        for name in trl:
            mapped.setdefault(name.name, set()).update(grpo)
        assert set().union(*(TRL_NAMES[n.name].keys for n in trl if n.name != "model")) >= set(grpo) - {"model.name"}
    assert set(TRL_NAMES) - {"reward_funcs", "peft_config"} <= set(mapped)
    for name, entry in TRL_NAMES.items():
        assert set(entry.keys) <= mapped.get(name, set(entry.keys)), name
        if name in mapped and not mapped[name]:  # the table's —: grpo has no key for it
            assert not entry.keys, name


@pytest.mark.parametrize("name", sorted(TRL_NAMES))
def test_a_trl_name_is_refused_in_one_line_naming_grpo_s_keys(name):
    with pytest.raises(ConfigError) as info:
        load_config("tiny", [f"{name}=1"])
    message = str(info.value)
    assert message.startswith(f"{name} is TRL's name; grpo") and "\n" not in message
    assert all(key in message for key in TRL_NAMES[name].keys)


@pytest.mark.parametrize("given,said", [
    ("num_generations=4", "rollout.samples_per_problem=4"), ("max_completion_length=256", "rollout.max_new_tokens=256"),
    ("beta=0.04", "algo.kl_coef=0.04"), ("loss_type=dr_grpo", "algo.loss_agg=seq_sum_norm"),
    ("loss_type=dapo", "algo.loss_agg=token_mean"), ("scale_rewards=false", "algo.advantage_norm=none"),
    ("scale_rewards=batch", "algo.advantage_norm=batch"), ("num_iterations=2", "algo.updates_per_batch=2"),
    ("temperature=0.7", "rollout.temperature=0.7"), ("reward_weights=[2.0]", "task.reward_weights=[2.0]"),
    ("algo.loss_type=grpo", "algo.loss_agg=seq_mean"), ("rollout.num_generations=4", "rollout.samples_per_problem=4"),
    ("mask_truncated_completions=true", "algo.mask_truncated=true"),
    ("importance_sampling_level=sequence", "algo.ratio_level=sequence"),
])
def test_a_trl_setting_is_refused_with_the_override_that_says_the_same(given, said):
    with pytest.raises(ConfigError, match=": " + re.escape(said) + r"( \(|$)"):
        load_config("tiny", [given])
    load_config("tiny", [said])  # the override it gives is one grpo takes


def test_trl_settings_without_one_grpo_key_are_refused_without_a_value_to_copy():
    for given in ("epsilon=0.3", "gradient_accumulation_steps=4", "loss_type=x"):
        with pytest.raises(ConfigError) as info:
            load_config("tiny", [given])
        assert "=" not in str(info.value).partition(";")[2].partition("(")[0], str(info.value)


def test_the_grpo_defaults_the_defaults_table_states_are_grpo_s():
    keys = grpo_defaults()
    rows = defaults_rows()
    assert {"seed", "lr_scheduler_type", "gradient_checkpointing"} <= {trl for trl, *_ in rows}
    for trl, _, key, default in rows:
        if key is not None:
            assert yaml.safe_load(default) == keys[key], (trl, key, default, keys[key])
