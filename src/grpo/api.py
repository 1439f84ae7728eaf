"""The Python API, for notebooks: build a config in code, pass a dataset and reward functions, train,
evaluate. A run is the same as `grpo train`'s: the same run directory (config, metrics, checkpoints,
train.log), the same guard, and the same resume when it is run again on that directory.

    from grpo import api

    def reward_len(completions, **kwargs):            # TRL's reward contract, unchanged
        return [-abs(20 - len(c)) / 20 for c in completions]

    rows = [{"prompt": "What is 2 + 3?", "answer": "5"}, ...]
    result = api.train(
        "quickstart",                                  # a preset, a YAML file, a RunConfig, a dict or None
        dataset=rows,                                  # a list of dicts, a datasets.Dataset, a file or folder
        eval_dataset=held_out_rows,                    # optional; None: the training rows
        rewards=["math", reward_len],                  # names and callables, summed with reward_weights
        reward_weights=[1.0, 0.1],
        overrides=["train.steps=20", "run_dir=runs/notebook"],
    )
    result.run_dir, result.final_model, result.summary  # summary: before/after evaluations if configured
    api.evaluate(result.final_model, dataset=held_out_rows, rewards=["math"])

Errors are raised, not printed (each importable from grpo.api too): `ConfigError` for bad input (the CLI's
exit 2, raised before any work), `RunStopped` when the guard stops a run (exit 3: its message says why and how to
resume), and the loop's `RunInterrupted` on Ctrl-C after the state was saved, or while the run was still
starting (run the same call again to resume). Rows are columns by name, as in files: `task.prompt_column`
(default `prompt`) and `task.answer_column` (default `answer`) say which is which. Datasets and callables
live only in this Python process: the saved config names them (`memory:...`, `python:NAME`), so resuming
from the command line needs the data in files and rewards as `module:function` (such a run's stop messages
name the API call that resumes it).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grpo.config import RunConfig, apply_override, from_dict, load_config, split_overrides, to_dict, validate
from grpo.errors import ConfigError, RunInterrupted, RunStopped
from grpo.rewards import register_reward

__all__ = ["ConfigError", "RunInterrupted", "RunStopped", "TrainResult", "build_config", "evaluate", "train"]

log = logging.getLogger(__name__)

ConfigLike = RunConfig | Mapping[str, Any] | str | Path | None
DatasetLike = Any  # a list of dicts, a datasets.Dataset, a {"train": ..., "test": ...} mapping, a file or folder
RewardLike = str | Callable[..., Any]


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    final_model: Path | None  # the last checkpoint's model directory (for api.evaluate, grpo export)
    summary: dict[str, Any]  # "before"/"after": evaluations when the config asks for them, else None


def build_config(config: ConfigLike = None, overrides: Sequence[str] = ()) -> RunConfig:
    """A checked RunConfig from a preset name, a YAML file, a RunConfig, a dict of sections or None (the
    defaults), with `overrides` (`section.key=value`) applied: bad keys and values raise ConfigError."""
    if config is None or isinstance(config, (str, Path)):
        return load_config(config, list(overrides))
    data = to_dict(config) if isinstance(config, RunConfig) else copy.deepcopy(dict(config))
    for override in overrides:
        apply_override(data, override)
    cfg = from_dict(RunConfig, data)
    validate(cfg)
    return cfg


def train(config: ConfigLike = None, *, dataset: DatasetLike = None, eval_dataset: DatasetLike = None,
          rewards: RewardLike | Sequence[RewardLike] | None = None, reward_weights: Sequence[float] | None = None,
          overrides: Sequence[str] = ()) -> TrainResult:
    """Train as `grpo train` does. `dataset`: the training rows (task.name becomes `dataset`); `rewards`:
    reward names and callables for task.reward, with `reward_weights`. Both default to the config's.
    `overrides` may hold resume_from=CHECKPOINT_DIR, as on the command line."""
    config_overrides, resume_from = split_overrides(list(overrides))
    cfg = with_data_and_rewards(build_config(config, config_overrides), dataset, eval_dataset, rewards,
                                reward_weights)
    summary = {"before": None, "after": None, **run_trainer(cfg, resume_from)}
    written = cfg.resolved_run_dir / "summary.json"
    final = json.loads(written.read_text()).get("final_model") if written.is_file() else None
    return TrainResult(cfg.resolved_run_dir, Path(final) if final else None, summary)


def run_trainer(cfg: RunConfig, resume_from: str | None = None) -> dict[str, Any]:
    """The one call into the trainer, through grpo.entry as `grpo train`'s: the same memory check, ranks,
    run directory lock, train.log, hooks and cleanup of a refused first start; errors raised."""
    from grpo import entry

    return entry.train(cfg, resume_from)


def evaluate(model: str | Path, config: ConfigLike = None, *, dataset: DatasetLike = None,
             rewards: RewardLike | Sequence[RewardLike] | None = None, reward_weights: Sequence[float] | None = None,
             split: str = "test", max_samples: int | None = None, samples: int = 1, temperature: float = 1.0,
             max_new_tokens: int | None = None, batch_size: int | None = None, seed: int = 0,
             keep_answers: bool = False, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Greedy accuracy of `model` (a name, a directory, a checkpoint's model/) as `grpo eval` measures it:
    the fraction of answers whose reward reaches task.correct_threshold, plus pass@k and maj@k with
    `samples` > 1. `dataset` is evaluated whole (as the test split) unless `split="train"`. With
    `keep_answers`, every answer (the sampled ones too) under "answers", as `grpo eval --output` writes them."""
    cfg = with_data_and_rewards(build_config(config, overrides), dataset, dataset, rewards, reward_weights)
    cfg.model = replace(cfg.model, name=str(model))
    return run_evaluation(cfg, split=split, max_samples=max_samples, samples=samples, temperature=temperature,
                          max_new_tokens=max_new_tokens or cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                          batch_size=batch_size or cfg.eval.batch_size, seed=seed, keep_answers=keep_answers)


def run_evaluation(cfg: RunConfig, *, split: str, max_samples: int | None, samples: int, temperature: float,
                   max_new_tokens: int, batch_size: int, seed: int, keep_answers: bool) -> dict[str, Any]:
    """Every check (rewards, data, the rewards called on gold answers) before the model loads where it can,
    then the evaluation. Shared by `grpo eval` and `api.evaluate`."""
    from grpo import progress
    from grpo.evaluate import evaluate as evaluate_problems
    from grpo.policy.models import load_model_and_tokenizer, resolve_device
    from grpo.progress import Progress
    from grpo.rewards import TrainerState, check_golds, check_rewards, resolve_rewards
    from grpo.rollout.engines.embedded import EmbeddedEngine
    from grpo.tasks import build_task, reward_inputs
    from grpo.tasks.context import fit_prompts, model_context, prompt_lengths

    reward_fns = (resolve_rewards(cfg.eval.reward, None, "eval.reward") if cfg.eval.reward
                  else resolve_rewards(cfg.task.reward, cfg.task.reward_weights, "task.reward"))
    task = build_task(cfg.task, splits=(split,))  # data errors before the model is loaded
    if split == "train":
        count = min(max_samples or task.num_train or 500, task.num_train or max_samples or 500)
        problems = [task.train_problem(i, cfg.train.seed) for i in range(count)]
    else:
        problems = task.eval_problems(max_samples)
    if not problems:
        raise ConfigError(f"task {cfg.task.name} has no {split} problems to evaluate")
    check_golds(reward_fns, [p.gold for p in problems], f"the {split} problems")
    model, tokenizer = load_model_and_tokenizer(cfg.model, resolve_device(cfg.model.device))
    fit = fit_prompts(prompt_lengths(tokenizer, problems, cfg.task), problems,
                      model_context(model.config.to_dict(), tokenizer), max_new_tokens, "max_new_tokens", cfg.task,
                      f"{split} prompts")
    if fit.cut:
        log.warning("%s", fit.message())
    golds = [p.gold for p in problems[:4]]
    ids = [tokenizer(g, add_special_tokens=False)["input_ids"] for g in golds]
    state = TrainerState.finished(cfg.train.steps)
    check_rewards(reward_fns, {**reward_inputs(problems[:4], golds, ids), "trainer_state": state},
                  f"{len(golds)} {split} rows with their gold answers as completions")
    engine = EmbeddedEngine(model, tokenizer, batch_size)
    progress.activate(Progress(0, interval_s=30.0))
    try:
        with progress.phase(f"evaluate {len(problems)} problems"):
            result = evaluate_problems(engine, tokenizer, problems, cfg.task, reward_fns,
                                       max_new_tokens=max_new_tokens, samples=samples, temperature=temperature,
                                       seed=seed, keep_answers=keep_answers, trainer_state=state,
                                       max_prompt_tokens=fit.limit)
    finally:
        progress.activate(None)
    return {"model": cfg.model.name, "task": cfg.task.name, "split": split, "max_new_tokens": max_new_tokens,
            **result}


def with_data_and_rewards(cfg: RunConfig, dataset: DatasetLike, eval_dataset: DatasetLike,
                          rewards: RewardLike | Sequence[RewardLike] | None,
                          reward_weights: Sequence[float] | None) -> RunConfig:
    """`cfg` reading `dataset` (and `eval_dataset` as its test split) and scored by `rewards`."""
    if dataset is not None:
        _use_dataset(cfg, dataset, eval_dataset)
    if rewards is not None:
        entries = [rewards] if isinstance(rewards, str) or callable(rewards) else list(rewards)
        cfg.task.reward = _reward_names(entries)
        cfg.task.reward_weights = None if reward_weights is None else [float(w) for w in reward_weights]
    elif reward_weights is not None:
        cfg.task.reward_weights = [float(w) for w in reward_weights]
    validate(cfg)
    return cfg


def _reward_names(entries: list[RewardLike]) -> list[str]:
    """Callables registered as `python:NAME` (replacing a previous call's, as a re-run notebook cell
    redefines its function); names and import paths as they are."""
    names: list[str] = []
    for entry in entries:
        if isinstance(entry, str):
            names.append(entry)
            continue
        if not callable(entry):
            raise ConfigError(f"rewards: {entry!r} is neither a reward name nor a callable")
        base = f"python:{getattr(entry, '__name__', type(entry).__name__).strip('<>')}"
        name = base if base not in names else next(f"{base}_{k}" for k in range(2, len(entries) + 2)
                                                    if f"{base}_{k}" not in names)
        register_reward(name, entry, replace=True)
        names.append(name)
    return names


def _rows(data: DatasetLike, what: str) -> list[dict[str, Any]]:
    if isinstance(data, Mapping):
        raise ConfigError(f"{what}: give the rows (a list of dicts or a datasets.Dataset), not a mapping")
    if hasattr(data, "to_list"):  # datasets.Dataset
        data = data.to_list()
    rows = list(data)
    if not rows:
        raise ConfigError(f"{what} has no rows")
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, Mapping)), None)
    if bad is not None:
        raise ConfigError(f"{what} row {bad}: each row must be a dict of columns, got {type(rows[bad]).__name__}")
    return [dict(row) for row in rows]


def _use_dataset(cfg: RunConfig, dataset: DatasetLike, eval_dataset: DatasetLike) -> None:
    from grpo.tasks.files import register_memory

    task = cfg.task
    task.name = "dataset"
    if isinstance(dataset, (str, Path)):
        path = Path(dataset).expanduser()
        if path.is_dir():
            task.path, task.train_files, task.test_files = str(path), [], []
        else:
            task.path, task.train_files = None, [str(path)]
            # Without eval_dataset the same file is evaluated, said at load, unless task.held_out draws from it.
            task.test_files = ([str(eval_dataset)] if eval_dataset is not None else [] if task.held_out
                               else [str(path)])
        return
    if isinstance(dataset, Mapping) and "train" in dataset:  # a DatasetDict or {"train": ..., "test": ...}
        dataset, eval_dataset = dataset["train"], dataset.get("test", eval_dataset)
    train_rows = _rows(dataset, "dataset")
    test_rows = _rows(eval_dataset, "eval_dataset") if eval_dataset is not None else train_rows
    # Named by content, so running the same cell again resumes the same run without a config change.
    digest = hashlib.sha1(json.dumps([train_rows, test_rows], sort_keys=True, default=str).encode()).hexdigest()
    task.path = register_memory(digest[:12], {"train": train_rows, "test": test_rows})
    task.train_files, task.test_files, task.train_split, task.test_split = [], [], "train", "test"
