"""Whether grpo's `math` reward can score a split's golds as they were read. Data it would score wrongly, or not at
all, is refused at load in one line naming what to set, rather than found unscorable (or silently wrong) steps into a
run. Each rule is for any data of its shape, checked on the first rows:

- prompts that all end with the assistant's message where the data has no gold: whole conversations, the answer last;
- golds that are whole numbers below the length of a column of option texts in every row: positions among options;
- golds that are option letters where no prompt shows all its options of such a column (a list of texts, or one text
  labelling them in turn, `A) 12 B) 15 ...` as SAT and AGIEval keep them);
- golds read out of a worked solution (its last \\boxed{}, or after ####) that differ from the data's own `answer`;
- golds the reward cannot match even against themselves (worked solutions), or spanning several lines (programs): it
  compares a completion's one-line final answer.

A task.gold_pattern says how to read the gold, so the rules on how golds were read (all but the first) leave it be.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from grpo.config import TaskConfig
from grpo.errors import ConfigError
from grpo.rewards.math_score import math_reward
from grpo.tasks.base import Problem
from grpo.tasks.fields import lookup, short
from grpo.tasks.files import Table
from grpo.tasks.gold import GoldReader

MATH_REWARDS = ("math", "math_format")  # the built-in rewards that compare a completion's answer with `gold`
SAMPLE = 64  # rows checked: a shape holds for the first rows as for all, and math_verify takes milliseconds a gold
OWN_ANSWER = TaskConfig().answer_column  # grpo's default answer column, `answer`: where data keeps its final answers
_LETTER = re.compile(r"[A-Z]")
# An option's label inside one text of options: `A)`, `(A)` or `A.` at the start or after a space.
_LABEL = re.compile(r"(?:^|(?<=\s))\(?([A-Z])[).]\s")


def scores_with_math(cfg: TaskConfig) -> bool:
    rewards = [cfg.reward] if isinstance(cfg.reward, str) else cfg.reward
    return any(name in MATH_REWARDS for name in rewards)


def math_cannot_score(table: Table, problems: list[Problem], prompt: str | None, answer: str | None,
                      golds: GoldReader | None) -> list[str]:
    """Refuses data the math reward would score wrongly; returns the load's notes on golds it cannot use where they
    are a few. `prompt`: the prompt's column (None: task.prompt_template); `answer`: the answer's (None: no gold)."""
    rows, sample = table.rows[:SAMPLE], problems[:SAMPLE]
    if prompt is not None:
        _conversations_without_gold(table, sample, prompt, any(p.gold for p in problems))
    if answer is None or golds is None or golds.pattern is not None:
        return []
    shown = [p.question if p.messages is None else "\n".join(str(m["content"]) for m in p.messages) for p in sample]
    options = [name for name in table.columns if name not in (prompt, answer) and _all_option_lists(rows, name)]
    _positions(table, rows, answer, options, prompt)
    _letters(table, sample, shown, answer, options, prompt)
    if golds.ways["boxed"] or golds.ways["gsm8k"]:
        _against_own_answer(table, rows, sample, answer)
    return _unusable(table, sample, answer)


def _conversations_without_gold(table: Table, sample: list[Problem], prompt: str, any_gold: bool) -> None:
    if any_gold or not sample or not all(p.messages and p.messages[-1].get("role") == "assistant" for p in sample):
        return
    last = lookup(table.rows[0], prompt)[-1]
    field = "value" if isinstance(last, dict) and "from" in last and "role" not in last else "content"
    raise ConfigError(f"{table.source}: every prompt of column {prompt!r} ends with the assistant's message and the "
                      "data has no gold answer for the math reward: if that message is the answer (whole "
                      f"conversations), task.answer_column={prompt}.-1.{field} reads the gold from it and leaves it "
                      "out of the prompt; a begun answer for the model to continue needs a gold column too")


def option_texts(value: Any) -> list[str] | None:
    """The options a column's value holds: a list of two texts or more, or one text labelling two or more in turn
    (`A) 12 B) 15`, labels A, B, ... in order); None for any other value."""
    if isinstance(value, (list, tuple)):
        return list(value) if len(value) >= 2 and all(isinstance(x, str) for x in value) else None
    if not isinstance(value, str):
        return None
    labels = list(_LABEL.finditer(value))
    if len(labels) < 2 or [m.group(1) for m in labels] != [chr(ord("A") + i) for i in range(len(labels))]:
        return None
    ends = [m.start() for m in labels[1:]] + [len(value)]
    return [value[m.end():end].strip() for m, end in zip(labels, ends)]


def _all_option_lists(rows: list[dict[str, Any]], name: str) -> bool:
    return all(option_texts(row.get(name)) is not None for row in rows)


def _template(prompt: str | None, options: str) -> str:
    return (f"task.prompt_template='{{{prompt}}}\\n{{{options}}}'" if prompt is not None
            else f"{{{options}}} in task.prompt_template")


def _positions(table: Table, rows: list[dict[str, Any]], answer: str, options: list[str], prompt: str | None) -> None:
    values = [lookup(row, answer) for row in rows]
    if not any(v is not None for v in values) or not all(v is None or type(v) is int for v in values):
        return
    for name in options:
        counts = [len(option_texts(row[name]) or ()) for row in rows]
        if all(v is None or 0 <= v < count for v, count in zip(values, counts)):
            raise ConfigError(
                f"{table.source}: column {answer!r} holds whole numbers below the number of options in column "
                f"{name!r} in every row (e.g. {table.where[0]}: {values[0]} of {counts[0]}): positions among "
                "the options, not answers a completion states, which the math reward compares: give a reward function "
                f"that reads {name!r} and {answer!r} (task.reward=module:function, task.answer_column=null) and show "
                f"the options in the prompt ({_template(prompt, name)}); task.gold_pattern='(.+)' takes the numbers "
                "as the answers")


def _letters(table: Table, sample: list[Problem], shown: list[str], answer: str, options: list[str],
             prompt: str | None) -> None:
    golds = [p.gold for p in sample if p.gold]
    if not golds or not all(_LETTER.fullmatch(gold) for gold in golds):
        return
    for name in options:
        # A row shows its options when its prompt holds each of them: one short option ('0') is often in a stem.
        if not any(all(item.strip() in text for item in option_texts(row[name]) or ())
                   for row, text in zip(table.rows, shown)):
            raise ConfigError(f"{table.source}: column {answer!r} holds option letters (e.g. {golds[0]!r}), but no "
                              f"prompt shows the options of column {name!r}: {_template(prompt, name)} puts them in "
                              "the prompt")


def _own_answers(table: Table, count: int) -> list[str]:
    """The data's own `answer` column read as golds are, in its first `count` rows ("" where it holds no one answer)."""
    reader = GoldReader(OWN_ANSWER, None)
    answers = []
    for row, where in zip(table.rows[:count], table.where):
        value = row.get(OWN_ANSWER)
        if isinstance(value, (list, tuple)) and len(value) == 1:
            value = value[0]
        plain = isinstance(value, (str, int, float)) and not isinstance(value, bool)
        answers.append(reader.read(value, where) if plain else "")
    return answers


def _against_own_answer(table: Table, rows: list[dict[str, Any]], sample: list[Problem], answer: str) -> None:
    if answer == OWN_ANSWER or OWN_ANSWER not in table.columns:
        return
    differ = [(where, p.gold, theirs) for where, p, theirs in zip(table.where, sample, _own_answers(table, len(rows)))
              if theirs and p.gold and math_reward(f"\\boxed{{{theirs}}}", p.gold) != 1.0]
    if differ:
        where, gold, theirs = differ[0]
        raise ConfigError(f"{table.source}: the golds read out of the worked solutions of column {answer!r} (the last "
                          f"\\boxed{{}}, or after ####) differ from the data's own {OWN_ANSWER!r} column in "
                          f"{len(differ)} of {len(rows)} rows (e.g. {where}: {short(gold)} against {short(theirs)}): "
                          f"set task.answer_column={OWN_ANSWER}, or task.gold_pattern to read column {answer!r} "
                          "otherwise")


def unusable(gold: str) -> bool:
    """A gold the math reward cannot match even against a completion that boxes it, or spanning several lines."""
    return "\n" in gold.strip() or math_reward(f"\\boxed{{{gold}}}", gold) != 1.0


def _unusable(table: Table, sample: Sequence[Problem], answer: str) -> list[str]:
    checked = [(where, p.gold) for where, p in zip(table.where, sample) if p.gold]
    bad = [(where, gold) for where, gold in checked if unusable(gold)]
    if not bad:
        return []
    where, gold = bad[0]
    if 2 * len(bad) < len(checked):
        return [f"{len(bad)} of the first {len(checked)} golds the math reward cannot use (e.g. {where}: "
                f"{short(gold)}): unscorable"]
    lines = any("\n" in g.strip() for _, g in bad)
    why = ("; these span several lines, as a program does" if lines
           else "; these are worked solutions, or text it cannot read as an answer")
    other = answer != OWN_ANSWER and OWN_ANSWER in table.columns
    own = [g for g in _own_answers(table, len(sample)) if g] if other else []
    fix = (f"set task.answer_column={OWN_ANSWER}, whose values are answers" if own and not any(map(unusable, own)) else
           "for code, or answers checked another way, give a reward function of your own (task.reward=module:function; "
           "it gets every column, e.g. test cases) and task.answer_column=null; task.gold_pattern reads an answer out "
           "of a longer text")
    raise ConfigError(f"{table.source}: the math reward (task.reward) cannot use {len(bad)} of the first "
                      f"{len(checked)} golds read from column {answer!r} (e.g. {where}: {short(gold)}): it compares a "
                      f"completion's one-line final answer with the gold{why}: {fix}")
