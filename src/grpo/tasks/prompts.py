"""Turning a problem into prompt token ids through a chat template (the tokenizer's, or task.chat_template)."""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2
from transformers import PreTrainedTokenizerBase

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.base import Problem


@functools.cache
def load_chat_template(spec: str | None) -> str | None:
    """task.chat_template's text, syntax-checked: a Jinja template itself, or a file holding one. Cached, so
    the file is read once, at start, and a run never changes template part-way."""
    if spec is None:
        return None
    if "{{" in spec or "{%" in spec:
        text, origin = spec, "task.chat_template"
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ConfigError(f"task.chat_template={spec!r} is neither a file nor a Jinja template "
                              "(a template has {{ ... }} or {% ... %})")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"task.chat_template: cannot read {path} ({exc})") from exc
        origin = f"task.chat_template {path}"
    try:
        # transformers renders with the loop-controls extension; parsing with it accepts what it accepts.
        jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{origin}: not a valid Jinja template: line {exc.lineno}: {exc.message}") from exc
    return text


def build_messages(problem: Problem, cfg: TaskConfig) -> list[dict[str, str]]:
    """A chat prompt as given; a text prompt as a user message with the instruction appended, after the
    system prompt."""
    if problem.messages is not None:
        return [dict(message) for message in problem.messages]
    messages = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    content = f"{problem.question}\n{cfg.instruction}" if cfg.instruction else problem.question
    messages.append({"role": "user", "content": content})
    return messages


def check_chat_template(tokenizer: PreTrainedTokenizerBase, cfg: TaskConfig) -> str | None:
    """Every prompt goes through a chat template: task.chat_template's (-> its text), else the tokenizer's
    (-> None), else none, refused."""
    template = load_chat_template(cfg.chat_template)
    if template is None and not tokenizer.chat_template:
        raise ConfigError("the model's tokenizer has no chat template: set task.chat_template to a Jinja template "
                          "or a file holding one")
    return template


def render_prompt(tokenizer: PreTrainedTokenizerBase, problem: Problem, cfg: TaskConfig) -> str:
    """The prompt's text, through the chat template, up to the assistant's turn."""
    template = check_chat_template(tokenizer, cfg)
    try:
        return tokenizer.apply_chat_template(build_messages(problem, cfg), chat_template=template, tokenize=False,
                                             add_generation_prompt=True)
    except jinja2.TemplateError as exc:
        which = "task.chat_template" if template is not None else "the tokenizer's chat template"
        raise ConfigError(f"{which} failed on problem {problem.id}: {type(exc).__name__}: {exc}") from exc


def encode_prompt(tokenizer: PreTrainedTokenizerBase, problem: Problem, cfg: TaskConfig,
                  max_tokens: int | None = None) -> list[int]:
    """The prompt's token ids; with `max_tokens` (task.truncate_prompts=left, grpo.tasks.context), only
    the last that many."""
    ids = tokenizer(render_prompt(tokenizer, problem, cfg), add_special_tokens=False)["input_ids"]
    return ids[-max_tokens:] if max_tokens is not None and len(ids) > max_tokens else ids
