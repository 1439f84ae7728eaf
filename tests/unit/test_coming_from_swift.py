"""ms-swift's flags given to grpo (grpo.config.swift_names), as `flag=value` overrides and as `--flag value` words
(after `grpo train`, with or without `swift rlhf`): each answered with grpo's key and, where the meaning is the same,
the override that says it, values translated and read with the flags beside them; docs/coming-from-swift.md's tables
in step with the code."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from grpo.config import load_config
from grpo.config.swift_names import SWIFT_OWN_NAMES, SWIFT_TRL_NAMES
from tests import coming_from
from tests.coming_from import check_defaults_table, check_grpo_settings, check_names_table, refusal, told
from tests.docs import DOCS
from tests.script_flags import SWIFT, flags

PAGE = DOCS / "coming-from-swift.md"
TABLES = ("## Names", "## Names ms-swift shares with TRL")


def written(message: str) -> dict[str, str]:
    return coming_from.written(message, "docs/coming-from-swift.md")


def loads(overrides) -> None:
    """grpo takes every override, each as a shell reads it (a system prompt is quoted); reward weights with as many
    rewards (the rewards are set by hand)."""
    words = [word for override in overrides for word in shlex.split(override)]
    weights = [yaml.safe_load(word.partition("=")[2]) for word in words if word.startswith("task.reward_weights=")]
    load_config("tiny", words + [f"task.reward=[{','.join(['math'] * len(each))}]" for each in weights])


@pytest.mark.parametrize("heading,table", zip(TABLES, (SWIFT_OWN_NAMES, SWIFT_TRL_NAMES)))
def test_the_names_tables_give_the_keys_grpo_names_and_every_flag_it_answers(heading, table):
    check_names_table(PAGE, heading, table)


def test_every_grpo_key_and_setting_the_page_gives_is_grpo_s():
    check_grpo_settings(PAGE, TABLES)


def test_the_grpo_defaults_the_defaults_table_states_are_grpo_s():
    check_defaults_table(PAGE)


@pytest.mark.parametrize("given,said", [
    ("train_type=full", "model.lora.rank=0"),
    ("train_type=lora", "model.lora.rank=8 model.lora.alpha=32 model.lora.dropout=0.05"),
    ("tuner_type=full", "model.lora.rank=0"),
    ("beta=0.04", "algo.kl_coef=0.04"),
    ("epsilon=0.2", "algo.clip_low=0.2 algo.clip_high=0.2"),
    ("scale_rewards=group", "algo.advantage_norm=group algo.advantage_std=sample algo.advantage_eps=1e-4"),
    ("scale_rewards=none", "algo.advantage_norm=none"),
    ("advantage_estimator=grpo", "algo.advantage_norm=group algo.advantage_std=sample algo.advantage_eps=1e-4"),
    ("kl_in_reward=false", "algo.kl_coef=0.04"),
    ("overlong_filter=false", "algo.mask_truncated=false"),
    ("dynamic_sample=false", "rollout.filter_zero_variance=false"),
    ("attn_impl=flash_attn", "model.attn_implementation=flash_attention_2"),
    ("max_length=2048", "task.max_prompt_tokens=2048 task.truncate_prompts=left"),
    ("truncation_strategy=left", "task.truncate_prompts=left"),
    ("dataset=[a.jsonl,b.csv]", "task.name=dataset task.train_files=[a.jsonl,b.csv] task.instruction=''"),
    ("system=You are a careful solver.", "task.system_prompt='You are a careful solver.'"),
    ("async_generate=false", "rollout.max_staleness=0"),
    ("vllm_mode=colocate", "rollout.engine=vllm"),
    ("importance_sampling_level=sequence", "algo.ratio_level=sequence"),
    ("loss_type=grpo", "algo.loss_agg=seq_mean"),
])
def test_an_swift_flag_is_answered_with_the_override_that_says_the_same(given, said):
    message = refusal("rlhf_type=grpo", given)
    assert message.startswith("the top level holds ms-swift's names")
    assert written(message)[said] == given.partition("=")[0], message
    loads([said])


@pytest.mark.parametrize("given", [
    "advantage_estimator=rloo", "kl_in_reward=true", "scale_rewards=gdpo", "overlong_filter=true",
    "dynamic_sample=true", "dataset=AI-MO/NuminaMath-TIR#5000", "dataset=train.jsonl#100", "dataset=modelscope/gsm8k",
    "system=examples/train/grpo/prompt.txt", "train_type=adalora", "vllm_tensor_parallel_size=2",
    "vllm_gpu_memory_utilization=0.5", "vllm_server_host=127.0.0.1", "truncation_strategy=delete",
    "reward_funcs=[accuracy,format]", "columns={text: response}",
])
def test_an_swift_flag_without_an_exact_equivalent_is_answered_without_an_override(given):
    name = given.partition("=")[0]
    message = refusal("rlhf_type=grpo", given)
    assert message.startswith("the top level holds ms-swift's names") and name in message
    assert all(name not in names.split(", ") for names in written(message).values()), message


def test_a_lone_ms_swift_flag_is_answered_in_one_line():
    assert refusal("train_type=full") == ("train_type is ms-swift's name; grpo's is model.lora.rank and "
                                          "model.lora.alpha and model.lora.dropout: model.lora.rank=0 (full: "
                                          "model.lora.rank=0; lora (ms-swift's default): ms-swift's rank, alpha and "
                                          "dropout (8, 32, 0.05 unless given); other tuners have no grpo equivalent)")


def test_flags_read_together_say_what_each_means_beside_the_others():
    said = written(refusal(
        "rlhf_type=grpo", "beta=0.001", "advantage_estimator=rloo", "epsilon=3e-4", "epsilon_high=4e-4",
        "train_type=lora", "lora_rank=32", "lora_alpha=128", "use_vllm=true", "vllm_mode=colocate",
        "vllm_tensor_parallel_size=2", "vllm_max_model_len=4096", "vllm_enforce_eager=true", "loss_type=dapo",
        "overlong_filter=true", "columns={\"question\": \"query\", \"answer\": \"solution\"}",
        "truncation_strategy=delete", "max_length=1024"))
    assert not any(override.startswith("algo.kl_coef") for override in said)  # rloo's KL is in the reward
    assert said["algo.clip_low=3e-4"] == "epsilon"  # epsilon_high is given: epsilon is the lower bound only
    assert said["model.lora.rank=32 model.lora.alpha=128 model.lora.dropout=0.05"] == (
        "train_type, lora_rank, lora_alpha")
    assert said["rollout.server.extra_args=[--tensor-parallel-size,2,--max-model-len,4096,--enforce-eager]"] == (
        "vllm_tensor_parallel_size, vllm_max_model_len, vllm_enforce_eager")
    assert said["algo.mask_truncated=true"] == "overlong_filter"  # a mean over tokens: grpo's masking
    assert said["task.prompt_column=question task.answer_column=answer"] == "columns"
    assert not any(override.startswith("task.max_prompt_tokens") for override in said)  # delete draws another row
    loads(said)


def test_lora_flags_with_full_training_and_vllm_knobs_on_a_server_write_nothing():
    said = written(refusal("train_type=full", "lora_rank=8", "target_modules=all-linear", "use_vllm=true",
                           "vllm_server_host=127.0.0.1", "vllm_server_port=8000", "vllm_tensor_parallel_size=2",
                           "vllm_gpu_memory_utilization=0.9"))
    assert list(said) == ["model.lora.rank=0", "rollout.engine=vllm"]


@pytest.mark.parametrize("script", SWIFT.files(), ids=lambda p: p.stem)
def test_every_override_a_script_s_message_writes_is_one_grpo_takes(script, tmp_path):
    given = flags(SWIFT.words(script, tmp_path))
    said = written(refusal(*(flag.override for flag in given), config="quickstart"))
    assert len(said) >= 12
    loads(said)


def test_flags_given_as_flags_after_swift_rlhf_and_as_overrides_get_the_same_answer(capsys):
    words = ["--rlhf_type", "grpo", "--model", "Qwen/Qwen2.5-7B-Instruct", "--reward_funcs", "accuracy", "format",
             "--use_vllm", "true", "--vllm_mode", "colocate", "--train_type=lora", "--lora_rank", "16"]
    as_flags = told(["train", "--config", "quickstart", *words], capsys)
    assert as_flags == told(["train", "--config", "quickstart", "swift", "rlhf", *words], capsys)
    assert as_flags == refusal("rlhf_type=grpo", "model=Qwen/Qwen2.5-7B-Instruct", "reward_funcs=[accuracy,format]",
                               "use_vllm=true", "vllm_mode=colocate", "train_type=lora", "lora_rank=16",
                               config="quickstart")
    assert "model.name=Qwen/Qwen2.5-7B-Instruct (model)" in as_flags


def test_grpo_s_own_options_and_overrides_among_the_flags_stay_grpo_s(tmp_path, capsys):
    message = told(["train", "swift", "rlhf", "--rlhf_type", "grpo", "actor.lr=2e-6", "--config", "tiny",
                    "--num_generations", "4", f"--run-dir={tmp_path / 'run'}"], capsys)
    assert message.startswith("the top level holds ms-swift's names")
    assert "rollout.samples_per_problem=4 (num_generations)" in message and "actor.lr" not in message
    assert not (tmp_path / "run").exists()


def test_a_name_other_trainers_share_is_theirs_unless_ms_swift_s_names_outnumber_them():
    assert refusal("temperature=0.9").startswith("temperature is TRL's name")
    assert refusal("lora_rank=8").startswith("lora_rank is OpenRLHF's name")
    assert refusal("lora_rank=8", "train_type=lora").startswith("the top level holds ms-swift's names")
    assert refusal("learning_rate=1e-6", "num_generations=8").startswith("the top level holds TRL's names")


def test_the_page_s_example_is_what_grpo_says(capsys):
    lines = PAGE.read_text().split("\n    grpo train --config quickstart swift rlhf")[1].split("\n\n")[0]
    command, _, said = lines.partition("\n    config error: ")
    words = command.replace("\\\n", " ").split()
    shown = " ".join(said.split())
    assert re.fullmatch(re.escape(shown).replace(re.escape("..."), ".*?"), told(
        ["train", "--config", "quickstart", "swift", "rlhf", *words], capsys))
