"""docs/coming-from-trl.md's tables, grpo's side: every key they name is one of grpo's, every value they give
one grpo takes, every default they state grpo's. TRL's side is tests/integration/test_trl_names.py, in TRL's
environment."""

from __future__ import annotations

import yaml

from grpo.config import RunConfig, load_config, to_dict
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


def test_the_grpo_defaults_the_defaults_table_states_are_grpo_s():
    keys = grpo_defaults()
    rows = defaults_rows()
    assert {"seed", "lr_scheduler_type", "gradient_checkpointing"} <= {trl for trl, *_ in rows}
    for trl, _, key, default in rows:
        if key is not None:
            assert yaml.safe_load(default) == keys[key], (trl, key, default, keys[key])
