"""OpenRLHF's flags given to grpo (grpo.config.openrlhf_names), as `flag=value` overrides and as `--flag value`
words: each answered with grpo's key and, where the meaning is the same, the override that says it, values
translated and read with the flags beside them; docs/coming-from-openrlhf.md's tables in step with the code."""

from __future__ import annotations

import re

import pytest

from grpo.cli import main
from grpo.config import load_config
from grpo.config.openrlhf_names import FORK_NAMES, OPENRLHF_NAMES
from tests import coming_from
from tests.coming_from import check_defaults_table, check_grpo_settings, check_names_table, refusal, told
from tests.docs import DOCS
from tests.script_flags import OPENRLHF, flags

PAGE = DOCS / "coming-from-openrlhf.md"
TABLES = ("## Names", "## Names of OpenRLHF's forks")


def written(message: str) -> dict[str, str]:
    return coming_from.written(message, "docs/coming-from-openrlhf.md")


@pytest.mark.parametrize("heading,table", zip(TABLES, (OPENRLHF_NAMES, FORK_NAMES)))
def test_the_names_tables_give_the_keys_grpo_names_and_every_flag_it_answers(heading, table):
    check_names_table(PAGE, heading, table)


def test_every_grpo_key_and_setting_the_page_gives_is_grpo_s():
    check_grpo_settings(PAGE, TABLES)


def test_the_grpo_defaults_the_defaults_table_states_are_grpo_s():
    check_defaults_table(PAGE)


@pytest.mark.parametrize("given,said", [
    ("n_samples_per_prompt=8", "rollout.samples_per_problem=8"),
    ("rollout_batch_size=128", "rollout.problems_per_step=128"),
    ("advantage_estimator=group_norm", "algo.advantage_norm=group algo.advantage_std=sample algo.advantage_eps=1e-9"),
    ("advantage_estimator=dr_grpo", "algo.advantage_norm=none"),
    ("use_kl_loss=true", "algo.kl_coef=0.01 algo.kl_estimator=k1"),
    ("init_kl_coef=0", "algo.kl_coef=0"),
    ("actor_learning_rate=5e-7", "actor.lr=5e-7"),
    ("train_batch_size=1024", "algo.updates_per_batch=1"),
    ("eps_clip=0.1", "algo.clip_low=0.1 algo.clip_high=0.1"),
    ("eps_clip_low_high=[0.2,0.28]", "algo.clip_low=0.2 algo.clip_high=0.28"),
    ("policy_loss_type=gspo", "algo.ratio_level=sequence algo.loss_agg=seq_mean"),
    ("input_key=question", "task.prompt_column=question task.text_prompts=raw"),
    ("apply_chat_template=true", "task.instruction=''"),
    ("prompt_data=a.jsonl,b.parquet", "task.name=dataset task.train_files=[a.jsonl,b.parquet]"),
    ("prompt_data=OpenRLHF/prompt-collection-v0.1", "task.name=dataset task.path=hub:OpenRLHF/prompt-collection-v0.1"),
    ("vllm_num_engines=2", "rollout.engine=vllm rollout.server.replicas=2"),
    ("vllm_num_engines=0", "rollout.engine=embedded"),
    ("param_dtype=fp16", "model.dtype=float16"),
    ("flash_attn=true", "model.attn_implementation=flash_attention_2"),
    ("lr_scheduler=cosine_with_min_lr", "actor.schedule=cosine actor.min_lr_ratio=0.1"),
    ("lr_warmup_ratio=0.0", "actor.warmup_steps=0"),
    ("load_checkpoint=true", "recover=auto"),
    ("use_tensorboard=logs/tb", "logging.tensorboard=true"),
    ("use_wandb=KEY", "logging.wandb_project=openrlhf_train_ppo"),
    ("max_ckpt_num=5", "checkpoint.keep_last=5"),
])
def test_an_openrlhf_flag_is_answered_in_one_line_with_the_override_that_says_the_same(given, said):
    message = refusal(given)
    assert message.startswith(f"{given.partition('=')[0]} is OpenRLHF's name; grpo")
    assert re.search(": " + re.escape(said) + r"( \(|$)", message), message
    load_config("tiny", said.split())  # grpo takes what it writes


@pytest.mark.parametrize("given", [
    "advantage_estimator=rloo", "advantage_estimator=reinforce_baseline", "init_kl_coef=0.01", "kl_estimator=k3",
    "n_samples_per_prompt=1", "train_batch_size=128", "prompt_data=data.arrow", "dynamic_filtering=true",
    "micro_train_batch_size=4", "remote_rm_url=http://localhost:5000/get_reward", "lr_warmup_ratio=0.03",
    "eval_dataset=OpenRLHF/aime-2024", "save_path=ckpt",
])
def test_an_openrlhf_flag_without_an_exact_equivalent_is_answered_without_an_override(given):
    message = refusal(given)
    assert message.startswith(f"{given.partition('=')[0]} is OpenRLHF's name; grpo")
    assert not re.match(r"\S+ is OpenRLHF's name; grpo's is [^(:]+: ", message), message


def test_flags_read_together_say_what_each_means_beside_the_others():
    said = written(refusal(
        "init_kl_coef=1e-3", "use_kl_loss=true", "kl_estimator=k3", "rollout_batch_size=16", "n_samples_per_prompt=8",
        "train_batch_size=128", "max_epochs=2", "eps_clip=0.3", "eps_clip_low_high=[0.2,0.28]", "input_key=messages",
        "apply_chat_template=true", "vllm_num_engines=2", "vllm_tensor_parallel_size=2", "enforce_eager=true",
        "use_wandb=KEY", "wandb_project=p", "eval_steps=-1", "save_steps=10"))
    assert said["algo.kl_coef=1e-3"] == "init_kl_coef, use_kl_loss"  # the estimator is given: not k1
    assert said["algo.kl_estimator=k3"] == "kl_estimator"
    assert said["algo.updates_per_batch=2"] == "train_batch_size, max_epochs"
    assert said["algo.clip_low=0.2 algo.clip_high=0.28"] == "eps_clip_low_high"  # eps_clip gives way
    assert said["task.prompt_column=messages"] == "input_key"  # through the chat template: not raw
    assert said["rollout.server.extra_args=[--tensor-parallel-size,2,--enforce-eager]"] == (
        "vllm_tensor_parallel_size, enforce_eager")
    assert said["logging.wandb_project=p"] == "use_wandb, wandb_project"
    assert said["eval.every_steps=0"] == "eval_steps" and said["checkpoint.every_steps=10"] == "save_steps"
    assert not any(override.startswith("algo.clip_low=0.3") for override in said)
    load_config("tiny", [word for override in said for word in override.split()])


def test_a_kl_in_the_reward_and_vllm_knobs_without_vllm_write_nothing():
    said = written(refusal("init_kl_coef=0.01", "kl_estimator=k3", "vllm_tensor_parallel_size=2",
                           "enforce_eager=true", "n_samples_per_prompt=8"))
    assert list(said) == ["rollout.samples_per_problem=8"]


def test_a_local_dataset_directory_is_task_path(tmp_path):
    message = refusal(f"prompt_data={tmp_path}")
    assert f": task.name=dataset task.path={tmp_path} (" in message


@pytest.mark.parametrize("script", OPENRLHF.files(), ids=lambda p: p.stem)
def test_every_override_a_script_s_message_writes_is_one_grpo_takes(script, tmp_path):
    given = flags(OPENRLHF.words(script, tmp_path))
    said = written(refusal(*(flag.override for flag in given), config="quickstart"))
    assert len(said) >= 15
    load_config("quickstart", [word for override in said for word in override.split()])


def test_flags_given_as_flags_and_as_overrides_get_the_same_answer(capsys):
    words = ["--n_samples_per_prompt", "8", "--use_kl_loss", "--init_kl_coef=1e-3", "--eps_clip_low_high", "0.2",
             "0.28", "--save_steps", "-1", "--zero_stage", "3"]
    as_flags = told(["train", "--config", "quickstart", *words], capsys)
    assert as_flags == refusal("n_samples_per_prompt=8", "use_kl_loss=true", "init_kl_coef=1e-3",
                               "eps_clip_low_high=[0.2,0.28]", "save_steps=-1", "zero_stage=3", config="quickstart")
    assert "checkpoint.every_steps=0 checkpoint.every_minutes=0 (save_steps)" in as_flags


def test_grpo_s_own_options_and_overrides_among_the_flags_stay_grpo_s(tmp_path, capsys):
    message = told(["train", "--use_kl_loss", "actor.lr=2e-6", "--config", "tiny", "--n_samples_per_prompt", "4",
                    f"--run-dir={tmp_path / 'run'}"], capsys)
    assert message.startswith("the top level holds OpenRLHF's names")
    assert "algo.kl_coef=0.01 algo.kl_estimator=k1 (use_kl_loss)" in message and "actor.lr" not in message
    assert not (tmp_path / "run").exists()


def test_a_flag_among_openrlhf_s_that_grpo_does_not_know_is_said_so(capsys):
    message = told(["plan", "--config", "tiny", "--n_samples_per_prompt", "4", "--vllm_enable_is_correction"], capsys)
    assert "grpo has no key for: vllm_enable_is_correction (not an OpenRLHF flag grpo knows)" in message


def test_flags_that_are_not_openrlhf_s_keep_argparse_s_refusal(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--config", "tiny", "--no-such-flag", "1"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_a_name_trl_shares_is_trl_s_answer_unless_openrlhf_s_names_outnumber_it():
    assert refusal("seed=1").startswith("seed is TRL's name; grpo's is train.seed: train.seed=1")
    assert refusal("seed=1", "rollout_batch_size=8", "n_samples_per_prompt=4").startswith(
        "the top level holds OpenRLHF's names")


def test_the_page_s_example_is_what_grpo_says(capsys):
    lines = PAGE.read_text().split("\n    grpo train --config quickstart --n_samples_per_prompt")[1].split("\n\n")[0]
    command, _, said = ("--n_samples_per_prompt" + lines).partition("\n    config error: ")
    words = command.replace("\\\n", " ").split()
    shown = " ".join(said.split())
    assert re.fullmatch(re.escape(shown).replace(re.escape("..."), ".*?"), told(["train", "--config", "quickstart",
                                                                                *words], capsys))
