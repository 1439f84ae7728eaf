"""AReaL's names given to grpo (grpo.config.areal_names): each answered with grpo's key and, where the meaning is
the same, the override that says it, values translated and read with the names beside them, inside grpo's own
sections too; docs/coming-from-areal.md's tables in step with the code."""

from __future__ import annotations

import re

import pytest

from grpo.config import load_config
from grpo.config.areal_names import AREAL_NAMES, SCRIPT_NAMES
from grpo.errors import ConfigError
from tests import coming_from
from tests.areal_configs import SCRIPTS, YAMLS, input_overrides
from tests.coming_from import check_defaults_table, check_grpo_settings, check_names_table, refusal
from tests.docs import DOCS

PAGE = DOCS / "coming-from-areal.md"
HEADINGS = ("## Names", "## Names in AReaL users' training scripts")


def written(message: str) -> dict[str, str]:
    return coming_from.written(message, "docs/coming-from-areal.md")


@pytest.mark.parametrize("heading,table", [(HEADINGS[0], AREAL_NAMES), (HEADINGS[1], SCRIPT_NAMES)])
def test_the_names_tables_give_the_keys_grpo_names_and_every_name_it_answers(heading, table):
    check_names_table(PAGE, heading, table)


def test_every_grpo_key_and_setting_the_page_gives_is_grpo_s():
    check_grpo_settings(PAGE, HEADINGS, frozenset(AREAL_NAMES), at_least=10)


def test_the_grpo_defaults_the_defaults_table_states_are_grpo_s():
    check_defaults_table(PAGE)


@pytest.mark.parametrize("given,said", [
    ("gconfig.n_samples=4", "rollout.samples_per_problem=4"),
    ("+sglang.mem_fraction_static=0.6", "rollout.server.memory_fraction=0.6"),
    ("rollout.request_retries=5", "rollout.max_retries=4"),
    ("rollout.request_timeout=7200", "rollout.server.request_timeout_s=7200"),
    ("actor.optimizer.eps=1e-8", "actor.eps=1.0e-08"),
    ("actor.optimizer.beta2=0.95", "actor.betas=[0.9,0.95]"),
    ("actor.eps_clip=0.4", "algo.clip_low=0.4 algo.clip_high=0.4"),
    ("actor.kl_ctl=0.0", "algo.kl_coef=0.0"),
    ("actor.ppo_n_minibatches=1", "algo.updates_per_batch=1"),
    ("actor.importance_sampling_level=sequence", "algo.ratio_level=sequence"),
    ("actor.dynamic_sampling=true", "rollout.filter_zero_variance=true rollout.max_refill_rounds=0"),
    ("allocation_mode=sglang:d4p1t1+d4p1t1", "rollout.engine=sglang rollout.server.replicas=4"),
    ("allocation_mode=sglang.d1p1t2+d1p1t2", "rollout.engine=sglang rollout.server.extra_args=[--tp,2]"),
    ("rollout.backend=vllm:d1p1t1", "rollout.engine=vllm"),
    ("saver.freq_secs=1800", "checkpoint.every_minutes=30"),
    ("evaluator.freq_steps=null", "eval.every_steps=0"),
    ("train_dataset.path=openai/gsm8k", "task.name=gsm8k task.path=hub"),
    ("recover.mode=auto", "recover=auto"),
    ("circuit_breaker_threshold=10", "guard.zero_reward.patience=10 guard.zero_reward.action=stop"),
    ("max_train_samples=500", "task.max_train_problems=500"),
])
def test_an_areal_setting_is_answered_in_one_line_with_the_override_that_says_the_same(given, said):
    message = refusal(given)
    assert message.startswith(f"{given.partition('=')[0].lstrip('+')} is AReaL's name; grpo")
    assert re.search(": " + re.escape(said) + r"( \(|$)", message), message
    load_config("tiny", said.split())  # grpo takes what it writes


@pytest.mark.parametrize("given", [
    "actor.kl_ctl=0.1", "actor.ppo_n_minibatches=4", "rollout.request_retries=0", "rollout.max_concurrent_rollouts=16",
    "actor.optimizer.warmup_steps_proportion=0.001", "actor.optimizer.lr_scheduler_type=step", "recover.mode=disabled",
    "actor.lora_rank=16",
])
def test_an_areal_setting_without_an_exact_equivalent_is_answered_without_an_override(given):
    message = refusal(given)
    assert message.startswith(f"{given.partition('=')[0]} is AReaL's name; grpo"), message
    assert not re.match(r"\S+ is AReaL's name; grpo's is [^(:]+: ", message), message


def test_names_read_together_say_what_each_means_beside_the_others():
    said = written(refusal(
        "allocation_mode=sglang:d2p1t1+d2p1t1", "gconfig.n_samples=4", "rollout.max_concurrent_rollouts=16",
        "actor.eps_clip=0.2", "actor.eps_clip_higher=0.28", "actor.reward_scaling=10.0", "actor.reward_bias=-0.5",
        "actor.reward_norm.mean_level=group", "actor.reward_norm.std_level=group", "saver.freq_steps=100",
        "recover.freq_steps=50", "sglang.context_length=4096", "+sglang.attention_backend=triton",
        "vllm.gpu_memory_utilization=0.8", "async_training=false", "rollout.max_head_offpolicyness=2",
        "stats_logger.wandb.mode=online", "stats_logger.wandb.project=p", "actor.use_lora=true", "actor.lora_rank=8",
        "gconfig.temperature=1.0", "actor.temperature=0.6"))
    assert said["rollout.server.max_concurrent_requests=32"] == "rollout.max_concurrent_rollouts"  # 16 x 4 / 2
    assert said["algo.clip_low=0.2"] == "actor.eps_clip"
    # (10 r - 10 m) / (10 sd + 1e-5) = (r - m) / (sd + 1e-6): the scale divides the eps, the bias cancels
    assert said["algo.advantage_norm=group algo.advantage_std=sample algo.advantage_eps=1.0e-06"] == (
        "actor.reward_norm.mean_level, actor.reward_norm.std_level")
    assert said["checkpoint.every_steps=50"] == "saver.freq_steps, recover.freq_steps"
    assert said["rollout.server.extra_args=[--context-length,4096,--attention-backend,triton]"] == (
        "sglang.context_length, sglang.attention_backend")
    assert said["rollout.max_staleness=0"] == "rollout.max_head_offpolicyness, async_training"
    assert said["model.lora.rank=8"] == "actor.use_lora, actor.lora_rank"
    assert said["logging.wandb_project=p"] == "stats_logger.wandb.mode, stats_logger.wandb.project"
    assert not any(override.startswith("rollout.server.memory_fraction") for override in said)  # vLLM's: unused
    assert said["rollout.temperature=1.0"] == "gconfig.temperature"  # the trainer's 0.6 has no grpo equivalent
    load_config("tiny", [word for override in said for word in override.split()])


def test_a_second_normalization_of_the_advantages_leaves_the_first_unwritten():
    message = refusal("actor.reward_norm.mean_level=group", "actor.reward_norm.std_level=group",
                      "actor.adv_norm.mean_level=batch", "actor.adv_norm.std_level=batch")
    assert not any(override.startswith("algo.advantage") for override in written(message))
    assert "actor.adv_norm.mean_level, actor.adv_norm.std_level (AReaL normalizes the advantages again" in message


@pytest.mark.parametrize("path", YAMLS + SCRIPTS, ids=lambda p: p.stem)
def test_every_override_an_input_s_message_writes_is_one_grpo_takes(path, tmp_path):
    said = written(refusal(*input_overrides(path, tmp_path), config="quickstart"))
    assert len(said) >= 10
    load_config("quickstart", [word for override in said for word in override.split()])


def test_an_areal_section_named_as_a_grpo_key_is_answered_where_a_preset_sets_that_key():
    message = refusal("recover.mode=auto", "experiment_name=gsm8k-grpo-docker", config="gsm8k/fast")
    assert written(message) == {"recover=auto": "recover.mode", "name=gsm8k-grpo-docker": "experiment_name"}
    with pytest.raises(ConfigError, match="'recover' is a value, not a section"):
        load_config("gsm8k/fast", ["recover.when=now"])


def test_names_other_tables_know_stay_theirs_and_grpo_s_own_typos_keep_grpo_s_answer():
    assert refusal("seed=3").startswith("seed is TRL's name; grpo's is train.seed")
    assert refusal("critic.ppo_epochs=2").startswith("critic.ppo_epochs is verl's name")
    assert refusal("rollout.max_new_token=3").startswith("unknown key rollout.max_new_token (did you mean "
                                                         "rollout.max_new_tokens?)")
    assert refusal("seed=3", "gconfig.n_samples=4").startswith("the config holds AReaL's names")
