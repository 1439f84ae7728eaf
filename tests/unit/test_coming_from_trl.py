"""docs/coming-from-trl.md's tables, grpo's side: every key they name is one of grpo's, every value they give
one grpo takes, every default they state grpo's. TRL's side is tests/integration/test_trl_names.py, in TRL's
environment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from grpo.config import RunConfig, load_config, to_dict
from grpo.config.trl_names import ALL_NAMES, SCRIPT_NAMES, TRL_NAMES
from grpo.errors import ConfigError
from tests.coming_from import grpo_defaults, refusal
from tests.docs import in_backticks, table_under
from tests.trl_names import PAGE, defaults_rows, names_rows, script_names_rows

RECIPE = Path(__file__).parents[1] / "data" / "trl_scripts" / "open_r1_config_simple_rl.yaml"


SECTIONS = tuple(name + "." for name, value in to_dict(RunConfig()).items() if isinstance(value, dict))


def test_every_grpo_key_the_names_tables_give_is_grpo_s_and_takes_its_value():
    keys = grpo_defaults()
    rows = table_under(PAGE, "## Names")[1:]
    assert len(rows) >= 20  # the table was found and read
    script_rows = table_under(PAGE, "## Names in TRL scripts beyond GRPOConfig")[1:]
    assert len(script_rows) >= 10
    for grpo, notes in [(g, n) for _, g, n in rows] + [(g, n) for _, _, g, n in script_rows]:
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


def test_the_names_the_loader_knows_as_trl_s_are_the_names_tables_():
    """A TRL name given to grpo is refused naming the grpo keys the tables give it (grpo.config.trl_names):
    GRPOConfig's in the first, those TRL scripts use beyond it in the second."""
    mapped: dict[str, set[str]] = {}
    for trl, grpo, _ in names_rows():
        for name in trl:
            mapped.setdefault(name.name, set()).update(grpo)
        assert set().union(*(TRL_NAMES[n.name].keys for n in trl if n.name != "model")) >= set(grpo) - {"model.name"}
    script_mapped: dict[str, set[str]] = {}
    for names, _, grpo, _ in script_names_rows():
        for name in names:
            script_mapped.setdefault(name, set()).update(grpo)
        assert set().union(*(SCRIPT_NAMES[n].keys for n in names)) == set(grpo), names
    assert set(TRL_NAMES) - {"reward_funcs", "peft_config"} <= set(mapped)
    assert set(SCRIPT_NAMES) - {"torch_dtype"} == set(script_mapped)  # torch_dtype: dtype's row, by its note
    assert not set(TRL_NAMES) & set(SCRIPT_NAMES)
    for name, entry in ALL_NAMES.items():
        table = mapped if name in TRL_NAMES else script_mapped
        assert set(entry.keys) <= table.get(name, set(entry.keys)), name
        if name in table and not table[name]:  # the table's —: grpo has no key for it
            assert not entry.keys, name


@pytest.mark.parametrize("name", sorted(ALL_NAMES))
def test_a_trl_name_is_refused_in_one_line_naming_grpo_s_keys(name):
    with pytest.raises(ConfigError) as info:
        load_config("tiny", [f"{name}=1"])
    message = str(info.value)
    assert message.startswith(f"{name} is TRL's name; grpo") and "\n" not in message
    assert all(key in message for key in ALL_NAMES[name].keys)


def test_a_trl_recipe_is_refused_once_with_every_name_written_as_grpo_s():
    """open-r1's recipe (a TrlParser YAML: ModelConfig, ScriptArguments, GRPOConfig and open-r1's keys in one
    mapping) given as a grpo config: one message, not one per start (blind: 'unknown key model_revision')."""
    with pytest.raises(ConfigError) as info:
        load_config(RECIPE)
    message = str(info.value)
    assert message.startswith("the top level holds TRL's names, not grpo's keys; write them as grpo's: ")
    assert "\n" not in message and message.endswith(" (docs/coming-from-trl.md)")
    written = dict(re.findall(r"(\S+=\S+) \((\w+)\)", message))
    assert {"actor.lr=1.5e-06": "learning_rate", "task.reward_weights=[1.0,0.5]": "reward_weights",
            "rollout.samples_per_problem=7": "num_generations", "task.max_prompt_tokens=650": "max_prompt_length",
            "train.steps=null": "max_steps", "actor.schedule=cosine": "lr_scheduler_type",
            "model.name=aidando73/Qwen-2.5-7B-Simple-RL-v2": "model_name_or_path"}.items() <= written.items()
    load_config("tiny", [*written, "task.reward=[math,math_format]"])  # every override it writes grpo takes
    by_hand, _, none = message.partition("; set by hand: ")[2].partition("; grpo has no key for: ")
    assert "system_prompt: task.system_prompt" in by_hand  # several lines of text: not an override
    assert "warmup_ratio: actor.warmup_steps" in by_hand and "reward_funcs: task.reward" in by_hand
    assert {"model_revision", "hub_model_id", "push_to_hub", "vllm_device"} <= set(none.removesuffix(
        " (docs/coming-from-trl.md)").split(", "))


def test_several_trl_names_as_overrides_are_answered_together():
    with pytest.raises(ConfigError, match=r"^the top level holds TRL's names, not grpo's keys; write them as grpo's: "
                                          r"task.max_prompt_tokens=128 \(max_prompt_length\), algo.ratio_level="
                                          r"sequence \(importance_sampling_level\); grpo has no key for: "
                                          r"prompt_len \(not TRL's either\)"):
        load_config("tiny", ["max_prompt_length=128", "importance_sampling_level=sequence", "prompt_len=3"])
    with pytest.raises(ConfigError, match=r"^unknown key prompt_len; valid keys in the top level: "):
        load_config("tiny", ["prompt_len=3", "prompt_length=3"])  # no TRL name among them: the first, as before


@pytest.mark.parametrize("given,said", [
    ("num_generations=4", "rollout.samples_per_problem=4"), ("max_completion_length=256", "rollout.max_new_tokens=256"),
    ("beta=0.04", "algo.kl_coef=0.04"), ("loss_type=dr_grpo", "algo.loss_agg=seq_sum_norm"),
    ("loss_type=dapo", "algo.loss_agg=token_mean"), ("scale_rewards=false", "algo.advantage_norm=none"),
    ("scale_rewards=batch", "algo.advantage_norm=batch"), ("num_iterations=2", "algo.updates_per_batch=2"),
    ("temperature=0.7", "rollout.temperature=0.7"), ("reward_weights=[2.0]", "task.reward_weights=[2.0]"),
    ("algo.loss_type=grpo", "algo.loss_agg=seq_mean"), ("rollout.num_generations=4", "rollout.samples_per_problem=4"),
    ("mask_truncated_completions=true", "algo.mask_truncated=true"),
    ("max_prompt_length=512", "task.max_prompt_tokens=512"), ("importance_sampling_level=sequence",
                                                               "algo.ratio_level=sequence"),
    ("lr_scheduler_type=cosine", "actor.schedule=cosine"), ("max_steps=-1", "train.steps=null"),
    ("lora_r=16", "model.lora.rank=16"), ("torch_dtype=bfloat16", "model.dtype=bfloat16"),
    ("model_name_or_path=Qwen/Qwen2.5-0.5B-Instruct", "model.name=Qwen/Qwen2.5-0.5B-Instruct"),
    ("use_vllm=true", "rollout.engine=vllm"), ("use_vllm=false", "rollout.engine=embedded"),
    ("vllm_mode=colocate", "rollout.engine=vllm"), ("fast_inference=true", "rollout.engine=vllm"),
    ("vllm_max_model_length=3584", "rollout.server.extra_args=[--max-model-len,3584]"),
    ("use_gradient_checkpointing=unsloth", "model.gradient_checkpointing=true"),
    ("gpu_memory_utilization=0.9", "rollout.server.memory_fraction=0.9"), ("warmup_ratio=0.0", "actor.warmup_steps=0"),
])
def test_a_trl_setting_is_refused_with_the_override_that_says_the_same(given, said):
    with pytest.raises(ConfigError, match=": " + re.escape(said) + r"( \(|$)"):
        load_config("tiny", [given])
    load_config("tiny", [said])  # the override it gives is one grpo takes


def test_a_warmup_ratio_beside_max_steps_is_written_as_transformers_rounds_it_to_steps():
    with pytest.raises(ConfigError, match=r"write them as grpo's: actor.warmup_steps=25 \(warmup_ratio\), "
                                          r"train.steps=250 \(max_steps\) "):
        load_config("tiny", ["warmup_ratio=0.1", "max_steps=250"])
    with pytest.raises(ConfigError, match=r"set by hand: warmup_ratio: actor.warmup_steps"):
        load_config("tiny", ["warmup_ratio=0.1", "num_generations=4"])  # no max_steps: no count to write


def test_save_and_eval_steps_as_fractions_of_max_steps_are_written_as_steps_and_other_values_by_hand():
    """transformers reads save_steps and eval_steps below 1 as fractions of max_steps (rounded up); a value grpo's
    key refuses (0, -1) is never written as an override."""
    with pytest.raises(ConfigError, match=r"write them as grpo's: checkpoint.every_steps=20 \(save_steps\), "
                                          r"eval.every_steps=50 \(eval_steps\), train.steps=200 \(max_steps\) "):
        load_config("tiny", ["save_steps=0.1", "eval_steps=0.25", "max_steps=200"])
    assert refusal("save_steps=50").endswith(": checkpoint.every_steps=50 (every N steps; TRL's fraction below 1 "
                                                "is of max_steps)")
    for unwritable in ("save_steps=-1", "save_steps=0", "save_steps=0.5"):
        assert "checkpoint.every_steps=" not in refusal(unwritable), unwritable


def test_trl_settings_without_one_grpo_key_are_refused_without_a_value_to_copy():
    for given in ("epsilon=0.3", "gradient_accumulation_steps=4", "loss_type=x", "vllm_mode=server",
                  "warmup_ratio=0.1"):
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
