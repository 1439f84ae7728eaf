"""verl's names given to grpo (grpo.config.verl_names): each answered with grpo's key and, where the meaning is the
same, the override that says it, values translated and read with the names beside them; docs/coming-from-verl.md's
tables in step with the code."""

from __future__ import annotations

import re

import pytest
import yaml

from grpo.config import load_config
from grpo.config.verl_names import FORK_NAMES, VERL_NAMES
from grpo.errors import ConfigError
from tests import coming_from
from tests.coming_from import check_defaults_table, check_grpo_settings, check_names_table, refusal
from tests.docs import DOCS
from tests.verl_scripts import SCRIPTS, script_overrides

PAGE = DOCS / "coming-from-verl.md"


def written(message: str) -> dict[str, str]:
    return coming_from.written(message, "docs/coming-from-verl.md")


@pytest.mark.parametrize("heading,table", [("## Names", VERL_NAMES), ("## Names of verl's forks", FORK_NAMES)])
def test_the_names_tables_give_the_keys_grpo_names_and_every_name_it_answers(heading, table):
    check_names_table(PAGE, heading, table)


def test_every_grpo_key_and_setting_the_page_gives_is_grpo_s():
    check_grpo_settings(PAGE, ("## Names", "## Names of verl's forks"))


def test_the_grpo_defaults_the_defaults_table_states_are_grpo_s():
    check_defaults_table(PAGE)


@pytest.mark.parametrize("given,said", [
    ("actor_rollout_ref.rollout.n=5", "rollout.samples_per_problem=5"),
    ("+actor_rollout_ref.rollout.n=5", "rollout.samples_per_problem=5"),
    ("++data.train_batch_size=64", "rollout.problems_per_step=64"),
    ("algorithm.adv_estimator=grpo", "algo.advantage_norm=group algo.advantage_std=sample"),
    ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "algo.loss_agg=seq_mean"),
    ("actor_rollout_ref.actor.kl_loss_type=low_var_kl", "algo.kl_estimator=k3"),
    ("actor_rollout_ref.actor.use_kl_loss=True", "algo.kl_coef=0.001"),
    ("actor_rollout_ref.actor.use_kl_loss=False", "algo.kl_coef=0"),
    ("actor_rollout_ref.rollout.name=hf", "rollout.engine=transformers"),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "rollout.server.extra_args=[--tensor-parallel-size,2]"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "algo.ratio_level=sequence algo.loss_agg=seq_mean"),
    ("data.truncation=error", "task.truncate_prompts=no"),
    ("data.train_files=[a.parquet,b.parquet]",
     "task.name=dataset task.train_files=[a.parquet,b.parquet] task.answer_column=reward_model.ground_truth"),
    ("trainer.save_freq=-1", "checkpoint.every_steps=0"),
    ("trainer.test_freq=5", "eval.every_steps=5 eval.after_training=true"),
    ("trainer.project_name=p", "logging.wandb_project=p"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.0", "actor.warmup_steps=0"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=1024", "algo.updates_per_batch=1"),
    ("trainer.remove_clip=True", "algo.mask_truncated=true"),
])
def test_a_verl_setting_is_answered_in_one_line_with_the_override_that_says_the_same(given, said):
    message = refusal(given)
    assert message.startswith(f"{given.partition('=')[0].lstrip('+')} is verl's name; grpo")
    assert re.search(": " + re.escape(said) + r"( \(|$)", message), message
    load_config("tiny", said.split())  # grpo takes what it writes


@pytest.mark.parametrize("given", [
    "algorithm.adv_estimator=rloo", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
    "actor_rollout_ref.actor.kl_loss_type=mse", "data.truncation=middle", "actor_rollout_ref.actor.clip_ratio_c=3",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256", "actor_rollout_ref.actor.kl_loss_coef=0.01",
    "actor_rollout_ref.actor.policy_loss.loss_mode=clip-cov", "actor_rollout_ref.rollout.enable_chunked_prefill=False",
    "trainer.default_local_dir=",
])
def test_a_verl_setting_without_an_exact_equivalent_is_answered_without_an_override(given):
    message = refusal(given)
    assert message.startswith(f"{given.partition('=')[0]} is verl's name; grpo")
    assert not re.match(r"\S+ is verl's name; grpo's is [^(:]+: ", message), message


def test_names_read_together_say_what_each_means_beside_the_others():
    said = written(refusal(
        "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.kl_loss_coef=0.01",
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1", "trainer.total_training_steps=250",
        "data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.clip_ratio=0.3",
        "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean", "actor_rollout_ref.rollout.name=sglang",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.logger=[console]",
        "trainer.project_name=p"))
    assert said["algo.kl_coef=0"] == "actor_rollout_ref.actor.use_kl_loss, actor_rollout_ref.actor.kl_loss_coef"
    assert said["actor.warmup_steps=25"] == "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio"
    assert said["algo.updates_per_batch=2"] == ("actor_rollout_ref.actor.ppo_mini_batch_size, "
                                                "actor_rollout_ref.actor.ppo_epochs")
    assert said["algo.loss_agg=seq_mean"] == "actor_rollout_ref.actor.loss_agg_mode"  # verl's GSPO aggregates so
    assert said["rollout.server.extra_args=[--tp,2]"] == "actor_rollout_ref.rollout.tensor_model_parallel_size"
    assert not any(override.startswith(("algo.clip_low", "logging.wandb_project")) for override in said)
    load_config("tiny", [word for override in said for word in override.split()])


@pytest.mark.parametrize("script", sorted(SCRIPTS.glob("*.sh")), ids=lambda p: p.stem)
def test_every_override_a_script_s_message_writes_is_one_grpo_takes(script, tmp_path):
    said = written(refusal(*script_overrides(script, tmp_path), config="quickstart"))
    assert len(said) >= 15
    load_config("quickstart", [word for override in said for word in override.split()])


def test_a_name_among_verl_s_that_grpo_does_not_know_is_said_so_and_alone_keeps_the_section_list():
    message = refusal("actor_rollout_ref.rollout.n=4", "trainer.some_new_knob=1")
    assert "grpo has no key for: trainer.some_new_knob (not a verl name grpo knows)" in message
    assert refusal("trainer.steps=4").startswith("unknown key trainer (did you mean train?); valid keys in the top")


def test_a_verl_yaml_config_is_answered_in_one_message(tmp_path):
    config = tmp_path / "verl.yaml"
    config.write_text(yaml.safe_dump({"data": {"train_batch_size": 16, "max_response_length": 256},
                                      "actor_rollout_ref": {"rollout": {"n": 4}, "actor": {"optim": {"lr": 1e-6}}}}))
    said = written(refusal(config=str(config)))
    assert set(said) == {"rollout.problems_per_step=16", "rollout.max_new_tokens=256", "rollout.samples_per_problem=4",
                         "actor.lr=1.0e-06"}


def test_hydra_s_plus_prefixes_set_grpo_s_own_keys():
    assert load_config("tiny", ["+actor.lr=2e-6", "++train.steps=3"]).actor.lr == 2e-6
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        load_config("tiny", ["+=3"])


def test_a_section_under_a_family_is_answered_name_by_name_and_megatron_s_clip_grad_is_grpo_s_clip():
    message = refusal("+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform",
                      "actor_rollout_ref.actor.optim.clip_grad=0.5", "actor_rollout_ref.rollout.n=4")
    assert "actor.max_grad_norm=0.5 (actor_rollout_ref.actor.optim.clip_grad)" in message
    assert "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method (grpo trains" in message
