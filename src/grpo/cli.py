"""The `grpo` command: train, quickstart, eval, config show, export, doctor, health."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grpo import progress
from grpo.config import TaskConfig, load_config
from grpo.console import alert, say
from grpo.console import setup as setup_console
from grpo.errors import ConfigError, DiskError, RunDirLocked, exit_status, one_line
from grpo.progress import Progress
from grpo.rundir.files import atomic_write


def _eval(args: argparse.Namespace) -> int:
    from grpo.config import ModelConfig
    from grpo.rollout.engines.embedded import EmbeddedEngine
    from grpo.evaluate import evaluate, format_table
    from grpo.policy.models import load_model_and_tokenizer, resolve_device
    from grpo.rewards import get_reward
    from grpo.tasks import build_task

    for flag in ("max_samples", "samples", "max_new_tokens", "batch_size"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be at least 1; got {value}")
    if args.temperature < 0:
        raise ConfigError(f"--temperature must be 0 or more; got {args.temperature}")
    cfg = load_config(args.config, args.overrides)
    task_cfg: TaskConfig = cfg.task
    task_cfg.name = args.task or task_cfg.name
    task = build_task(task_cfg)  # data errors before the model is loaded
    if args.split == "train":
        problems = [task.train_problem(i, cfg.train.seed) for i in range(args.max_samples or task.num_train or 500)]
    else:
        problems = task.eval_problems(args.max_samples)
    if not problems:
        raise ConfigError(f"task {task_cfg.name} has no {args.split} problems to evaluate")
    model_cfg = ModelConfig(name=args.model, dtype=args.dtype, device=args.device)
    setup_console()
    device = resolve_device(model_cfg.device)
    model, tokenizer = load_model_and_tokenizer(model_cfg, device)
    engine = EmbeddedEngine(model, tokenizer, args.batch_size)
    progress.activate(Progress(0, interval_s=30.0))
    with progress.phase(f"evaluate {len(problems)} problems"):
        result = evaluate(engine, tokenizer, problems, task_cfg, get_reward(cfg.eval.reward or task_cfg.reward),
                          max_new_tokens=args.max_new_tokens, samples=args.samples, temperature=args.temperature,
                          seed=args.seed, keep_answers=bool(args.output))
    progress.activate(None)
    answers = result.pop("answers", None)
    result = {"model": args.model, "task": task_cfg.name, "split": args.split, **result}
    say(format_table({k: v for k, v in result.items() if not isinstance(v, str)},
                     f"{args.model} on {task_cfg.name}/{args.split}"))
    say(json.dumps(result))
    if args.output:  # the summary and every answer, to see what the model wrote
        atomic_write(Path(args.output), json.dumps({**result, "answers": answers}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpo", description="GRPO post-training that never fails silently.")
    parser.add_argument("--version", action="version", version=f"grpo {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train with a config file and dotted overrides (actor.lr=1e-6)")
    train.add_argument("--config", help="YAML file or preset name (quickstart, tiny, gsm8k/fast, ...)")
    train.add_argument("--run-dir", help="where config, metrics, checkpoints and logs go (same as run_dir=...)")
    train.add_argument("overrides", nargs="*", help="dotted.key=value; resume_from=CHECKPOINT_DIR resumes from one")
    train.add_argument("--launcher", choices=["ray"], help="start the ranks elsewhere: ray (Ray actors in a "
                                                          "placement group; torchrun needs no flag)")
    train.add_argument("--nproc", type=int, default=1, help="with --launcher: the number of trainer ranks")
    train.add_argument("--ray-address", help="with --launcher ray: the cluster (default: RAY_ADDRESS, else a "
                                             "local one)")
    train.add_argument("--max-restarts", type=int, default=3, help="with --launcher: group restarts after a rank "
                                                                   "is lost")

    quick = sub.add_parser("quickstart", help="GRPO on SmolLM2-135M-Instruct, arithmetic, CPU; accuracy before/after")
    quick.add_argument("--run-dir")
    quick.add_argument("overrides", nargs="*")

    ev = sub.add_parser("eval", help="held-out accuracy of a model: greedy, plus pass@k / maj@k when --samples > 1")
    ev.add_argument("--model", required=True, help="hub name, local directory, checkpoint model dir or short name")
    ev.add_argument("--task", choices=["gsm8k", "arith", "dataset"])
    ev.add_argument("--split", choices=["test", "train"], default="test")
    ev.add_argument("--max-samples", type=int, default=None)
    ev.add_argument("--samples", type=int, default=1)
    ev.add_argument("--temperature", type=float, default=1.0)
    ev.add_argument("--max-new-tokens", type=int, default=256)
    ev.add_argument("--batch-size", type=int, default=64)
    ev.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ev.add_argument("--device", default="auto")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--config", help="config whose task section (prompt, data path, arith knobs) to use")
    ev.add_argument("--output", help="also write the result and every answer (question, gold, completion, "
                                     "reward, status) to this JSON file")
    ev.add_argument("overrides", nargs="*", help="dotted overrides of the task section, e.g. task.path=...")

    config = sub.add_parser("config", help="grpo config show [--config X] [overrides]")
    show = config.add_subparsers(dest="config_command", required=True).add_parser(
        "show", help="the resolved config with every key's default and meaning (a valid --config file)")
    show.add_argument("--config", help="YAML file or preset name")
    show.add_argument("overrides", nargs="*")

    exp = sub.add_parser("export", help="write a checkpoint's model where users load it; --merged: LoRA merged in")
    exp.add_argument("--checkpoint", required=True, help="a checkpoint directory (RUN_DIR/checkpoints/step_NNNNNN)")
    exp.add_argument("--out", required=True, help="a new directory to write")
    exp.add_argument("--merged", action="store_true", help="merge a LoRA adapter into its base: a plain model")

    doc = sub.add_parser("doctor", help="explain a run after the fact: status, failures, trips, how to resume")
    doc.add_argument("run_dir")

    health = sub.add_parser("health", help="is a run healthy now: servers generating, versions, memory, disk; "
                                           "exit 0 when healthy, 1 when not")
    health.add_argument("run_dir", nargs="?", help="default: the most recently active run under ./runs")

    args = parser.parse_args(argv)
    if args.command in ("train", "quickstart") and args.run_dir:
        args.overrides = [*args.overrides, f"run_dir={args.run_dir}"]
    if args.command == "train" and args.launcher == "ray":
        from grpo.launch.ray import launch

        return launch(args.config, args.overrides, args.nproc, args.ray_address, args.max_restarts)
    if args.command in ("train", "quickstart"):
        from grpo.entry import run

        return run(args.config if args.command == "train" else "quickstart", args.overrides)
    try:
        if args.command == "config":
            from grpo.config_doc import render

            print(render(load_config(args.config, args.overrides)), end="")
            return 0
        if args.command == "health":
            from grpo.health import check, find_run

            lines, healthy = check(find_run(args.run_dir))
            print("\n".join(lines))
            return 0 if healthy else 1  # 1: unhealthy
        if args.command == "export":
            from grpo.export import export_checkpoint

            print(export_checkpoint(Path(args.checkpoint), Path(args.out), args.merged))
            return 0
        if args.command == "doctor":
            from grpo.doctor import diagnose

            print("\n".join(diagnose(Path(args.run_dir))))
            return 0
        return _eval(args)
    except (ConfigError, RunDirLocked, FileNotFoundError, DiskError) as exc:
        alert(one_line(exc))
        return exit_status(exc)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("grpo")
    except PackageNotFoundError:
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
