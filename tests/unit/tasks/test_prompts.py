"""Prompts: text and chat prompts, the system prompt, the instruction, and a chat-template override."""

import pytest

from grpo.config import TaskConfig, load_config
from grpo.errors import ConfigError
from grpo.policy.models import build_char_tokenizer
from grpo.tasks import Problem, build_task
from grpo.tasks.context import prompt_lengths
from grpo.tasks.prompts import encode_prompt, load_chat_template, unfilled_template_columns

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


# A Countdown prompt as philschmid's run_r1_grpo.py makes it for TRL: the chat template already applied, the
# assistant's turn prefilled (tests/data/trl_scripts/countdown.py).
TEMPLATED = Problem("d-0", "<|im_start|>user\nUse 3, 7 to make 10.<|im_end|>\n<|im_start|>assistant\n<think>", "")


def test_raw_text_prompts_are_sent_as_they_are_as_trl_sends_them(tokenizer):
    """TRL tokenizes a text prompt as it is, with the tokenizer's own special tokens; message lists still go
    through the chat template."""
    raw = TaskConfig(text_prompts="raw")
    assert tokenizer.decode(encode_prompt(tokenizer, TEMPLATED, raw)) == tokenizer.decode(
        tokenizer(TEMPLATED.question)["input_ids"])
    assert encoded(tokenizer, TEXT, text_prompts="raw").endswith("What is 1 + 1?")  # no instruction
    assert encoded(tokenizer, CHAT, text_prompts="raw") == encoded(tokenizer, CHAT)
    assert prompt_lengths(tokenizer, [TEMPLATED, CHAT], raw) == [len(encode_prompt(tokenizer, p, raw))
                                                                  for p in (TEMPLATED, CHAT)]


def test_a_text_prompt_already_chat_formatted_is_refused_naming_raw(tokenizer):
    """Templated again, the script's whole chat would be one user message, its prefilled turn no longer the
    assistant's: refused at load, not trained on."""
    with pytest.raises(ConfigError, match=r"^problem d-0's text prompt is chat-formatted already \(it holds the chat "
                                          r"template's '<\|im_(start|end)\|>'\): .* Set task.text_prompts=raw to send "
                                          r"text prompts as they are \(as TRL does\)") as info:
        prompt_lengths(tokenizer, [TEXT, TEMPLATED], TaskConfig())
    assert "\n" not in str(info.value)
    assert prompt_lengths(tokenizer, [TEXT, CHAT], TaskConfig())  # plain text and messages pass


def test_raw_text_prompts_need_no_chat_template_and_refuse_what_they_would_drop(tokenizer):
    tokenizer.chat_template = None  # a base model's tokenizer
    assert encoded(tokenizer, TEXT, text_prompts="raw").endswith("What is 1 + 1?")
    with pytest.raises(ConfigError, match="has no chat template"):
        encoded(tokenizer, CHAT, text_prompts="raw")
    for key in ("task.system_prompt=Be brief.", "task.instruction=Answer in digits."):
        with pytest.raises(ConfigError, match=r"^task.text_prompts=raw sends text prompts as they are: task.(system_"
                                              r"prompt|instruction) "):
            load_config("tiny", ["task.text_prompts=raw", key])


def test_a_template_refusing_a_lone_user_message_still_checks_and_renders_real_prompts(tokenizer):
    wants_system = ("{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}"
                    + BRACKETS)
    assert prompt_lengths(tokenizer, [CHAT], TaskConfig(chat_template=wants_system)) == [
        len(encode_prompt(tokenizer, CHAT, TaskConfig(chat_template=wants_system)))]


def test_a_prompt_ending_with_the_assistants_message_is_continued_as_trl_continues_it(tokenizer):
    """TRL's rule for message-list prompts: the assistant's message last is a begun answer, its turn left open
    (continue_final_message), no new turn after it."""
    begun = Problem("b-0", "Say a", "a", messages=CHAT.messages + ({"role": "assistant", "content": "<think>"},))
    assert encoded(tokenizer, begun) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay a<|im_end|>\n<|im_start|>assistant\n<think>")
    assert encoded(tokenizer, begun) == tokenizer.apply_chat_template(
        list(begun.messages), tokenize=False, add_generation_prompt=False, continue_final_message=True)
    assert encoded(tokenizer, CHAT).endswith("<|im_start|>assistant\n")  # a user message last: a new turn


EFFORT = ("{%- if effort is not defined %}{%- set effort = 'medium' %}{%- endif %}[effort {{ effort }}] "
          + BRACKETS)


def with_effort(problem: Problem, effort: str) -> Problem:
    return Problem(problem.id, problem.question, problem.gold, problem.messages, {"effort": effort, "level": 1})


def test_chat_template_kwargs_are_the_template_s_variables_for_every_prompt(tokenizer):
    """TRL's chat_template_kwargs: given to apply_chat_template for each prompt, the generation prompt still grpo's."""
    assert encoded(tokenizer, CHAT, chat_template=EFFORT) == (
        "[effort medium] [system] Be brief.\n[user] Say a\n[assistant] ")
    assert encoded(tokenizer, CHAT, chat_template=EFFORT, chat_template_kwargs={"effort": "low"}) == (
        "[effort low] [system] Be brief.\n[user] Say a\n[assistant] ")


def test_a_column_named_as_a_template_variable_is_said_with_the_setting_that_renders_it(tokenizer):
    """Unsloth's gpt-oss notebook puts reasoning_effort in every row: TRL's GRPOTrainer renders the template's
    default, as grpo does, so the start says so; a column the template does not read (level) is not named."""
    same = [with_effort(CHAT, "low"), with_effort(CHAT, "low")]
    [note] = unfilled_template_columns(tokenizer, same, TaskConfig(chat_template=EFFORT))
    assert note.startswith("column 'effort' is a variable the chat template reads") and note.endswith(
        "task.chat_template_kwargs={effort: low} renders it in every prompt")
    [differ] = unfilled_template_columns(tokenizer, [with_effort(CHAT, "low"), with_effort(CHAT, "high")],
                                         TaskConfig(chat_template=EFFORT))
    assert differ.endswith("its values differ between rows, and task.chat_template_kwargs gives one value to every "
                           "prompt")
    assert unfilled_template_columns(tokenizer, same, TaskConfig(chat_template=EFFORT,
                                                                 chat_template_kwargs={"effort": "low"})) == []
    assert unfilled_template_columns(tokenizer, same, TaskConfig()) == []  # the tokenizer's template reads no effort


def test_a_template_only_transformers_parses_leaves_its_variables_unknown(tokenizer):
    tokenizer.chat_template = "{% for m in messages %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}"
    assert unfilled_template_columns(tokenizer, [with_effort(CHAT, "low")], TaskConfig()) == []
