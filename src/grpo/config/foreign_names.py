"""Another trainer's setting names and grpo's keys for them, and the one-line errors that answer them: a name given
to grpo is refused naming grpo's key and, where the values say the same, the override to write, instead of a list
of sections; several names given together are answered in one message. The tables are TRL's
(grpo.config.trl_names), verl's (grpo.config.verl_names), OpenRLHF's (grpo.config.openrlhf_names) and ms-swift's
(grpo.config.swift_names). A launch script's `--flag value` words, given to grpo's command, are read here as
`flag=value` overrides for the loader to answer (`flag_overrides`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from grpo.config.schema import RunConfig

# The override from a name's value and every name given with it (its own included), for a name whose meaning
# depends on others (a warm-up ratio of a step count, a KL coefficient of its switch); None where they do not say it.
Beside = Callable[[Any, Mapping[str, Any]], "str | None"]


@dataclass(frozen=True)
class ForeignName:
    keys: tuple[str, ...]  # grpo's keys for it; () where grpo has none
    note: str = ""  # what differs, or what grpo does instead
    values: Mapping[Any, Any] = field(default_factory=dict)  # its values as grpo's, where the words differ
    carries: bool = True  # its value (through `values`) means the same as grpo's first key: the override is said
    only_values: bool = True  # with `values`: its other values have no grpo equivalent (else they carry as they are)
    form: str = ""  # the override, `{}` for the value, where it is not `KEY=VALUE` (the value inside a list, two keys)
    beside: Beside | None = None  # the override, where it depends on the names given with it (then the rest is unused)
    value_keys: Mapping[Any, tuple[str, ...]] = field(default_factory=dict)  # grpo's keys where a value has its own
    remark: Callable[[Any], str | None] | None = None  # what a value does that the note cannot say (a stray comma)

    def keys_for(self, value: Any) -> tuple[str, ...]:
        """grpo's keys for the name set to `value`."""
        if self.value_keys and not isinstance(value, (list, dict)) and value in self.value_keys:
            return self.value_keys[value]
        return self.keys

    def remark_for(self, value: Any) -> str:
        return (self.remark(value) or "") if self.remark is not None else ""


@dataclass(frozen=True)
class NameTable:
    owner: str  # whose names: "TRL", "verl"
    page: str  # the page with the names table
    names: Mapping[str, ForeignName]
    families: Mapping[str, ForeignName] = field(default_factory=dict)  # `prefix.`: every name under it
    stranger: str = ""  # said of a name the table lacks, given with its names
    why_none: bool = False  # a name grpo has no key for is said with why (its note), not alone
    command: tuple[str, ...] = ()  # the trainer's command words a pasted command line keeps before its flags

    def entry(self, name: str) -> ForeignName | None:
        if name in self.names:
            return self.names[name]
        under = [prefix for prefix in self.families if name.startswith(prefix)]
        return self.families[max(under, key=len)] if under else None


def as_yaml(value: Any) -> str:
    """`value` as an override writes it: a list without spaces, so that it stays one shell word."""
    if isinstance(value, list):
        return "[" + ",".join(map(as_yaml, value)) + "]"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).removesuffix("\n...\n").strip()


def integer(value: Any) -> int | None:
    """A name's value as a whole number, where it is one (YAML reads `1e3` as text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def number(value: Any) -> float | None:
    """A name's value as a number, where it is one (YAML reads `1e-3`, without a dot, as text)."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def name_error(table: NameTable, key: str, name: str, value: Any) -> str | None:
    """The error for the unknown key `key` (its name in `table`: `name`, set to `value`) when it is one of the
    table's names; None when it is not."""
    entry = table.entry(name)
    if entry is None:
        return None
    keys, remark = entry.keys_for(value), entry.remark_for(value)
    if not keys:
        return f"{key} is {table.owner}'s name; grpo has no such key: {entry.note}" + (f"; {remark}" if remark else "")
    message = f"{key} is {table.owner}'s name; grpo's is {' and '.join(keys)}"
    override = _override(entry, value, {name: value})
    if override is not None:
        message += f": {override}"
    return message + (f" ({entry.note})" if entry.note else "") + (f"; {remark}" if remark else "")


def most_names_error(table: NameTable, others: Sequence[NameTable], given: Mapping[Any, Any]) -> str | None:
    """The error for the top level's unknown keys `given` where `table` knows more of them than each of `others`
    (trainers share names: TRL's `temperature` is OpenRLHF's and ms-swift's too): one message for all of them (one
    line naming grpo's key for a single name). None otherwise."""
    names = [str(name) for name in given]
    ours = _known(table, names)
    if ours == 0 or any(ours <= _known(other, names) for other in others):
        return None
    flat = {str(name): value for name, value in given.items()}
    if len(flat) == 1:
        ((name, value),) = flat.items()
        return name_error(table, name, name, value)
    return names_error(table, "the top level", flat)


def _known(table: NameTable, names: list[str]) -> int:
    return sum(table.entry(name) is not None for name in names)


def names_error(table: NameTable, where: str, given: Mapping[str, Any]) -> str | None:
    """One error for several unknown keys of `where` when any is one of the table's names: every one translated at
    once, not one error per start. None when none is."""
    if not any(table.entry(str(name)) is not None for name in given):
        return None
    overrides: dict[str, list[str]] = {}  # an override -> the names that say it
    by_hand: list[str] = []
    none: dict[str, list[str]] = {}  # why -> the names grpo has no key for, for that reason
    remarks: dict[str, str] = {}
    for name, value in given.items():
        entry = table.entry(str(name))
        override = _override(entry, value, given) if entry is not None else None
        if override is not None:
            overrides.setdefault(override, []).append(str(name))
        elif entry is None:
            none.setdefault(table.stranger, []).append(str(name))
        elif keys := entry.keys_for(value):
            said = "; ".join(filter(None, (entry.note, entry.remark_for(value))))
            by_hand.append(f"{name}: {' and '.join(keys)}{f' ({said})' if said else ''}")
        else:
            none.setdefault(entry.note if table.why_none else "", []).append(str(name))
            if entry.remark_for(value):
                remarks[str(name)] = entry.remark_for(value)
    written = ", ".join(f"{override} ({', '.join(names)})" for override, names in overrides.items())
    parts = [f"{where} holds {table.owner}'s names, not grpo's keys" + (
        f"; write them as grpo's: {written}" if written else "")]
    if by_hand:
        parts.append(f"set by hand: {'; '.join(by_hand)}")
    if none:
        parts.append(f"grpo has no key for: {_without_keys(table, given, none, remarks)}")
    return "; ".join(parts) + f" ({table.page})"


def _without_keys(table: NameTable, given: Mapping[str, Any], none: dict[str, list[str]],
                  remarks: Mapping[str, str]) -> str:
    """The names grpo has no key for: grouped by why, or (a table that does not say why) in the order given, a name
    the table lacks marked as such and a value's remark said beside its name."""
    if table.why_none:
        grouped = "; ".join(f"{', '.join(names)} ({why})" if why else ", ".join(names) for why, names in none.items())
        return grouped + "".join(f"; {name}: {remark}" for name, remark in remarks.items())
    strangers = set(none.get(table.stranger, ()))
    return ", ".join(f"{name} ({table.stranger})" if name in strangers else
                     f"{name} ({remarks[name]})" if name in remarks else name
                     for name in map(str, given) if any(name in names for names in none.values()))


def _override(entry: ForeignName, value: Any, given: Mapping[str, Any]) -> str | None:
    """`KEY=VALUE` in grpo's words for `value` (with `given`, the names given with it), where it means the same;
    None where it does not. A name given no value (a shell variable never set) has none."""
    if value == "":
        return None
    if entry.beside is not None:
        return entry.beside(value, given)
    if not (entry.keys and entry.carries):
        return None
    if entry.values and _known_value(value, entry.values):
        written = as_yaml(entry.values[value])
    elif entry.values and entry.only_values:
        return None
    else:
        written = as_yaml(value)
    if "\n" in written:  # text over several lines goes in a YAML file
        return None
    return entry.form.format(written) if entry.form else f"{entry.keys[0]}={written}"


def _known_value(value: Any, values: Mapping[Any, Any]) -> bool:
    return not isinstance(value, (list, dict)) and value in values


_TOP_LEVEL = {field.name for field in dataclasses.fields(RunConfig)} | {"resume_from"}  # grpo's keys without a dot


def flag_overrides(tables: Sequence[NameTable], words: list[str], unknown: Collection[str]
                   ) -> tuple[list[str], list[str]] | None:
    """A command line's flags of another trainer as `flag=value` overrides, for the loader to answer: -> (the other
    words, the overrides), where the flags argparse did not know (`unknown`: `--flag` or `--flag=value` words) hold a
    name one of `tables` knows; None otherwise. A flag takes the words after it up to the next `--` word or `key=value`
    override: none is a switch (true), several a list. A table's command words pasted before the flags (`swift
    rlhf`) are left out."""
    strangers = {word.partition("=")[0] for word in unknown if word.startswith("--")}
    if not any(table.entry(name[2:]) is not None for table in tables for name in strangers):
        return None
    kept: list[str] = []
    flags: list[tuple[str, list[str]]] = []
    taking = False  # the words after a flag are its values, up to a `--` word or an override
    for word in words:
        name, sep, value = word.partition("=")
        if word.startswith("--") and name in strangers:
            flags.append((name[2:], [value] if sep else []))
            taking = not sep
        elif taking and not word.startswith("--") and not _is_override(word):
            flags[-1][1].append(word)
        else:
            taking = False
            kept.append(word)
    for command in (table.command for table in tables if table.command):
        kept = _without(kept, list(command))
    return kept, [f"{name}={_as_value(values)}" for name, values in flags]


def _without(words: list[str], run: list[str]) -> list[str]:
    """`words` without the first place where `run` stands in them, word after word."""
    for start in range(len(words) - len(run) + 1):
        if words[start:start + len(run)] == run:
            return words[:start] + words[start + len(run):]
    return words


def _is_override(word: str) -> bool:
    """A grpo override (`section.key=value`, `run_dir=...`), not a flag's value."""
    key, sep, _ = word.partition("=")
    return bool(sep) and ("." in key or key in _TOP_LEVEL) and key.replace(".", "").replace("_", "").isalnum()


def _as_value(words: list[str]) -> str:
    if not words:
        return "true"
    return words[0] if len(words) == 1 else "[" + ",".join(words) + "]"
