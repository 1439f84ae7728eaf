"""`grpo train | eval | quickstart`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from grpo.rundir.files import DiskError, atomic_write
from grpo.rundir.lock import RunDirLocked

from grpo.config import ConfigError, TaskConfig, load_config
from grpo import progress
from grpo.console import alert, say
from grpo.progress import Progress
from grpo.console import setup as setup_console

# Exit statuses: each outcome its own, so a scheduler or script can tell them apart.
EXIT_CRASH = 1  # an unexpected error (Python's own status for an uncaught exception)
EXIT_BAD_INPUT = 2  # config, data, model path or run directory refused before any work
EXIT_STOPPED = 3  # the guard stopped the run: STOPPED.json says why and how to resume
EXIT_INTERRUPTED = 4  # SIGTERM/SIGINT: state saved; the same command resumes
EXIT_DISK = 5  # the disk refused a write (full, read-only): free space, then the same command resumes


def _train(config: str | None, overrides: list[str], run_dir: str | None) -> int:
    from grpo.dist import from_environment
    from grpo.guard.recovery import RunStopped, resume_command
    from grpo.policy.models import resolve_device
    from grpo.loop import RunInterrupted, TrainingLoop
    from grpo.rundir.run import RunDir

    if run_dir:
        overrides = [*overrides, f"run_dir={run_dir}"]
    resume_from = None
    kept = []
    for override in overrides:  # resume_from is a run action, not part of the saved config
        if override.startswith("resume_from="):
            resume_from = override.split("=", 1)[1]
        else:
            kept.append(override)
    cfg = load_config(config, kept)
    ranks = from_environment(resolve_device(cfg.model.device, int(os.environ.get("LOCAL_RANK", "0"))))
    # The lock comes first: a second trainer on this directory must not even open its log. Under
    # torchrun, rank 0 holds it and writes the run directory.
    run = RunDir(cfg.resolved_run_dir, cfg.checkpoint, writes=ranks.main).acquire()
    setup_console(run.path if ranks.main else None, quiet=not ranks.main)
    try:
        summary = TrainingLoop(cfg, resume_from=resume_from, run=run, ranks=ranks).train()
    except RunStopped as stop:
        alert(f"\nSTOPPED: {stop}")
        return EXIT_STOPPED
    except RunInterrupted as interrupted:
        alert(f"\n{interrupted}")
        return EXIT_INTERRUPTED
    except (ConfigError, DiskError, FileNotFoundError):
        raise
    except Exception as exc:  # a bug or an unexpected failure: the traceback goes to train.log too
        logging.getLogger("grpo").exception("the run crashed")
        alert(f"\ncrashed: {type(exc).__name__}: {exc}\nthe traceback is in {run.path / 'train.log'}; "
              f"resume from the newest checkpoint with: {resume_command(run.path, None)}")
        return EXIT_CRASH
    before, after = summary.get("before"), summary.get("after")
    if before and after:
        say(f"\nheld-out greedy accuracy on {after['n']} problems: "
            f"{before['accuracy']:.1%} before -> {after['accuracy']:.1%} after "
            f"({100 * (after['accuracy'] - before['accuracy']):+.1f} points)")
    say(f"run directory: {cfg.resolved_run_dir}")
    return 0


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


def _doctor(path: Path, as_json: bool) -> int:
    from grpo.doctor import UnreadableRun, explain

    try:
        diagnosis, lines = explain(path)
    except UnreadableRun as exc:
        alert(f"error: {exc}")
        return EXIT_BAD_INPUT
    _print(json.dumps(diagnosis.to_json(), indent=2) if as_json else "\n".join(lines))
    return 0 if diagnosis.status == "healthy" else 1


def _print(text: str) -> None:
    """Print, and let a reader that stopped early (`grpo doctor RUN | head`) go without a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _report(path: Path, out: str | None) -> int:
    from grpo.doctor import UnreadableRun
    from grpo.report import ReportError, write_report

    try:
        written = write_report(path, Path(out) if out else None)
    except (UnreadableRun, ReportError) as exc:
        alert(f"error: {exc}")
        return EXIT_BAD_INPUT
    _print(str(written))
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

    doc = sub.add_parser("doctor", help="explain a run after the fact (grpo, AReaL, verl, TRL): cause, first bad "
                                        "step, evidence, last good checkpoint; exit 0 healthy, 1 a problem, 2 unreadable")
    doc.add_argument("run_dir", help="a grpo run directory, an AReaL trainer.log (or its directory), a verl console "
                                     "log, or a TRL output directory / checkpoint-N")
    doc.add_argument("--json", action="store_true", help="print the diagnosis as one JSON object")

    rep = sub.add_parser("report", help="one self-contained HTML file (works offline) with a run's curves, its "
                                        "events marked, and the doctor's diagnosis at the top")
    rep.add_argument("run_dir", help="any PATH grpo doctor reads")
    rep.add_argument("--out", help="the HTML file to write (default: RUN_DIR/report.html for a grpo run, else "
                                   "./<name>-report.html)")

    health = sub.add_parser("health", help="is a run healthy now: servers generating, versions, memory, disk; "
                                           "exit 0 when healthy, 1 when not")
    health.add_argument("run_dir", nargs="?", help="default: the most recently active run under ./runs")

    args = parser.parse_args(argv)
    try:
        if args.command == "train" and args.launcher == "ray":
            from grpo.launch.ray import launch

            overrides = [*args.overrides, *([f"run_dir={args.run_dir}"] if args.run_dir else [])]
            return launch(args.config, overrides, args.nproc, args.ray_address, args.max_restarts)
        if args.command == "train":
            return _train(args.config, args.overrides, args.run_dir)
        if args.command == "quickstart":
            return _train("quickstart", args.overrides, args.run_dir)
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
            return _doctor(Path(args.run_dir), args.json)
        if args.command == "report":
            return _report(Path(args.run_dir), args.out)
        return _eval(args)
    except ConfigError as exc:
        alert(f"config error: {exc}")
        return EXIT_BAD_INPUT
    except RunDirLocked as exc:
        alert(f"error: {exc}")
        return EXIT_BAD_INPUT
    except FileNotFoundError as exc:
        alert(f"error: {exc}")
        return EXIT_BAD_INPUT
    except DiskError as exc:
        alert(f"disk error: {exc}. Checkpoints already saved are intact: free space, then run the same "
              "command again to resume.")
        return EXIT_DISK


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("grpo")
    except PackageNotFoundError:
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
