"""What a run directory belongs to: its data, model and reward. A start that would resume a run whose
identity differs is refused, so a run directory never silently returns a model trained on other data.

Config keys fall in three groups, listed here and nowhere else (docs/coming-from-trl.md shows them):
- IDENTITY: the data, the prompts made from it, the model and the reward. A change is refused unless the
  start says `resume_with_changes=true` (continue this run with the new data/model/reward).
- MAY_CHANGE: how long, how often and where things are recorded, and how the machine runs the same
  computation (steps, epochs, logging, checkpoint and evaluation cadence, guard, device, engine, memory).
- Anything else (learning rate, clip, sampling, ...): allowed, logged as a warning and recorded in
  events.jsonl as `config_changed`.
The training data is also compared by content (RUN_DIR/data.json holds a fingerprint of the files), so
a file rewritten in place is caught as well as a path changed; and the reward by its code
(RUN_DIR/reward.json, grpo.rewards.fingerprint), so a reward function edited between starts is caught
like its name changed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grpo.config import RunConfig, TaskConfig
from grpo.errors import ConfigError
from grpo.rewards.fingerprint import code_fingerprint
from grpo.rewards.registry import get_reward

IDENTITY = ("model.name", "model.dtype", "model.lora.", "model.tiny.", "task.")
MAY_CHANGE = ("name", "run_dir", "recover", "resume_with_changes", "train.steps", "train.epochs", "logging.",
              "checkpoint.", "eval.", "guard.", "memory.", "faults.", "model.device", "model.attn_implementation",
              "model.gradient_checkpointing", "rollout.engine", "rollout.server.", "rollout.generation_batch_size",
              "rollout.max_retries", "rollout.retry_backoff_s", "algo.micro_batch_size")
# Task keys that change neither the data, the prompts nor the reward.
_TASK_MAY_CHANGE = ("task.test_files", "task.test_split")

FINGERPRINT_FILE = "data.json"
REWARD_FILE = "reward.json"
_HASH_LIMIT = 256 * 2**20  # files larger than this are identified by size and modification time


def _matches(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in prefixes)


def is_identity(key: str) -> bool:
    return _matches(key, IDENTITY) and not _matches(key, _TASK_MAY_CHANGE)


def may_change(key: str) -> bool:
    return _matches(key, MAY_CHANGE) or _matches(key, _TASK_MAY_CHANGE)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def training_files(task: TaskConfig) -> list[Path]:
    """The local files the training split is read from; [] for generated, hub and in-memory data (their
    config values name them: an in-memory dataset's name is its content's hash)."""
    from grpo.tasks.files import expand_files, split_files

    try:
        if task.train_files:
            return expand_files(task.train_files, "task.train_files")
        if task.path and ":" not in task.path and Path(task.path).expanduser().is_dir():
            return split_files(Path(task.path).expanduser(), task.train_split, "task.path")
    except ConfigError:
        return []  # the data's own check reports it, with its fix
    return []


def data_fingerprint(task: TaskConfig) -> dict[str, str]:
    """{file: sha256 of its content} for the training files (size and mtime past _HASH_LIMIT)."""
    prints = {}
    for path in training_files(task):
        stat = path.stat()
        if stat.st_size > _HASH_LIMIT:
            prints[str(path.resolve())] = f"size={stat.st_size} mtime={stat.st_mtime_ns}"
            continue
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
        prints[str(path.resolve())] = digest.hexdigest()
    return prints


def reward_fingerprint(task: TaskConfig) -> dict[str, str]:
    """{task.reward entry: sha256 of its code}; grpo's built-in rewards are identified by their name alone."""
    prints = {}
    for spec in [task.reward] if isinstance(task.reward, str) else task.reward:
        try:
            digest = code_fingerprint(get_reward(spec))
        except Exception:  # a user module may raise anything while it imports: resolve_rewards reports it
            continue
        if digest is not None:
            prints[spec] = digest
    return prints


def reward_changes(run_path: Path, task: TaskConfig) -> dict[str, list[str | None]]:
    """{"task.reward.code:ENTRY": [the run's hash, this start's]} for each reward function whose code differs
    from the one the run recorded (none for a run that recorded none)."""
    recorded = _read_json(run_path / REWARD_FILE)
    if recorded is None:
        return {}
    now = reward_fingerprint(task)
    return {f"task.reward.code:{spec}": [_hash(recorded.get(spec)), _hash(now.get(spec))]
            for spec in sorted(recorded.keys() & now.keys()) if recorded[spec] != now[spec]}


def _hash(digest: str | None) -> str | None:
    return digest[:16] if digest else None


def differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    """Flat keys whose values differ between two config trees."""
    old, new = flatten(before), flatten(after)
    return {k: [old.get(k), new.get(k)] for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)}


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def check_same_run(run_path: Path, saved: dict[str, Any] | None, cfg: RunConfig, after: dict[str, Any]) -> None:
    """Refuse (ConfigError, one line) a resume of `run_path` whose data, model or reward differ from the
    saved config `saved` (and the saved data fingerprint), unless cfg.resume_with_changes."""
    if cfg.resume_with_changes:
        return
    changed = [k for k in differences(saved or {}, after) if is_identity(k)] if saved is not None else []
    what = ""
    if changed:
        old, new = flatten(saved or {}).get(changed[0]), flatten(after).get(changed[0])
        what = f"{changed[0]} was {_short(old)}, now {_short(new)}"
        if len(changed) > 1:
            what += f" (and {len(changed) - 1} more: {', '.join(changed[1:4])}{', ...' if len(changed) > 4 else ''})"
    else:
        recorded = _read_json(run_path / FINGERPRINT_FILE)
        if recorded is not None:
            now = data_fingerprint(cfg.task)
            if recorded != now:
                moved = sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))
                what = f"the training data's content changed ({Path(moved[0]).name} differs from the run's)"
    if not what and (edited := reward_changes(run_path, cfg.task)):
        specs = [key.partition(":")[2] for key in edited]
        what = f"the reward's code changed ({', '.join(specs)} differs from the run's: the function or what it uses)"
    if what:
        raise ConfigError(f"{run_path} is a run on other data, model or reward: {what}; start a new run with "
                          f"run_dir=NEW_DIR, or continue this one with the change by adding resume_with_changes=true")


def _read_json(path: Path) -> dict[str, str] | None:
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None
