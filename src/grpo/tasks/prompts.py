"""Turning a problem into prompt token ids through a chat template (the tokenizer's, or task.chat_template)."""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2
import jinja2.meta
import yaml
from transformers import PreTrainedTokenizerBase

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.tasks.base import Problem
from grpo.tasks.messages import prefills


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


def is_raw(problem: Problem, cfg: TaskConfig) -> bool:
    """A text prompt under task.text_prompts=raw: sent as it is, tokenized as TRL tokenizes one (the
    tokenizer's own special tokens added, e.g. a BOS), without a chat template."""
    return problem.messages is None and cfg.text_prompts == "raw"


def build_messages(problem: Problem, cfg: TaskConfig) -> list[dict[str, str]]:
    """A chat prompt as given; a text prompt as a user message with the instruction appended, after the
    system prompt."""
    if problem.messages is not None:
        return [dict(message) for message in problem.messages]
    messages = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    content = f"{problem.question}\n{cfg.instruction}" if cfg.instruction else problem.question
    messages.append({"role": "user", "content": content})
    return messages


def check_chat_template(tokenizer: PreTrainedTokenizerBase, cfg: TaskConfig, messages: bool = False) -> str | None:
    """The chat template prompts go through: task.chat_template's (-> its text), else the tokenizer's (-> None),
    else none, refused; under task.text_prompts=raw only once `messages` (a message-list prompt) needs one."""
    template = load_chat_template(cfg.chat_template)
    if template is None and not tokenizer.chat_template and (messages or cfg.text_prompts != "raw"):
        raw = "" if cfg.text_prompts == "raw" else ", or task.text_prompts=raw to send text prompts as they are"
        raise ConfigError("the model's tokenizer has no chat template: set task.chat_template to a Jinja template "
                          f"or a file holding one{raw}")
    return template


def template_markers(tokenizer: PreTrainedTokenizerBase, cfg: TaskConfig) -> tuple[str, ...]:
    """The special tokens the chat template writes around a message (`<|im_start|>`, ...): a text prompt that
    holds one was chat-formatted already. () without a template, or under task.text_prompts=raw."""
    if cfg.text_prompts == "raw" or (cfg.chat_template is None and not tokenizer.chat_template):
        return ()
    try:
        probe = tokenizer.apply_chat_template([{"role": "user", "content": "."}], chat_template=load_chat_template(
            cfg.chat_template), tokenize=False, add_generation_prompt=True, **cfg.chat_template_kwargs)
    except jinja2.TemplateError:
        # A template that refuses a lone user message (one that wants a system message first) shows no markers
        # here; rendering the real prompts reports its own error, naming the problem.
        return ()
    specials = [t.content for t in tokenizer.added_tokens_decoder.values() if t.special]
    return tuple(t for t in specials if len(t) > 1 and t in probe)


def unfilled_template_columns(tokenizer: PreTrainedTokenizerBase, problems: list[Problem], cfg: TaskConfig
                              ) -> list[str]:
    """The start's words for data columns named as variables the chat template reads (gpt-oss's
    `reasoning_effort`): grpo, as TRL's GRPOTrainer, passes them to the rewards and renders the template's own
    default for them (Unsloth's trainer renders the column's value), which the data's author may not expect."""
    template = load_chat_template(cfg.chat_template) or tokenizer.chat_template
    if not isinstance(template, str) or all(is_raw(p, cfg) for p in problems):
        return []
    try:
        variables = jinja2.meta.find_undeclared_variables(
            jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template))
    except jinja2.TemplateSyntaxError:
        # A tokenizer's template may use transformers' own tags ({% generation %}), which only its renderer
        # parses: its variables are unknown here, and rendering it reports its own errors.
        return []
    named = dict.fromkeys(name for p in problems for name in p.columns
                          if name in variables and name not in cfg.chat_template_kwargs)
    notes = []
    for name in named:
        values = {yaml.safe_dump({name: p.columns.get(name)}, default_flow_style=True).strip() for p in problems}
        fix = (f"task.chat_template_kwargs={values.pop()} renders it in every prompt" if len(values) == 1 else
               "its values differ between rows, and task.chat_template_kwargs gives one value to every prompt")
        notes.append(f"column {name!r} is a variable the chat template reads; grpo, as TRL's GRPOTrainer, passes the "
                     f"column to the reward functions but renders the template's own default for it (Unsloth's "
                     f"trainer renders the column's value): {fix}")
    return notes


def check_not_templated(problem: Problem, markers: tuple[str, ...]) -> None:
    """A text prompt already chat-formatted (TRL scripts render their own, to prefill the assistant's turn) would
    be nested, whole, in a user message of the template: refused, naming the way to send it as it is."""
    if problem.messages is not None:
        return
    found = next((m for m in markers if m in problem.question), None)
    if found is not None:
        raise ConfigError(f"problem {problem.id}'s text prompt is chat-formatted already (it holds the chat "
                          f"template's {found!r}): grpo would send it inside the template again, as a user message. "
                          "Set task.text_prompts=raw to send text prompts as they are (as TRL does), or give the "
                          "prompt column as [{role, content}] messages")


def render_prompt(tokenizer: PreTrainedTokenizerBase, problem: Problem, cfg: TaskConfig) -> str:
    """The prompt's text, through the chat template, up to the assistant's turn; a raw one as it is."""
    if is_raw(problem, cfg):
        return problem.question
    template = check_chat_template(tokenizer, cfg, messages=problem.messages is not None)
    # A prompt ending in the assistant's message is a prefill the model writes on from (TRL's convention): its turn
    # is left open, and no new one begins.
    prefill = prefills(problem)
    try:
        return tokenizer.apply_chat_template(build_messages(problem, cfg), chat_template=template, tokenize=False,
                                             add_generation_prompt=not prefill, continue_final_message=prefill,
                                             **cfg.chat_template_kwargs)
    except jinja2.TemplateError as exc:
        which = "task.chat_template" if template is not None else "the tokenizer's chat template"
        raise ConfigError(f"{which} failed on problem {problem.id}: {type(exc).__name__}: {exc}") from exc


def encode_prompt(tokenizer: PreTrainedTokenizerBase, problem: Problem, cfg: TaskConfig,
                  max_tokens: int | None = None) -> list[int]:
    """The prompt's token ids; with `max_tokens` (task.truncate_prompts=left, grpo.tasks.context), only
    the last that many."""
    ids = tokenizer(render_prompt(tokenizer, problem, cfg), add_special_tokens=is_raw(problem, cfg))["input_ids"]
    return ids[-max_tokens:] if max_tokens is not None and len(ids) > max_tokens else ids
