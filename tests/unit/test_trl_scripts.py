"""Seven real TRL GRPOTrainer scripts (tests/data/trl_scripts/README.md: their SOURCEs, what TRL does with each,
the blind run) run on grpo the way a TRL user does after reading docs/coming-from-trl.md: rows in each script's
shape, its reward functions written here in their shapes, the settings the docs' tables translate, grpo's tiny
model. TRL's side is written from what its GRPOTrainer does: a text prompt tokenized as it is, a message list
through the chat template, `max_prompt_length` (TRL 0.14 to 0.2x) keeping a prompt's last tokens, every column
but `prompt` and `completion` passed by name, rewards summed with `reward_weights`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grpo import api
from grpo.config import load_config
from grpo.errors import ConfigError
from grpo.policy.models import TINY_POSITIONS, build_char_tokenizer
from grpo.rewards import get_reward, resolve_rewards, score
from grpo.tasks import build_task, reward_inputs
from grpo.tasks.context import fit_prompts, model_context, prompt_lengths
from grpo.tasks.prompts import encode_prompt

from .tasks.test_files import write_rows
from .test_trl_rewards import GSM8K, STATE, Shape, trl_rewards

DATA = Path(__file__).parents[1] / "data"
TOKENIZER = build_char_tokenizer()
# Test-sized runs: the tiny model, one step, short answers; the scripts' own settings come after these.
SMALL = ("model.name=tiny", "model.dtype=float32", "train.steps=1", "rollout.max_new_tokens=8",
         "rollout.retry_backoff_s=0", "logging.tensorboard=false", "logging.report=false", "logging.progress=false",
         "checkpoint.every_steps=0")


@dataclass(frozen=True)
class Script:
    rows: list[dict[str, Any]]
    rewards: tuple[str, ...]  # module:function, each modelled on the script's own
    completions: list[str]  # one per row, made up to reach the rewards' branches
    settings: tuple[str, ...] = ()  # the script's GRPOConfig as grpo's overrides, written from the docs' tables
    weights: tuple[float, ...] | None = None
    max_prompt_length: int | None = None  # the script's, where it sets one: TRL kept a prompt's last N tokens

    def shape(self) -> Shape:
        return Shape(self.rows, self.completions)


def conversation(system: str | None, user: str) -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def countdown_prompt(numbers: list[int], target: int) -> str:
    """The text run_r1_grpo.py makes: the chat template applied by the script, the assistant's turn prefilled."""
    messages = [*conversation("You first think, then answer.", f"Using the numbers {numbers}, make {target}. "
                              "Show your work in <think> </think> tags and the equation in <answer> </answer> tags."),
                {"role": "assistant", "content": "Let me solve this step by step.\n<think>"}]
    return TOKENIZER.apply_chat_template(messages, tokenize=False, continue_final_message=True)


THINK = "A conversation between user and assistant. The assistant thinks in <think></think>, then answers."
WORKING = "Give your working out between <start_working_out> and <end_working_out>, then <SOLUTION></SOLUTION>."
POST = "We split the rent evenly but she has the bigger room and I pay for the internet too. "

SCRIPTS = {
    "trl-gspo": Script(  # huggingface/trl examples/scripts/gspo.py: make_conversation, `messages`, `problem` removed
        [{"prompt": conversation(THINK, p), "solution": s} for p, s in (
            ("What is $\\frac{1}{3}+\\frac{1}{3}$?", "$\\frac{2}{3}$"), ("Compute $2^{10}$.", "$1024$"),
            ("Name the largest planet.", "Jupiter"))],
        ("trl_builtin:think_first_reward", "gspo_accuracy:solution_accuracy_reward"),
        ["<think>\nadd\n</think>\n$\\boxed{\\frac{2}{3}}$", "<think>2^10</think> \\boxed{1000}", " jupiter "],
        ("rollout.samples_per_problem=8", "rollout.problems_per_step=2", "model.lora.rank=16", "model.lora.alpha=32",
         "model.lora.dropout=0.05", "model.lora.target_modules=[q_proj,v_proj]", "algo.ratio_level=sequence",
         "algo.clip_low=3e-4", "algo.clip_high=4e-4", "algo.loss_agg=seq_mean", "actor.lr=1e-5",
         "task.max_prompt_tokens=2048", "task.truncate_prompts=left"), max_prompt_length=2048),
    "countdown": Script(  # philschmid's run_r1_grpo.py and its recipe
        [{"prompt": countdown_prompt(n, t), "target": t, "nums": n} for n, t in (([44, 19, 35], 98), ([3, 7, 2], 17))],
        ("countdown:think_answer_format_reward", "countdown:equation_reward"),
        [" 44 + 19 + 35 = 98 </think>\n<answer>44 + 19 + 35</answer>", " 3 * 7 - 2 </think>\n<answer>3 * 7</answer>"],
        ("task.text_prompts=raw", "rollout.samples_per_problem=8", "rollout.problems_per_step=1", "algo.kl_coef=0.04",
         "actor.lr=1e-5", "actor.schedule=cosine", "actor.warmup_steps=12", "task.max_prompt_tokens=128",
         "task.truncate_prompts=left"), max_prompt_length=128),
    "tldr": Script(  # minwukim/VRL trl_new_demo.py on trl-lib/tldr
        [{"prompt": f"SUBREDDIT: r/relationships\n\nTITLE: Rent with my roommate\n\nPOST: {POST * k}\n\nTL;DR:",
          "completion": " I pay more than my share"} for k in (1, 9)],
        ("tldr_length:near_twenty_chars_reward",), [" roommate pays less", ""],
        ("task.text_prompts=raw", "rollout.engine=embedded", "rollout.samples_per_problem=4",
         "rollout.problems_per_step=1", "task.max_prompt_tokens=512", "task.truncate_prompts=left"),
        max_prompt_length=512),
    "deepmath": Script(  # fol-autoformalization/devenv src/main.py: TRL's README quickstart on DeepMath-103K
        [{"prompt": conversation(None, q), "solution": s} for q, s in (
            ("Evaluate $\\lim_{x\\to 0} \\frac{\\sin x}{x}$.", "1"), ("Find $2^5$.", "32"))],
        ("trl_builtin:verified_accuracy_reward",), ["The limit is $\\boxed{1}$.", "$\\boxed{31}$"]),
    "gemma3-gsm8k": Script(  # eliashossain001/efficient-gemma3-finetuning: GSM8K mapped, `question` kept
        [{"question": q, "answer": a, "prompt": conversation(WORKING, q)} for q, a in GSM8K],
        ("working_out:exact_layout_reward", "working_out:tag_balance_reward", "working_out:solution_match_reward",
         "working_out:first_number_reward"),
        ["<start_working_out>48 + 24<end_working_out><SOLUTION>72</SOLUTION>",
         "<start_working_out>12 * 50 / 60<end_working_out><SOLUTION>10.5</SOLUTION>", "<SOLUTION>five</SOLUTION>"],
        ("model.lora.rank=8", "model.lora.alpha=8", "actor.lr=5e-6", "actor.betas=[0.9,0.99]", "actor.weight_decay=0.1",
         "actor.schedule=cosine", "actor.warmup_steps=5", "actor.max_grad_norm=0.1", "rollout.samples_per_problem=4",
         "rollout.problems_per_step=1", "task.max_prompt_tokens=256", "task.truncate_prompts=left"),
        max_prompt_length=256),
    "trl-4358": Script(  # huggingface/trl#4358's reproduction on trl-lib/ultrafeedback-prompt
        [{"prompt": conversation(None, "Write a haiku about the harbour at night.")},
         {"prompt": conversation(None, "Explain photosynthesis to a child.")}],
        ("unique_letters:distinct_characters_reward",), ["Lanterns sway, tide hums", "Plants eat light!"],
        ("rollout.problems_per_step=1", "task.max_prompt_tokens=10", "task.truncate_prompts=left"),
        max_prompt_length=10),
    "open-r1-simple-rl": Script(  # open-r1 grpo.py with recipes/Qwen2.5-Math-7B/grpo/config_simple_rl.yaml
        [{"problem": p, "level": lv, "type": "Prealgebra", "solution": s, "prompt": conversation(THINK, p)}
         for p, lv, s in (("What is $3+4$?", "Level 1", "$3+4=\\boxed{7}$"),
                          ("Simplify $\\frac{6}{8}$.", "Level 2", "$\\boxed{\\frac{3}{4}}$"))],
        ("r1_math:math_answer_reward", "r1_math:think_answer_layout_reward"),
        ["<think>\n3+4\n</think>\n<answer>\n$7$\n</answer>", "<think>\nhalve\n</think>\n<answer>\n$\\frac{3}{8}$"],
        ("rollout.samples_per_problem=7", "rollout.problems_per_step=2", "actor.lr=1.5e-06", "actor.schedule=cosine",
         "task.max_prompt_tokens=650", "task.truncate_prompts=left"), (1.0, 0.5), max_prompt_length=650),
}
NAMES = sorted(SCRIPTS)


@pytest.fixture
def fixtures_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(DATA / "trl_scripts"))
    monkeypatch.syspath_prepend(str(DATA / "trl_reward_shapes"))


def loaded(tmp_path: Path, script: Script):
    """The config a user's overrides make (grpo's defaults, no preset's), and the script's rows as problems."""
    rows = write_rows(tmp_path / "rows.jsonl", script.rows)
    cfg = load_config(None, [*SMALL, "task.name=dataset", f"task.train_files=[{rows}]", f"task.test_files=[{rows}]",
                             *script.settings])
    return cfg, build_task(cfg.task).eval_problems(None)


def trl_prompt_ids(row: dict[str, Any], max_prompt_length: int | None) -> list[int]:
    """The prompt TRL's GRPOTrainer generates from: a text prompt tokenized as it is, a message list through the
    chat template; TRL 0.14 to 0.2x then kept its last max_prompt_length tokens."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        ids = TOKENIZER(prompt)["input_ids"]
    else:
        text = TOKENIZER.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
    return ids[-max_prompt_length:] if max_prompt_length else ids


@pytest.mark.parametrize("name", NAMES)
def test_the_prompt_grpo_sends_is_the_one_trl_sends(tmp_path, name):
    """Blind, S2's Countdown text (already chat-formatted by the script) was templated a second time and S3's
    TL;DR got the chat template and an instruction; every max_prompt_length was an unknown key."""
    script = SCRIPTS[name]
    cfg, problems = loaded(tmp_path, script)
    fit = fit_prompts(prompt_lengths(TOKENIZER, problems, cfg.task), problems,
                      model_context({"max_position_embeddings": TINY_POSITIONS}), cfg.rollout.max_new_tokens,
                      "rollout.max_new_tokens", cfg.task, "training prompts")
    sent = [encode_prompt(TOKENIZER, p, cfg.task, fit.limit) for p in problems]
    assert sent == [trl_prompt_ids(row, script.max_prompt_length) for row in script.rows]


@pytest.mark.parametrize("name", NAMES)
def test_the_rewards_get_trl_s_keywords_and_sum_as_trl_sums_them(tmp_path, fixtures_importable, name):
    script = SCRIPTS[name]
    _, problems = loaded(tmp_path, script)
    shape = script.shape()
    inputs = {**reward_inputs(problems, script.completions, shape.ids()), "trainer_state": STATE}
    for column in {key for row in script.rows for key in row} - {"prompt", "completion"}:  # TRL's keywords
        assert inputs[column] == [row.get(column) for row in script.rows], column
    rewards = resolve_rewards(list(script.rewards), script.weights, "task.reward")
    scores = score(rewards, inputs)
    expected = [trl_rewards(get_reward(spec), shape) for spec in script.rewards]
    assert [scores.parts[r.name] for r in rewards] == expected
    weights = script.weights or (1.0,) * len(rewards)
    trl_total = [sum(w * v for w, v in zip(weights, values) if v is not None)  # TRL's nansum
                 if any(v is not None for v in values) else None for values in zip(*expected)]
    assert scores.total == pytest.approx(trl_total)


@pytest.mark.parametrize("name", NAMES)
def test_the_script_trains_through_the_python_api_as_written(tmp_path, fixtures_importable, name):
    """Blind, six of the seven stopped at the missing `answer` column before a step."""
    script = SCRIPTS[name]
    result = api.train(None, dataset=script.rows, rewards=[get_reward(spec) for spec in script.rewards],
                       reward_weights=script.weights, overrides=[*SMALL, *script.settings, f"run_dir={tmp_path / 'r'}"])
    [line] = [json.loads(text) for text in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {f"reward/{spec.rpartition(':')[2]}/mean" for spec in script.rewards} <= set(line)


def test_an_already_chat_formatted_text_prompt_is_refused_naming_raw(tmp_path, fixtures_importable):
    """Countdown's rows without task.text_prompts=raw: refused at load, not templated twice (blind: trained on)."""
    script = SCRIPTS["countdown"]
    with pytest.raises(ConfigError, match=r"text prompt is chat-formatted already .* Set task.text_prompts=raw"):
        api.train(None, dataset=script.rows, rewards=[get_reward(spec) for spec in script.rewards],
                  overrides=[*SMALL, f"run_dir={tmp_path / 'r'}"])
    assert not (tmp_path / "r").exists()


def test_grpo_s_math_reward_on_trl_data_without_gold_is_refused_at_start(tmp_path):
    """DeepMath's rows have `solution`, not `answer`: they load without gold, so `math` could never score."""
    with pytest.raises(ConfigError, match=r"^reward math compares answers with the gold answer .* none of the training "
                                          r"problems has one: set task.answer_column"):
        api.train(None, dataset=SCRIPTS["deepmath"].rows, rewards=["math"],
                  overrides=[*SMALL, f"run_dir={tmp_path / 'r'}"])
    api.train(None, dataset=SCRIPTS["deepmath"].rows, rewards=["math"],
              overrides=[*SMALL, "task.answer_column=solution", f"run_dir={tmp_path / 'named'}"])
