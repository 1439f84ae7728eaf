"""Prompts: text and chat prompts, the system prompt, the instruction, and a chat-template override."""

import pytest

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.policy.models import build_char_tokenizer
from grpo.tasks import Problem, build_task
from grpo.tasks.prompts import encode_prompt, load_chat_template

TEXT = Problem("t-0", "What is 1 + 1?", "2")
CHAT = Problem("c-0", "Say a", "a", messages=({"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Say a"}))
BRACKETS = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant] {% endif %}")


@pytest.fixture
def tokenizer():
    return build_char_tokenizer()


def encoded(tokenizer, problem, **task) -> str:
    return tokenizer.decode(encode_prompt(tokenizer, problem, TaskConfig(**task)))


def test_a_text_prompt_is_a_user_message_with_the_instruction(tokenizer):
    assert encoded(tokenizer, TEXT, instruction="Answer in digits.") == (
        "<|im_start|>user\nWhat is 1 + 1?\nAnswer in digits.<|im_end|>\n<|im_start|>assistant\n")
    assert encoded(tokenizer, TEXT, instruction="") == (
        "<|im_start|>user\nWhat is 1 + 1?<|im_end|>\n<|im_start|>assistant\n")


def test_the_system_prompt_comes_first(tokenizer):
    assert encoded(tokenizer, TEXT, instruction="", system_prompt="You add numbers.") == (
        "<|im_start|>system\nYou add numbers.<|im_end|>\n"
        "<|im_start|>user\nWhat is 1 + 1?<|im_end|>\n<|im_start|>assistant\n")


def test_a_chat_prompt_is_used_as_given_without_the_instruction(tokenizer):
    assert encoded(tokenizer, CHAT, instruction="Put your final answer within \\boxed{}.") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay a<|im_end|>\n<|im_start|>assistant\n")


def test_a_chat_template_given_as_text_replaces_the_tokenizers(tokenizer):
    assert encoded(tokenizer, TEXT, instruction="", chat_template=BRACKETS) == (
        "[user] What is 1 + 1?\n[assistant] ")
    assert encoded(tokenizer, CHAT, chat_template=BRACKETS) == "[system] Be brief.\n[user] Say a\n[assistant] "


def test_a_chat_template_file_is_read(tokenizer, tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text(BRACKETS)
    assert encoded(tokenizer, TEXT, instruction="", system_prompt="S", chat_template=str(path)) == (
        "[system] S\n[user] What is 1 + 1?\n[assistant] ")


def test_the_template_file_is_read_once_at_start(tokenizer, tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text(BRACKETS)
    build_task(TaskConfig(chat_template=str(path)))
    path.write_text("{{ 'changed' }}")  # edited during the run: the run keeps the template it started with
    assert encoded(tokenizer, TEXT, instruction="", chat_template=str(path)).startswith("[user] What is 1 + 1?")


@pytest.mark.parametrize("template,message", [
    ("{% for m in messages %}{{ m['content'] }}", r"task.chat_template: not a valid Jinja template: line 1: "
                                                  r"Unexpected end of template"),
    ("{{ messages[0]['content'] }\n", r"task.chat_template: not a valid Jinja template: line 1: "),
    ("templates/none.jinja", r"task.chat_template='templates/none.jinja' is neither a file nor a Jinja template"),
])
def test_a_bad_template_is_a_one_line_error_before_any_model(template, message):
    with pytest.raises(ConfigError, match=message) as info:
        build_task(TaskConfig(chat_template=template))
    assert "\n" not in str(info.value)


def test_a_bad_template_file_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jinja"
    path.write_text("{% for m in messages %}\n{{ m['content'] }}\n{% endif %}\n")
    with pytest.raises(ConfigError, match=f"task.chat_template {path}: not a valid Jinja template: line 3: "):
        load_chat_template(str(path))


def test_a_template_that_fails_on_a_prompt_names_the_problem(tokenizer):
    refuses_system = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
                      + BRACKETS)
    assert encoded(tokenizer, TEXT, instruction="", chat_template=refuses_system) == (
        "[user] What is 1 + 1?\n[assistant] ")
    with pytest.raises(ConfigError, match="task.chat_template failed on problem c-0: TemplateError: no system role"):
        encoded(tokenizer, CHAT, chat_template=refuses_system)


def test_a_tokenizer_without_a_chat_template_asks_for_one(tokenizer):
    tokenizer.chat_template = None
    with pytest.raises(ConfigError, match="the model's tokenizer has no chat template: set task.chat_template"):
        encoded(tokenizer, TEXT)
    assert encoded(tokenizer, TEXT, instruction="", chat_template=BRACKETS) == "[user] What is 1 + 1?\n[assistant] "
