"""Loading a run configuration: YAML files and presets, dotted CLI overrides, and their merge into the
schema's dataclasses (`grpo.config.schema`); and writing one back as YAML.

Every key is checked against the dataclasses: an unknown or mistyped key is an error that names the
valid keys, so a typo never silently falls back to a default. A key that moved is refused in one line
naming its new place (`_without_moved_faults`); TRL's, verl's, AReaL's, OpenRLHF's and ms-swift's names are
answered with grpo's keys (`grpo.config.trl_names`, `grpo.config.verl_names`, `grpo.config.areal_names`,
`grpo.config.openrlhf_names`, `grpo.config.swift_names`).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from grpo.config.areal_names import areal_names_error, is_areal_name
from grpo.config.openrlhf_names import OPENRLHF, openrlhf_names_error
from grpo.config.schema import FaultsConfig, RunConfig, validate
from grpo.config.swift_names import SWIFT, swift_names_error
from grpo.config.trl_names import TRL, trl_name_error, trl_names_error
from grpo.config.verl_names import VERL, verl_names_error
from grpo.errors import ConfigError

PRESET_DIR = Path(__file__).parent.parent / "configs"


def resolve_config_path(name_or_path: str) -> Path:
    """A file path, or a preset name such as `quickstart` or `gsm8k/fast`. A directory is never a config: where
    one has a preset's name (a run directory called `quickstart` in the working directory), the preset is meant."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    preset = PRESET_DIR / (name_or_path if name_or_path.endswith(".yaml") else f"{name_or_path}.yaml")
    if preset.is_file():
        return preset
    if path.is_dir():
        hint = f"; did you mean {path / 'config.yaml'}?" if (path / "config.yaml").is_file() else ""
        raise ConfigError(f"config {name_or_path!r} is a directory, not a YAML file{hint}")
    presets = sorted(str(p.relative_to(PRESET_DIR).with_suffix("")) for p in PRESET_DIR.rglob("*.yaml"))
    raise ConfigError(f"config {name_or_path!r} is neither a file nor a preset; presets: {', '.join(presets)}")


def split_overrides(overrides: list[str]) -> tuple[list[str], str | None]:
    """-> (the config's overrides, the checkpoint named by resume_from=, if any): resume_from acts on
    this start of a run and is not part of its saved config."""
    resume_from = None
    kept = []
    for override in overrides:
        if override.startswith("resume_from="):
            resume_from = override.split("=", 1)[1]
        else:
            kept.append(override)
    return kept, resume_from


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping: PyYAML keeps the last silently, and one of
    the user's two settings would be dropped without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: the keys beside it override base's
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, typing.Hashable):  # a list as a key: PyYAML's own error says so
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice in one mapping (first on line {seen[key] + 1}): keep one",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def read_yaml_config(path: Path) -> Any:
    """A config file's YAML (None when empty); a key given twice in one mapping is an error."""
    return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    data: dict[str, Any] = {}
    if path is not None:
        resolved = resolve_config_path(str(path))
        try:
            data = read_yaml_config(resolved) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(yaml_error_line(resolved, exc)) from None
        if not isinstance(data, dict):
            raise ConfigError(f"{resolved}: the top level must be a mapping of keys, got {type(data).__name__}")
    for override in overrides or []:
        apply_override(data, override)
    cfg = from_dict(RunConfig, data)
    validate(cfg)
    return cfg


def yaml_error_line(path: Path, exc: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line naming the file and the place; tabs get their fix."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if "\\t" in problem or "\t" in problem:  # PyYAML writes a tab as \\t
        return f"{where}: not valid YAML: a tab indents this line; YAML indents with spaces: use spaces"
    return f"{where}: not valid YAML: {problem}"


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply `a.b.c=value` to a nested dict; the value is parsed as YAML (`[1,2]`, `true`, `null`)."""
    key, sep, raw = override.partition("=")
    key = key.strip().lstrip("+")  # Hydra's + (add) and ++ (add or override): every key exists, so both set it
    if not sep or not key:
        raise ConfigError(f"override {override!r} must look like section.key=value")
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            if not is_areal_name(key):
                raise ConfigError(f"override {override!r}: {part!r} is a value, not a section")
            # AReaL's section of a grpo key's name (recover.mode): the config's check answers it with the rest.
            child = node[part] = {}
        node = child
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if "#" in raw and (value is None or isinstance(value, str) and "#" not in value):
        # YAML read the '#' as a comment start (`task.gold_pattern=####(.*)`); on a command line it is text.
        value = raw.strip()
    node[parts[-1]] = value


def from_dict(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"the config must be a mapping of keys, got {data!r}")
    if cls is RunConfig and "faults" in data:
        data = _without_moved_faults(data)
    return _merge_section(cls, cls(), data, "")


def _without_moved_faults(data: dict[str, Any]) -> dict[str, Any]:
    """`faults.*` moved to `testing.faults.*`. A run directory saved before holds the section at its
    defaults (dropped: it resumes as it is); a key set in it is refused, naming its new place."""
    old = data["faults"]
    defaults = to_dict(FaultsConfig())
    changed = sorted(k for k in old if k not in defaults or old[k] != defaults[k]) if isinstance(old, dict) else []
    if not isinstance(old, dict) or changed:
        key = f"faults.{changed[0]}" if changed else "faults"
        raise ConfigError(f"{key} moved to testing.{key}: fault injection is for rehearsals and tests")
    return {k: v for k, v in data.items() if k != "faults"}


def _merge_section(cls: type, base: Any, data: dict[str, Any], path: str) -> Any:
    """Keys the data leaves out keep `base`'s values (a nested section keeps its own defaults)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    prefix = f"{path}." if path else ""
    unknown = {key: value for key, value in data.items() if key not in names}
    # AReaL's sections share names with grpo's (actor, rollout, recover): its names are read from the whole config;
    # a name another trainer's table also knows (seed, critic.*) does not alone make it AReaL's.
    areal = areal_names_error(data, lambda name: any(table.entry(name) is not None
                                                     for table in (TRL, VERL, OPENRLHF, SWIFT))) if not path else None
    if areal is not None:
        raise ConfigError(areal)
    verl = verl_names_error(unknown) if not path and unknown else None
    if verl is not None:
        raise ConfigError(verl)
    if not path and unknown:
        # Beside unknown keys, a section given a value is another trainer's flag too (ms-swift's `--model NAME`).
        swift = swift_names_error({key: value for key, value in data.items() if key in unknown or (
            dataclasses.is_dataclass(hints[key]) and not isinstance(value, dict))})
        if swift is not None:
            raise ConfigError(swift)
    openrlhf = openrlhf_names_error(unknown) if not path and unknown else None
    if openrlhf is not None:
        raise ConfigError(openrlhf)
    several = trl_names_error(path or "the top level", unknown) if len(unknown) > 1 else None
    if several is not None:
        raise ConfigError(several)
    for key in data:
        if key not in names:
            trl = trl_name_error(f"{prefix}{key}", str(key), data[key])
            if trl is not None:
                raise ConfigError(trl)
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            where = path or "the top level"
            raise ConfigError(f"unknown key {prefix}{key}{hint}; valid keys in {where}: {', '.join(names)}")
    updates = {
        name: _coerce(value, hints[name], f"{prefix}{name}", getattr(base, name)) for name, value in data.items()
    }
    return dataclasses.replace(base, **updates)


def _coerce(value: Any, hint: Any, path: str, current: Any = None) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{path} is a section; set its keys, e.g. {path}.<key>=..., got {value!r}")
        return _merge_section(hint, current if current is not None else hint(), value, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, path, current)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{path} cannot be {value!r}")
    if origin is Literal:
        if isinstance(value, bool):  # YAML 1.1 reads off/on/no/yes as booleans
            spelled = [a for a in args if str(a).lower() in (("on", "true", "yes") if value else ("off", "false", "no"))]
            value = spelled[0] if spelled else value
        if value not in args:
            raise ConfigError(f"{path} must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise ConfigError(f"{path} must be a mapping of names to values ({{name: value, ...}}), got {value!r}")
        return {key: _as_typed(v, args[1], f"{path}.{key}") for key, v in value.items()}
    if origin is list:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        return [_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{path} must be a number, got {value!r}")
    if hint is str:
        if value is None or isinstance(value, (dict, list)):
            raise ConfigError(f"{path} must be a string, got {value!r}")
        return str(value)
    return value


def _as_typed(value: Any, hint: Any, path: str) -> Any:
    """A mapping's value kept as YAML typed it where it is one of `hint`'s types (`false` stays a boolean where text
    is allowed too), else coerced to the first that takes it."""
    allowed = tuple(t for t in (typing.get_args(hint) or (hint,)) if isinstance(t, type))
    if isinstance(value, allowed) and (bool in allowed or not isinstance(value, bool)):
        return value
    return _coerce(value, hint, path)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_yaml(config: RunConfig) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False)
