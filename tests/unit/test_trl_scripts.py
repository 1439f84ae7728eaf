"""Real TRL GRPOTrainer scripts, three rounds of them (tests/data/trl_scripts/README.md: their SOURCEs, what TRL does
with each, the blind runs) run on grpo the way a TRL user does after reading docs/coming-from-trl.md: rows in each script's
shape, its reward functions written here in their shapes, the settings the docs' tables translate, grpo's tiny
model. TRL's side is written from what its GRPOTrainer does: a text prompt tokenized as it is, a message list
through the chat template, `max_prompt_length` (TRL 0.14 to 0.2x) keeping a prompt's last tokens, every column
but `prompt` and `completion` passed by name, rewards summed with `reward_weights`."""

from __future__ import annotations

import importlib.util
import json
import math
import re
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
from tests.trl_recipes import FOLDER, RECIPES, Answers, misanswered, scalar, sources, truth

from .tasks.test_files import write_rows
from .test_trl_rewards import GSM8K, R1, STATE, WILLCB, Shape, trl_rewards

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
    chat_template: str | None = None  # one the script set on the tokenizer (or the model's own), which TRL renders
    template_variables: dict[str, Any] | None = None  # what TRL's renderer gave the template beyond the messages

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


def kept_under_ninetieth_percentile(rows: list[dict[str, Any]], template: str) -> tuple[list[dict[str, Any]], int]:
    """Unsloth's Qwen3 notebook's data step: the prompts' lengths under its template, the rows above the 90th
    percentile dropped, and max_prompt_length that percentile + 1."""
    lengths = [len(TOKENIZER(TOKENIZER.apply_chat_template(row["prompt"], chat_template=template, tokenize=False,
                                                           add_generation_prompt=True), add_special_tokens=False
                             )["input_ids"]) for row in rows]
    ordered = sorted(lengths)
    rank = 0.9 * (len(ordered) - 1)  # numpy's linear quantile, as the notebook takes it
    cut = int(ordered[math.floor(rank)] + (ordered[math.ceil(rank)] - ordered[math.floor(rank)]) * (rank % 1))
    return [row for row, n in zip(rows, lengths) if n <= cut], cut + 1


THINK = "A conversation between user and assistant. The assistant thinks in <think></think>, then answers."
WORKING = "Give your working out between <start_working_out> and <end_working_out>, then <SOLUTION></SOLUTION>."
POST = "We split the rent evenly but she has the bigger room and I pay for the internet too. "

CODER = ("You are an expert Python programmer. Write correct, efficient Python 3 code that solves the problem and "
         "passes all tests. Output the code in the following format: ```python\n<code>\n```")


def leetcode_row(number: int, method: str, body: str) -> dict[str, Any]:
    """A row as the loophole environment's build_dataset makes it, at its `overwrite_tests` rung."""
    question = (f"Your solution should be a method of the class Solution called {method} and will be evaluated by "
                f"calling a function called run_tests(). Use the following starter code:\n```python\nclass Solution:"
                f"\n    def {method}(self, nums):\n```\n\nSOLUTION:\n")
    problem = {"id": number, "difficulty": "Medium", "question": question, "func_name": f"Solution().{method}",
               "gt_answer": [f"assert Solution().{method}([1, 2]) == 3"], "setup_code": "",
               "canonical_solution": f"class Solution:\n    def {method}(self, nums):\n        {body}"}
    return {"prompt": conversation(CODER, question), "problem_json": json.dumps(problem), "rung": "overwrite_tests",
            "func_name": "run_tests", "grader_code": "", "hackable": 1, "difficulty": "Medium"}


WORKING_OUT = ("You are given a problem.\nThink about the problem and provide your working out.\nPlace it between "
               "<start_working_out> and <end_working_out>.\nThen, provide your solution between <SOLUTION></SOLUTION>")
# Unsloth's Qwen3 notebook's template: the system text and eos, user turns bare, the reasoning tag as the prompt's end.
QWEN3_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + eos_token }}{% set loop_messages = "
    "messages[1:] %}{% else %}{{ '" + WORKING_OUT + "' + eos_token }}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}{% if message['role'] == 'user' %}{{ message['content'] }}{% elif "
    "message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_working_out>' }}{% endif %}")
DAPO_ROWS, DAPO_PROMPT_LENGTH = kept_under_ninetieth_percentile([
    {"prompt": conversation(WORKING_OUT, q), "solution": a, "data_source": "math_dapo",
     "source_prompt": [{"content": f"Solve the following math problem step by step.\n\n{q}", "role": "user"}],
     "ability": "MATH", "reward_model": {"ground_truth": a, "style": "rule-lighteval/MATH_v2"},
     "extra_info": {"index": f"gsm8k-{i}"}, "answer": a} for i, (q, a) in enumerate(GSM8K)], QWEN3_TEMPLATE)
STORY = "My neighbour's cat has started visiting every morning and sits by the window until I let it in. "

# Round 3's notebooks (README, S16 to S21).
R1_SYSTEM = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
             "assistant first thinks about the reasoning process in the mind and then provides the user with the "
             "answer.")
QLORA_SYSTEM = ("A conversation between User and Assistant. The reasoning process is enclosed strictly within <think> "
                "and </think> tags. After closing </think>, the assistant MUST provide the final answer in plain text.")
SOLUTION_TAGS = ("You are a mathematical reasoning assistant.\nWhen given a math problem:\n1. Show your step-by-step "
                 "work between <start_working_out> and <end_working_out>\n2. Provide your final numerical answer "
                 "between <SOLUTION> and </SOLUTION>")
BOXED = ("Think step by step between <think> and </think> and thenoutput your answer. Output the final answer in "
         "\\boxed{} format.")
MATMUL = ("Create a new fast matrix multiplication function using only native Python code.\nYou are given a list of "
          "list of numbers.\nOutput your new function in backticks.")
# A template in gpt-oss's shape: the system block says the reasoning effort, the template's default medium.
GPT_OSS = ("{%- if reasoning_effort is not defined %}{%- set reasoning_effort = 'medium' %}{%- endif %}"
           "<|start|>system<|message|>You are ChatGPT.\nReasoning: {{ reasoning_effort }}<|end|>"
           "{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>{% endfor %}"
           "{% if add_generation_prompt %}<|start|>assistant{% endif %}")
# The notebook's max_prompt_length: the prompt's tokens as text, without the chat template, + 1.
MATMUL_PROMPT_LENGTH = len(TOKENIZER(MATMUL)["input_ids"]) + 1
SEVEN = "model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"
LFM_ROWS, LFM_PROMPT_LENGTH = kept_under_ninetieth_percentile([
    {"prompt": conversation(BOXED, q), "solution": a, "data_source": "math_dapo",
     "source_prompt": [{"content": f"Solve the following math problem step by step.\n\n{q}", "role": "user"}],
     "ability": "MATH", "reward_model": {"ground_truth": a, "style": "rule-lighteval/MATH_v2"},
     "extra_info": {"index": f"gsm8k-{i}"}, "answer": a} for i, (q, a) in enumerate(GSM8K)], None)
KERNEL = ("```python\ndef matmul(A, B):\n    return [[sum(a * b for a, b in zip(row, col)) for col in zip(*B)] "
          "for row in A]\n```")

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
    # Round 2. Test-sized where the script's are large: 2 prompts a step, the embedded engine for vLLM.
    "code-loophole": Script(  # ktolnos/unlearning-reward-hacking train_code_grpo.py: three rewards, weights 1, 0, 0
        [leetcode_row(1, "addAll", "return sum(nums)"), leetcode_row(2, "biggest", "return max(nums)")],
        ("code_loophole:reward_observed", "code_loophole:reward_true", "code_loophole:reward_repaired"),
        ["```python\nclass Solution:\n    def addAll(self, nums):\n        return sum(nums)\n```",
         "```python\ndef run_tests():\n    pass\n```"],
        ("rollout.samples_per_problem=8", "rollout.problems_per_step=2", "algo.loss_agg=seq_sum_norm",
         "algo.advantage_norm=none", "algo.clip_high=0.28", "algo.mask_truncated=true", "actor.lr=8e-6",
         "actor.schedule=constant", "train.seed=0", "model.lora.rank=32", "model.lora.alpha=64", "model.lora.dropout=0",
         "model.lora.target_modules=[all-linear]", "rollout.engine=embedded"), (1.0, 0.0, 0.0)),
    "course-smoltldr": Script(  # huggingface/course chapter 12's GRPO exercise on mlabonne/smoltldr (TRL 0.14)
        [{"prompt": f"{STORY * k}\nTL;DR:", "completion": " a cat visits me"} for k in (1, 12)],
        ("smol_length:reward_len",), [" a cat comes by", " x" * 40],
        ("model.lora.rank=16", "model.lora.alpha=32", "model.lora.target_modules=all-linear", "actor.lr=2e-5",
         "rollout.samples_per_problem=8", "rollout.problems_per_step=2", "train.epochs=1", "task.text_prompts=raw",
         "task.max_prompt_tokens=512", "task.truncate_prompts=left"), max_prompt_length=512),
    "unsloth-qwen3": Script(  # unslothai/notebooks Qwen3_(4B)-GRPO: own chat template, nested DAPO columns
        DAPO_ROWS, ("working_out_qwen3:layout_exact", "working_out_qwen3:layout_approximate",
                    "working_out_qwen3:answer_check", "working_out_qwen3:number_check"),
        ["48 + 24<end_working_out><SOLUTION>72</SOLUTION></s>", "12 * 50 / 60<end_working_out><SOLUTION>11</SOLUTION>",
         "<SOLUTION>five</SOLUTION>"][:len(DAPO_ROWS)],
        (f"task.chat_template={QWEN3_TEMPLATE}", "model.lora.rank=32", "model.lora.alpha=64",
         "model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]", "actor.lr=5e-6",
         "actor.weight_decay=0.001", "actor.schedule=linear", "actor.warmup_steps=10", "rollout.samples_per_problem=4",
         "rollout.problems_per_step=1", f"task.max_prompt_tokens={DAPO_PROMPT_LENGTH}"),
        chat_template=QWEN3_TEMPLATE),
    "trl-2983": Script(  # huggingface/trl#2983: num_iterations=3 and a reward that is always 0, on trl-lib/tldr
        [{"prompt": f"SUBREDDIT: r/relationships\n\nTITLE: Rent\n\nPOST: {POST * k}\n\nTL;DR:",
          "completion": " I pay more"} for k in (1, 2)],
        ("reward_object:dummy_reward_func",), [" fair share", ""],
        ("algo.updates_per_batch=3", "task.text_prompts=raw", "rollout.problems_per_step=1", "actor.schedule=linear",
         "train.seed=42")),
    "trl-2961": Script(  # huggingface/trl#2961: a reward object named by its own __name__, reading `response`
        [{"prompt": f"Question: what is {a} + {b}? Think in <think></think>, then answer.", "response": str(a + b)}
         for a, b in ((2, 3), (7, 8))],
        ("reward_object:reward_system",), ["<think>two and three make five</think> 5", "15"],
        ("rollout.samples_per_problem=2", "rollout.problems_per_step=2", "task.text_prompts=raw")),
    # Round 3, test-sized likewise.
    "cookbook-vllm": Script(  # huggingface/cookbook grpo_vllm_online_training.ipynb: NuminaMath, `solution` kept
        [{"prompt": conversation(R1_SYSTEM, p), "solution": s} for p, s in R1],
        ("numina_think_answer:think_then_answer_reward", "numina_think_answer:solution_or_pass_reward"),
        ["<think>add</think> <answer>$\\frac{2}{3}$</answer>", "<think>2^10</think><answer>$1000$</answer>", "7"],
        ("model.lora.rank=8", "model.lora.alpha=32", "model.lora.dropout=0.1",
         "model.lora.target_modules=[q_proj,v_proj]", "actor.lr=1e-5", "actor.schedule=linear", "train.epochs=1",
         "rollout.samples_per_problem=8", "rollout.problems_per_step=2", "task.max_prompt_tokens=512",
         "task.truncate_prompts=left"),
        max_prompt_length=512),
    "cookbook-advanced": Script(  # huggingface/cookbook trl_grpo_reasoning_advanced_reward.ipynb: `question` kept
        [{"question": q, "answer": a, "prompt": conversation(SOLUTION_TAGS, q)} for q, a in GSM8K],
        ("solution_tags:whole_layout_reward", "solution_tags:tag_by_tag_reward", "solution_tags:graded_solution_reward",
         "solution_tags:solution_number_reward"),
        ["<start_working_out>48 + 24<end_working_out><SOLUTION>72</SOLUTION>",
         "<start_working_out>12 * 50 / 60<end_working_out><SOLUTION>11</SOLUTION>", "<SOLUTION>five</SOLUTION>"],
        ("model.lora.rank=16", "model.lora.alpha=32", "model.lora.dropout=0.1",
         "model.lora.target_modules=[q_proj,v_proj]", "actor.lr=5e-6", "actor.schedule=linear",
         "rollout.problems_per_step=2", "rollout.samples_per_problem=8", "task.max_prompt_tokens=1024",
         "task.truncate_prompts=left", "actor.max_grad_norm=0.1"),
        max_prompt_length=1024),
    "unsloth-llama31": Script(  # unslothai/notebooks Llama3.1_(8B)-GRPO: willccbb's GSM8K data and five rewards
        WILLCB.rows, ("gsm8k_tags:tag_tally_reward", "gsm8k_tags:loose_layout_reward",
                      "gsm8k_tags:strict_layout_reward", "gsm8k_tags:integer_answer_reward",
                      "gsm8k_tags:answer_reward"),
        WILLCB.completions,
        ("model.lora.rank=32", "model.lora.alpha=32", SEVEN, "model.gradient_checkpointing=true", "actor.lr=5e-6",
         "actor.betas=[0.9,0.99]", "actor.weight_decay=0.001", "actor.warmup_steps=25", "actor.schedule=cosine",
         "actor.max_grad_norm=0.1", "rollout.problems_per_step=1", "rollout.samples_per_problem=6",
         "task.max_prompt_tokens=256", "task.truncate_prompts=left"), max_prompt_length=256),
    "unsloth-lfm25": Script(  # unslothai/notebooks LFM2.5_(1.2B)-GRPO: DAPO mapped, nested columns kept
        LFM_ROWS, ("boxed_after_think:boxed_after_think_reward", "boxed_after_think:think_tags_reward",
                   "boxed_after_think:boxed_answer_reward", "boxed_after_think:first_number_reward"),
        ["<think>48 + 24</think> so \\boxed{72}</s>", "<think>12 * 50 / 60</think> \\boxed{11}",
         "<think></think> five"][:len(LFM_ROWS)],
        ("model.lora.rank=32", "model.lora.alpha=64",
         "model.lora.target_modules=[q_proj,k_proj,v_proj,out_proj,in_proj,w1,w2,w3]", "actor.lr=5e-6",
         "actor.weight_decay=0.01", "actor.warmup_steps=1", "actor.schedule=linear", "rollout.samples_per_problem=4",
         "rollout.problems_per_step=1", f"task.max_prompt_tokens={LFM_PROMPT_LENGTH}")),
    "trl-qlora": Script(  # huggingface/trl examples/notebooks/grpo_trl_lora_qlora.ipynb: TRL's built-in rewards
        [{"prompt": conversation(QLORA_SYSTEM, p), "solution": s} for p, s in R1],
        ("trl_builtin:think_first_reward", "reasoning_accuracy:after_think_accuracy_reward"),
        ["<think>add</think> $\\boxed{\\frac{2}{3}}$", "<think>2^10</think> \\boxed{1000}", "</think> 7"],
        ("model.lora.rank=32", "model.lora.alpha=32", SEVEN, "model.attn_implementation=sdpa", "model.dtype=float32",
         "actor.lr=2e-5", "actor.schedule=linear", "rollout.problems_per_step=1", "rollout.samples_per_problem=8")),
    "unsloth-gpt-oss": Script(  # unslothai/notebooks gpt-oss-(20B)-GRPO: an int gold and a `reasoning_effort` column
        [{"prompt": conversation(None, MATMUL), "answer": 0, "reasoning_effort": "low"}] * 2,
        ("matmul_kernel:kernel_compiles_reward", "matmul_kernel:stdlib_only_reward",
         "matmul_kernel:kernel_correct_reward"),
        [KERNEL, "```python\ndef matmul(A, B):\n    import numpy\n    return numpy.matmul(A, B)\n```"],
        (f"task.chat_template={GPT_OSS}", "model.lora.rank=4", "model.lora.alpha=8", SEVEN, "actor.lr=5e-5",
         "actor.weight_decay=0.001", "actor.warmup_steps=10", "actor.schedule=linear", "rollout.samples_per_problem=2",
         "rollout.problems_per_step=1", f"task.max_prompt_tokens={MATMUL_PROMPT_LENGTH}", "task.truncate_prompts=left"),
        max_prompt_length=MATMUL_PROMPT_LENGTH, chat_template=GPT_OSS, template_variables={"reasoning_effort": "low"}),
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


def trl_prompt_ids(row: dict[str, Any], max_prompt_length: int | None, chat_template: str | None = None,
                   template_variables: dict[str, Any] | None = None) -> list[int]:
    """The prompt TRL's GRPOTrainer generates from: a text prompt tokenized as it is, a message list through the
    tokenizer's chat template (`chat_template` where the script set its own, with `template_variables`: TRL's
    chat_template_kwargs, or the row's columns Unsloth's trainer renders); TRL 0.14 to 0.2x then kept its last
    max_prompt_length tokens."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        ids = TOKENIZER(prompt)["input_ids"]
    else:
        text = TOKENIZER.apply_chat_template(prompt, chat_template=chat_template, tokenize=False,
                                             add_generation_prompt=True, **(template_variables or {}))
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
    assert sent == [trl_prompt_ids(row, script.max_prompt_length, script.chat_template, script.template_variables)
                    for row in script.rows]


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


def test_what_a_reward_gives_trl_s_log_metric_is_in_the_step_s_metrics(tmp_path, fixtures_importable):
    """The loophole environment's driver reward logs code/* through TRL's log_metric and the two others read its
    cache, at weight 0 (blind: log_metric was not passed, so the metrics were lost without a word)."""
    script = SCRIPTS["code-loophole"]
    result = api.train(None, dataset=script.rows, rewards=list(script.rewards), reward_weights=script.weights,
                       overrides=[*SMALL, *script.settings, f"run_dir={tmp_path / 'r'}"])
    [line] = [json.loads(text) for text in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"reward_log/code/observed", "reward_log/code/true", "reward_log/code/hacked"} <= set(line)
    assert all(0.0 <= line[f"reward_log/code/{name}"] <= 1.0 for name in ("observed", "true", "hacked"))
    assert line["reward/mean"] == pytest.approx(line["reward/reward_observed/mean"])  # weights 1, 0, 0
    assert {"reward/reward_true/mean", "reward/reward_repaired/mean"} <= set(line)


REWARD_MODEL = "trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5"  # huggingface/trl#2633's


def test_a_reward_model_given_by_id_is_refused_saying_what_to_write_instead(tmp_path, fixtures_importable):
    """TRL's `trl grpo --reward_model_name_or_path M` puts the id in reward_funcs; blind, grpo answered 'unknown
    reward' and listed its registered names."""
    with pytest.raises(ConfigError, match=rf"^task.reward='{REWARD_MODEL}': '{REWARD_MODEL}' is a model, which TRL "
                                          r"loads as a reward model .*; grpo takes reward functions: load the model in "
                                          r"a function\(prompts, completions, \*\*kwargs\) .* \(module:function\)$"):
        api.train(None, dataset=SCRIPTS["deepmath"].rows, rewards=[REWARD_MODEL, "trl_builtin:think_first_reward"],
                  overrides=[*SMALL, f"run_dir={tmp_path / 'r'}"])
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_a_tracker_asked_for_without_its_package_is_refused_before_the_run_directory(tmp_path, fixtures_importable):
    """The course's report_to=["wandb"], written as the table says: blind, a ModuleNotFoundError after the run
    directory was made."""
    script = SCRIPTS["course-smoltldr"]
    with pytest.raises(ConfigError, match=r"^logging.wandb_project=GRPO needs the wandb package: pip install "
                                          r"'grpo\[wandb\]', or leave logging.wandb_project unset$"):
        api.train(None, dataset=script.rows, rewards=list(script.rewards),
                  overrides=[*SMALL, *script.settings, "logging.wandb_project=GRPO", f"run_dir={tmp_path / 'r'}"])
    assert not (tmp_path / "r").exists()


# The TRL settings each round-2 and round-3 script's user tried as they are (README, "TRL names tried"): each
# answered with grpo's key or why there is none, never the top level's section list or another trainer's name.
TRIED = ["vllm_max_model_length=3584", "disable_dropout=true", "save_only_model=true", "optim=paged_adamw_8bit",
         "log_completions=true", "remove_unused_columns=false", "bf16=true", "report_to=[wandb]", "min_p=0.1",
         "vllm_sampling_params={min_p: 0.1, top_p: 1.0}", "max_seq_length=2048", "num_iterations=3",
         f"reward_model_name_or_path={REWARD_MODEL}", "reward_funcs=[think_format_reward]",
         "generation_kwargs={do_sample: true, temperature: 0.85, top_k: 50, top_p: 0.95, num_beams: 1}",
         "report_to=[trackio]", "project=Qwen2-0-5B-GRPO-vllm-trl", "trackio_space_id=sergiopaniego/Qwen2-0-5B-GRPO",
         "push_to_hub=true", "save_strategy=steps", "max_lora_rank=32", "random_state=3407", "load_in_4bit=true",
         "fast_inference=true", "use_gradient_checkpointing=unsloth", "eval_strategy=steps", "eval_steps=1",
         "per_device_eval_batch_size=4", "eval_accumulation_steps=1", "fp16_full_eval=true", "use_liger_kernel=true",
         "quantization_config={load_in_4bit: true}", "chat_template_kwargs={reasoning_effort: low}",
         "model_init_kwargs={attn_implementation: sdpa, dtype: float32}", "report_to=none"]


@pytest.mark.parametrize("setting", TRIED)
def test_each_trl_setting_the_scripts_users_tried_is_answered_with_grpo_s_key(setting):
    """Blind, round 3's users got the section list for 9 of their 42 tries (project, trackio_space_id, max_lora_rank,
    ...) and use_liger_kernel was called OpenRLHF's."""
    name = setting.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^{name} is TRL's name; grpo") as info:
        load_config(None, [setting])
    assert "valid keys in the top level" not in str(info.value)


@pytest.mark.parametrize(("setting", "written"), [
    ("report_to=none", "logging.tensorboard=false"), ("report_to=[tensorboard]", "logging.tensorboard=true"),
    ("model_init_kwargs={attn_implementation: sdpa, dtype: float32}",
     "model.attn_implementation=sdpa model.dtype=float32"),
    ("chat_template_kwargs={reasoning_effort: low}", "task.chat_template_kwargs={reasoning_effort: low}")])
def test_a_trl_setting_whose_value_grpo_can_say_is_written_as_grpo_s_overrides(setting, written):
    """Blind: report_to=none and model_init_kwargs named grpo's keys without the overrides; chat_template_kwargs was
    an unknown key."""
    with pytest.raises(ConfigError) as info:
        load_config(None, [setting])
    assert str(info.value).partition(" (")[0].endswith(f": {written}")
    overrides = re.findall(r"\S+=(?:\{[^}]*\}|\S+)", written)
    load_config("tiny", overrides)  # grpo takes what it writes


def test_an_evaluation_during_training_reports_each_reward_s_own_mean(tmp_path, fixtures_importable):
    """Unsloth's LFM2.5 notebook with its evaluation lines uncommented (eval_strategy steps, eval_steps 1): TRL logs
    eval_rewards/NAME/mean for each of its four rewards; blind, grpo's evaluation gave their sum alone."""
    script = SCRIPTS["unsloth-lfm25"]
    result = api.train(None, dataset=script.rows[:-1], eval_dataset=script.rows[-1:], rewards=list(script.rewards),
                       overrides=[*SMALL, *script.settings, "eval.every_steps=1", f"run_dir={tmp_path / 'r'}"])
    [line] = [json.loads(text) for text in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    means = [line[f"eval/reward/{spec.rpartition(':')[2]}/mean"] for spec in script.rewards]
    assert line["eval/scored"] == 1 and line["eval/mean_reward"] == pytest.approx(sum(means))  # one row, weights 1


def test_what_a_reward_gives_trl_s_log_extra_is_in_the_step_s_samples(tmp_path, fixtures_importable):
    """TRL's reasoning_accuracy_reward hands its parsed gold and answer to log_extra (TRL's QLoRA notebook trains
    with it); blind, grpo did not pass the keyword and the columns were dropped without a word."""
    script = SCRIPTS["trl-qlora"]
    result = api.train(None, dataset=script.rows, rewards=list(script.rewards),
                       overrides=[*SMALL, *script.settings, "logging.samples_per_step=4", f"run_dir={tmp_path / 'r'}"])
    samples = [json.loads(text) for text in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and all(set(sample["extra"]) == {"gold_parsed", "answer_parsed"} for sample in samples)


def test_a_column_the_chat_template_reads_is_said_and_chat_template_kwargs_renders_it(tmp_path, fixtures_importable):
    """Unsloth's gpt-oss notebook puts reasoning_effort "low" in every row, which Unsloth's trainer renders and TRL's
    does not; blind, grpo rendered the template's default without a word, and TRL's chat_template_kwargs (the way
    to set it) was an unknown key."""
    script = SCRIPTS["unsloth-gpt-oss"]
    result = api.train(None, dataset=script.rows, rewards=list(script.rewards),
                       overrides=[*SMALL, *script.settings, f"run_dir={tmp_path / 'r'}"])
    said = (result.run_dir / "train.log").read_text()
    assert re.search(r"column 'reasoning_effort' is a variable the chat template reads; .*: "
                     r"task.chat_template_kwargs=\{reasoning_effort: low\} renders it in every prompt\n", said)
    whole = Script(script.rows, script.rewards, script.completions,
                   (f"task.chat_template={GPT_OSS}", "task.chat_template_kwargs={reasoning_effort: low}"))
    _, problems = loaded(tmp_path, whole)
    low = trl_prompt_ids(script.rows[0], None, GPT_OSS, {"reasoning_effort": "low"})  # TRL's chat_template_kwargs
    assert encode_prompt(TOKENIZER, problems[0], loaded(tmp_path, whole)[0].task) == low
    assert low != trl_prompt_ids(script.rows[0], None, GPT_OSS)  # the template's default, medium


def test_trl_s_command_line_given_as_overrides_is_answered_once_with_what_means_the_same_written():
    """LoRA Without Regret's `trl grpo` command line (TRL's docs), each flag as NAME=VALUE: blind, 16 of 26 written,
    `warmup_ratio 0.0` and `vllm_mode colocate` among those to set by hand."""
    flags = ("--model_name_or_path Qwen/Qwen3-0.6B --dataset_name HuggingFaceH4/OpenR1-Math-220k-default-verified "
             "--output_dir grpo-full-qwen3-0.6b --learning_rate 1.0e-6 --lr_scheduler_type cosine --warmup_ratio 0.0 "
             "--max_grad_norm 1.0 --beta 0.0 --max_completion_length 4096 --num_generations 16 "
             "--generation_batch_size 16 --gradient_accumulation_steps 8 --per_device_train_batch_size 1 "
             "--num_train_epochs 1 --lora_r 1 --lora_alpha 32 --lora_dropout 0.0 --lora_target_modules all-linear "
             "--vllm_mode colocate --save_strategy steps --save_steps 50 --save_total_limit 1 --logging_steps 1 "
             "--max_steps 200 --report_to trackio").split()
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"{flag[2:]}={value}" for flag, value in zip(flags[::2], flags[1::2])])
    message = str(info.value)
    written = dict(re.findall(r"(\S+=\S+) \((\w+)\)", message.partition("; set by hand: ")[0]))
    assert len(written) == 18
    assert {"actor.warmup_steps=0": "warmup_ratio", "rollout.engine=vllm": "vllm_mode", "actor.lr=1.0e-06":
            "learning_rate", "model.lora.rank=1": "lora_r", "train.steps=200": "max_steps"}.items() <= written.items()
    load_config("tiny", list(written))  # every override it writes grpo takes
    assert message.endswith("grpo has no key for: save_strategy, logging_steps (docs/coming-from-trl.md)")


# Round 4 (README, S22 to S27): recipes and command lines, each answered as truth_round4.yaml says.
ROUND4 = sources()


def test_round_4_s_truth_answers_every_setting_its_sources_give():
    assert {name for settings in ROUND4.values() for name in settings} == set(truth())


@pytest.mark.parametrize("source", sorted(ROUND4))
def test_a_recipe_s_or_command_line_s_settings_are_answered_in_one_message_as_the_truth_says(tmp_path, source):
    """open-r1's recipes as `grpo train --config RECIPE`, the paper index's GRPOConfig keywords and the launch lines'
    flags as NAME=VALUE overrides."""
    given = ROUND4[source]
    with pytest.raises(ConfigError) as info:
        if source in RECIPES:
            load_config(kept_once(tmp_path, FOLDER / f"{source}.yaml"))
        else:
            load_config(None, [f"{name}={scalar(value)}" for name, value in given.items()])
    answers = Answers.read(str(info.value))
    assert "\n" not in answers.message
    wrong = [said for name, value in given.items() if (said := misanswered(source, name, value, answers))]
    assert not wrong, f"{len(given) - len(wrong)} of {len(given)} answered; not: {wrong}"
    assert "not TRL's either" not in answers.message  # TRL's fields and open-r1's, each known
    written = [part for override in answers.written.values() if not override.startswith("task.chat_template")
               for part in override.split(" ")]
    rewards = ["task.reward=[math,math_format]"] if any(part.startswith("task.reward_weights=") for part in written) else []
    load_config("tiny", [*written, *rewards])  # every override it writes grpo takes


def kept_once(tmp_path: Path, recipe: Path) -> Path:
    """The recipe as grpo reads it: open-r1's Codeforces recipe gives `do_eval: false` twice, which TRL's YAML reader
    keeps silently (the last) and grpo refuses in one line naming the line and the fix; its user keeps one."""
    text = recipe.read_text()
    if text.count("\ndo_eval: false\n") < 2:
        return recipe
    with pytest.raises(ConfigError, match=r":26:1: not valid YAML: 'do_eval' is given twice in one mapping \(first "
                                          r"on line 21\): keep one$"):
        load_config(recipe)
    kept = tmp_path / recipe.name
    kept.write_text(text.replace("\ndo_eval: false\n", "\n", 1))
    return kept
