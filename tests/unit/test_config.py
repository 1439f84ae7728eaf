from __future__ import annotations

import dataclasses

import pytest

from grpo.config import PRESET_DIR, AlgoConfig, BreakerConfig, GuardConfig, RunConfig, config_yaml, load_config
from grpo.config.doc import field_help
from grpo.errors import ConfigError

PRESETS = sorted(PRESET_DIR.rglob("*.yaml"))


def test_there_are_presets():
    names = {p.stem for p in PRESETS}
    assert {"tiny", "quickstart"} <= names


@pytest.mark.parametrize("path", PRESETS, ids=[str(p.relative_to(PRESET_DIR)) for p in PRESETS])
def test_every_preset_loads_by_path_and_by_name(path):
    by_path = load_config(path)
    assert isinstance(by_path, RunConfig)
    by_name = load_config(str(path.relative_to(PRESET_DIR).with_suffix("")))
    assert by_name == by_path


GSM8K_PRESETS = [p for p in PRESETS if p.parent.name == "gsm8k"]


@pytest.mark.parametrize("path", GSM8K_PRESETS, ids=[p.stem for p in GSM8K_PRESETS])
def test_gsm8k_presets_report_before_and_after_on_the_number_their_comment_states(path):
    cfg = load_config(path)
    assert cfg.eval.before_training and cfg.eval.after_training
    comment = " ".join(line.removeprefix("# ") for line in path.read_text().splitlines() if line.startswith("# "))
    assert f"on the first {cfg.eval.max_samples} GSM8K test problems before and after training" in comment
    assert cfg.task.path is None  # found from any working directory


def test_tiny_preset_values_and_defaults_for_what_it_leaves_out():
    cfg = load_config("tiny")
    assert cfg.model.name == "tiny"
    assert cfg.model.dtype == "float32"
    assert cfg.actor.lr == 1e-3
    assert cfg.task.arith.seed == 7
    assert cfg.task.arith.num_operands == 2  # not in the preset: the dataclass default
    assert cfg.guard == GuardConfig()


def test_no_path_gives_the_defaults():
    assert load_config() == RunConfig()


# ---------------------------------------------------------------------------------------------
# Overrides


def test_overrides_of_scalar_types():
    cfg = load_config(
        None,
        [
            "train.steps=5",
            "rollout.temperature=0.7",
            "eval.before_training=true",
            "name=my-run",
            "task.max_train_problems=null",
            "algo.loss_agg=seq_mean",
        ],
    )
    assert cfg.train.steps == 5 and type(cfg.train.steps) is int
    assert cfg.rollout.temperature == 0.7
    assert cfg.eval.before_training is True
    assert cfg.name == "my-run"
    assert cfg.task.max_train_problems is None
    assert cfg.algo.loss_agg == "seq_mean"


def test_float_written_without_a_dot_is_read_as_a_number():
    # YAML 1.1 reads `1e-6` as the string "1e-6"; a float field must still accept it
    cfg = load_config(None, ["actor.lr=1e-6", "actor.eps=1E-8"])
    assert cfg.actor.lr == 1e-6 and isinstance(cfg.actor.lr, float)
    assert cfg.actor.eps == 1e-8


def test_int_field_accepts_a_whole_float_only():
    assert load_config(None, ["train.steps=5.0"]).train.steps == 5
    with pytest.raises(ConfigError, match="train.steps must be an integer"):
        load_config(None, ["train.steps=5.5"])


def test_a_hash_in_an_override_is_text_not_a_yaml_comment():
    cfg = load_config(None, ["task.instruction=Answer # briefly", "task.system_prompt='quoted # kept'"])
    assert cfg.task.instruction == "Answer # briefly" and cfg.task.system_prompt == "quoted # kept"
    assert load_config(None, ["rollout.stop=####"]).rollout.stop == ["####"]
    assert load_config(None, ["rollout.stop=['#', 'Q:']"]).rollout.stop == ["#", "Q:"]


def test_the_old_faults_section_is_refused_naming_its_new_place(tmp_path):
    with pytest.raises(ConfigError, match=r"^faults.crash_at_step moved to testing.faults.crash_at_step: "):
        load_config("tiny", ["faults.crash_at_step=3"])
    # a run directory saved before the move holds the section at its defaults: it still loads
    saved = tmp_path / "config.yaml"
    saved.write_text(config_yaml(RunConfig()) + "faults:\n  crash_at_step: null\n  nan_loss_at_steps: []\n")
    assert load_config(saved) == RunConfig()


def test_overrides_of_lists():
    cfg = load_config(None, ["testing.faults.nan_loss_at_steps=[7]", "rollout.stop=['###', 'Q:']",
                             "actor.betas=[0.9, 0.95]"])
    assert cfg.testing.faults.nan_loss_at_steps == [7]
    assert cfg.rollout.stop == ["###", "Q:"]
    assert cfg.actor.betas == [0.9, 0.95]
    # a single value becomes a one-element list
    assert load_config(None, ["testing.faults.zero_reward_at_steps=3"]).testing.faults.zero_reward_at_steps == [3]
    with pytest.raises(ConfigError, match=r"testing.faults.nan_loss_at_steps\[1\] must be an integer"):
        load_config(None, ["testing.faults.nan_loss_at_steps=[1, x]"])


def test_override_inside_a_nested_breaker_keeps_its_other_keys_and_the_other_breakers():
    cfg = load_config(None, ["guard.zero_reward.patience=3", "guard.kl_explosion.action=stop"])
    assert cfg.guard.zero_reward == BreakerConfig(0.0, "rollback", 3)
    assert cfg.guard.kl_explosion == BreakerConfig(10.0, "stop", 2)
    assert cfg.guard.failed_rollouts == GuardConfig().failed_rollouts
    assert cfg.guard.enabled is True


def test_overrides_apply_on_top_of_a_preset():
    cfg = load_config("tiny", ["rollout.max_new_tokens=16", "task.arith.max_digits=3"])
    assert cfg.rollout.max_new_tokens == 16
    assert cfg.rollout.problems_per_step == 4  # from the preset
    assert cfg.task.arith.max_digits == 3
    assert cfg.task.arith.min_digits == 1  # the preset's value in the same section survives
    assert cfg.task.arith.seed == 7


def test_later_override_wins():
    assert load_config(None, ["train.steps=5", "train.steps=9"]).train.steps == 9


# ---------------------------------------------------------------------------------------------
# Errors


def test_unknown_key_names_valid_keys_and_suggests_the_close_match():
    with pytest.raises(ConfigError) as exc:
        load_config(None, ["actor.lrr=1e-6"])
    message = str(exc.value)
    assert "unknown key actor.lrr" in message
    assert "did you mean actor.lr?" in message
    assert "valid keys in actor:" in message
    for key in ("lr", "weight_decay", "warmup_steps", "schedule", "fp32_master_weights"):
        assert key in message


def test_unknown_key_in_a_nested_breaker():
    with pytest.raises(ConfigError, match=r"unknown key guard.zero_reward.patiense \(did you mean guard.zero_reward.patience\?\)"):
        load_config(None, ["guard.zero_reward.patiense=3"])


def test_unknown_top_level_key():
    with pytest.raises(ConfigError) as exc:
        load_config(None, ["modle.name=tiny"])
    message = str(exc.value)
    assert "unknown key modle" in message
    assert "did you mean model?" in message
    assert "valid keys in the top level" in message
    assert "guard" in message and "testing" in message


def test_unknown_key_without_a_close_match_has_no_suggestion():
    with pytest.raises(ConfigError) as exc:
        load_config(None, ["actor.zzzzzz=1"])
    assert "did you mean" not in str(exc.value)


def test_literal_violation_lists_the_choices():
    with pytest.raises(ConfigError, match="algo.loss_agg must be one of token_mean, seq_mean, seq_sum_norm; got 'mean'"):
        load_config(None, ["algo.loss_agg=mean"])
    with pytest.raises(ConfigError, match="guard.nonfinite.action must be one of warn, pause, rollback, stop"):
        load_config(None, ["guard.nonfinite.action=explode"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.steps=abc", "train.steps must be an integer, got 'abc'"),
        ("actor.lr=fast", "actor.lr must be a number, got 'fast'"),
        ("eval.before_training=1", "eval.before_training must be true or false, got 1"),
        ("train.seed=true", "train.seed must be an integer, got True"),
        ("model.name=[a, b]", "model.name must be a string"),
        ("actor.betas={a: 1}", "actor.betas must be a list"),
    ],
)
def test_wrong_type(override, message):
    with pytest.raises(ConfigError) as exc:
        load_config(None, [override])
    assert message in str(exc.value)


def test_setting_a_section_to_a_scalar():
    with pytest.raises(ConfigError, match=r"model is a section; set its keys, e\.g\. model\.<key>=\.\.\., got 'tiny'"):
        load_config(None, ["model=tiny"])
    with pytest.raises(ConfigError, match="guard.zero_reward is a section"):
        load_config(None, ["guard.zero_reward=3"])


def test_setting_a_key_below_a_value():
    with pytest.raises(ConfigError, match="'steps' is a value, not a section"):
        load_config(None, ["train.steps=5", "train.steps.x=1"])


@pytest.mark.parametrize("override", ["train.steps", "=5", "  =5"])
def test_malformed_override(override):
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        load_config(None, [override])


def test_yaml_file_whose_top_level_is_a_list(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- train\n- steps\n")
    with pytest.raises(ConfigError, match="the top level must be a mapping of keys, got list"):
        load_config(path)


def test_invalid_yaml_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train: {steps: 5\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_a_key_given_twice_is_refused_on_one_line_naming_both(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("rollout:\n  temperature: 0.7\n  max_new_tokens: 40\n  temperature: 1.0\ntrain: {steps: 3}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == (f"{path}:4:3: not valid YAML: 'temperature' is given twice in one mapping "
                              "(first on line 2): keep one")
    path.write_text("rollout:\n  temperature: 0.7\ntrain:\n  temperature: 1.0\n")  # other mappings: not twice
    with pytest.raises(ConfigError, match="^train.temperature is TRL's name; grpo's is rollout.temperature"):
        load_config(path)
    # A key given after a YAML merge (`<<: *anchor`) overrides the merged one, as YAML means it to.
    path.write_text("rollout:\n  <<: {temperature: 0.7, max_new_tokens: 40}\n  temperature: 0.9\n")
    cfg = load_config(path)
    assert (cfg.rollout.temperature, cfg.rollout.max_new_tokens) == (0.9, 40)


def test_yaml_file_with_a_float_written_without_a_dot(tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text("actor:\n  lr: 1e-6\n")
    assert load_config(path).actor.lr == 1e-6


def test_empty_yaml_file_gives_the_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n")
    assert load_config(path) == RunConfig()


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ConfigError) as exc:
        load_config("no-such-preset")
    message = str(exc.value)
    assert "'no-such-preset' is neither a file nor a preset" in message
    assert "tiny" in message and "quickstart" in message


def test_a_directory_named_as_a_preset_is_not_taken_for_it(tmp_path, monkeypatch):
    """`grpo quickstart` run where its run directory `quickstart/` lies read the preset's name as that directory
    (and failed after training, looking up the quickstart's expected gain)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").mkdir()
    (tmp_path / "quickstart" / "config.yaml").write_text("name: a run of mine\n")
    assert load_config("quickstart").name == "quickstart"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("name: a run of mine\n")
    with pytest.raises(ConfigError, match="'mine' is a directory, not a YAML file; did you mean mine/config.yaml"):
        load_config("mine")


# ---------------------------------------------------------------------------------------------
# Saving


def test_save_then_load_round_trips(tmp_path):
    cfg = load_config(
        "tiny",
        [
            "actor.lr=1e-6",
            "guard.zero_reward.patience=3",
            "testing.faults.nan_loss_at_steps=[7, 9]",
            "task.system_prompt=You are helpful.",
            "rollout.stop=['###']",
            "train.steps=null",
        ],
    )
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(cfg))
    loaded = load_config(path)
    assert loaded == cfg
    assert dataclasses.asdict(loaded) == dataclasses.asdict(cfg)


def test_save_then_load_round_trips_the_defaults(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(RunConfig()))
    assert load_config(path) == RunConfig()


@pytest.mark.parametrize("override,message", [
    ("train.steps=-1", "train.steps must be at least 1"),
    ("train.steps=0", "train.steps must be at least 1"),
    ("rollout.samples_per_problem=1", "a group of one has no advantage"),
    ("rollout.samples_per_problem=0", "rollout.samples_per_problem must be at least 2"),
    ("rollout.problems_per_step=0", "rollout.problems_per_step must be at least 1"),
    ("rollout.temperature=0", "greedy answers to one problem are all the same"),
    ("rollout.top_p=1.5", "rollout.top_p must be in (0, 1]"),
    ("rollout.max_new_tokens=0", "rollout.max_new_tokens must be at least 1"),
    ("actor.lr=0", "actor.lr must be a positive number"),
    ("actor.betas=[0.9]", "actor.betas must be two numbers"),
    ("algo.micro_batch_size=0", "algo.micro_batch_size must be at least 1"),
    ("eval.max_samples=-3", "eval.max_samples must be at least 1"),
    ("checkpoint.keep_last=0", "checkpoint.keep_last must be at least 1"),
    ("guard.zero_reward.patience=0", "guard.zero_reward.patience must be at least 1"),
    ("guard.rollback_lr_factor=0", "guard.rollback_lr_factor must be in (0, 1]"),
    ("testing.faults.fail_fraction=2", "testing.faults.fail_fraction must be in [0, 1]"),
    ("model.tiny.num_heads=3", "hidden_size divisible by num_heads"),
])
def test_values_that_cannot_train_are_refused_in_one_line(override, message):
    with pytest.raises(ConfigError) as info:
        load_config("tiny", [override])
    text = str(info.value)
    assert message in text and "got" in text and "\n" not in text


def test_every_preset_passes_validation():
    for preset in PRESET_DIR.rglob("*.yaml"):
        load_config(preset)


def test_a_tab_indented_file_and_a_run_directory_as_config_get_their_fix(tmp_path):
    """Issue 25 items 4 and 9: one line naming the file and the fix."""
    (tmp_path / "tabs.yaml").write_text("train:\n\tsteps: 2\n")
    with pytest.raises(ConfigError, match=r"tabs\.yaml:2:1: .*use spaces"):
        load_config(tmp_path / "tabs.yaml")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("train:\n  steps: 2\n")
    with pytest.raises(ConfigError, match=r"did you mean .*run/config\.yaml\?"):
        load_config(tmp_path / "run")


def test_deterministic_inference_is_sglangs_switch_and_refused_elsewhere():
    cfg = load_config("tiny", ["rollout.engine=sglang", "rollout.server.deterministic=true"])
    assert cfg.rollout.server.deterministic is True
    with pytest.raises(ConfigError, match=r"rollout.server.deterministic .* only with rollout.engine=sglang"):
        load_config("tiny", ["rollout.engine=vllm", "rollout.server.deterministic=true"])


def test_mask_truncated_is_off_by_default_a_bool_and_says_advantages_still_see_the_reward():
    assert RunConfig().algo.mask_truncated is False and load_config("tiny").algo.mask_truncated is False
    assert load_config("tiny", ["algo.mask_truncated=true"]).algo.mask_truncated is True
    with pytest.raises(ConfigError, match="algo.mask_truncated must be true or false, got 'yes please'"):
        load_config("tiny", ["algo.mask_truncated=yes please"])
    meaning = field_help(AlgoConfig)["mask_truncated"]
    assert "rollout.max_new_tokens" in meaning and "mask_truncated_completions" in meaning
    assert "still count in their group's advantages" in meaning


def test_ratio_level_is_token_by_default_sequence_is_gspo_and_its_help_gives_gspo_s_settings():
    assert RunConfig().algo.ratio_level == "token" and load_config("tiny").algo.ratio_level == "token"
    cfg = load_config("tiny", ["algo.ratio_level=sequence", "algo.clip_low=3e-4", "algo.clip_high=4e-4"])
    assert (cfg.algo.ratio_level, cfg.algo.clip_low, cfg.algo.clip_high) == ("sequence", 3e-4, 4e-4)
    with pytest.raises(ConfigError, match="algo.ratio_level must be one of token, sequence; got 'seq'"):
        load_config("tiny", ["algo.ratio_level=seq"])
    meaning = field_help(AlgoConfig)["ratio_level"]
    assert all(name in meaning for name in ("GSPO", "importance_sampling_level", "loss_mode=gspo",
                                            "algo.clip_low=3e-4 algo.clip_high=4e-4", "algo.loss_agg=seq_mean"))


def test_a_prompt_template_is_text_from_the_command_line_and_not_set_beside_a_prompt_column():
    assert load_config("tiny", [r"task.prompt_template={question}\n{options}"]).task.prompt_template == (
        r"{question}\n{options}")
    with pytest.raises(ConfigError) as info:
        load_config("tiny", [r"task.prompt_template={question}\n{options}", "task.prompt_column=question"])
    assert "keep one" in str(info.value) and "\n" not in str(info.value)


def test_a_mapping_value_keeps_the_types_yaml_gives_its_entries_and_refuses_what_it_cannot_be():
    """task.chat_template_kwargs: `false` stays a boolean (Qwen3's enable_thinking), a number a number; its entries
    one by one on the command line too."""
    cfg = load_config("tiny", ["task.chat_template_kwargs={enable_thinking: false, reasoning_effort: low, n: 3}"])
    assert cfg.task.chat_template_kwargs == {"enable_thinking": False, "reasoning_effort": "low", "n": 3}
    assert load_config("tiny", ["task.chat_template_kwargs.reasoning_effort=high"]).task.chat_template_kwargs == {
        "reasoning_effort": "high"}
    with pytest.raises(ConfigError, match=r"^task.chat_template_kwargs must be a mapping of names to values"):
        load_config("tiny", ["task.chat_template_kwargs=low"])
    with pytest.raises(ConfigError, match=r"^task.chat_template_kwargs sets the template's own variables; .*"
                                          r"tools, .* are apply_chat_template's arguments, set by grpo"):
        load_config("tiny", ["task.chat_template_kwargs={tools: none}"])
