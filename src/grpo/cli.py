"""The `grpo` command: train, quickstart, eval, plan, config show, export, doctor, watch, report, health."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

from grpo.config import load_config
from grpo.console import alert, say
from grpo.console import setup as setup_console
from grpo.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    START_INTERRUPTED,
    ConfigError,
    DiskError,
    RunDirLocked,
    exit_status,
    one_line,
)
from grpo.rundir.files import atomic_write

DEFAULT_EVAL_TOKENS = 256  # grpo eval's answer budget when neither a flag nor the config sets one


# What `grpo eval` reads from a config; any other key given on its command line is refused, never ignored.
EVAL_KEYS = ("task.", "eval.reward", "eval.max_new_tokens", "eval.max_samples", "eval.batch_size",
             "rollout.max_new_tokens", "model.dtype", "model.device", "model.attn_implementation", "model.tiny.",
             "train.seed")


def _given_keys(config: str | None, overrides: list[str]) -> set[str]:
    """The dotted keys the config file and the overrides set (not those left at their defaults)."""
    from grpo.config import apply_override, read_yaml_config, resolve_config_path

    data = read_yaml_config(resolve_config_path(config)) or {} if config else {}
    for override in overrides:
        apply_override(data, override)

    def flat(tree: dict, prefix: str = "") -> set[str]:
        keys: set[str] = set()
        for key, value in tree.items():
            keys |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}"}
        return keys

    return flat(data)


def _eval(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from grpo.api import run_evaluation
    from grpo.evaluate import EvaluationFailed, format_table

    for flag in ("max_samples", "samples", "max_new_tokens", "batch_size"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be at least 1; got {value}")
    if args.temperature < 0:
        raise ConfigError(f"--temperature must be 0 or more; got {args.temperature}")
    cfg = load_config(args.config, args.overrides)
    unused = sorted(k for k in _given_keys(None, args.overrides) if not k.startswith(EVAL_KEYS))
    if unused:
        raise ConfigError(f"grpo eval does not use {unused[0]}; it reads task.*, eval.reward, eval.max_new_tokens, "
                          "eval.max_samples, eval.batch_size, rollout.max_new_tokens, model.dtype, model.device, "
                          "model.tiny.* and train.seed (the order of --split train); the model is --model")
    given = _given_keys(args.config, args.overrides)
    output = Path(args.output) if args.output else None
    if output is not None:  # made (and checked) now, not after the whole evaluation
        if output.is_dir():
            raise ConfigError(f"--output {output} is a directory; give a file name, e.g. {output / 'eval.json'}")
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--output {output}: cannot make its folder ({exc.strerror or exc})") from None
        if not os.access(output.parent, os.W_OK):
            raise ConfigError(f"--output {output}: its folder {output.parent} is not writable")
    cfg.task.name = args.task or cfg.task.name
    cfg.model = replace(cfg.model, name=args.model, dtype=args.dtype or cfg.model.dtype,
                        device=args.device or cfg.model.device)
    max_new_tokens = (args.max_new_tokens or cfg.eval.max_new_tokens
                      or (cfg.rollout.max_new_tokens if "rollout.max_new_tokens" in given else DEFAULT_EVAL_TOKENS))
    max_samples = args.max_samples or (cfg.eval.max_samples if "eval.max_samples" in given else None)
    setup_console()
    try:
        with _interrupts_as_keyboard_interrupt():
                result = run_evaluation(cfg, split=args.split, max_samples=max_samples, samples=args.samples,
                                    temperature=args.temperature, max_new_tokens=max_new_tokens,
                                    batch_size=args.batch_size or cfg.eval.batch_size, seed=args.seed,
                                    keep_answers=output is not None)
    except KeyboardInterrupt:  # nothing to save: an evaluation is rerun, not resumed
        alert("grpo eval interrupted: no accuracy is reported; run the same command again")
        return EXIT_INTERRUPTED
    except EvaluationFailed as exc:  # answers the engine never produced: no accuracy, rather than a false one
        alert(f"evaluation failed: {exc}; no accuracy is reported")
        return EXIT_STOPPED
    answers = result.pop("answers", None)
    if output is not None:  # the summary and every answer, to see what the model wrote
        atomic_write(output, json.dumps({**result, "answers": answers}, indent=2))
        say(f"every answer is in {output}")
    say(format_table(result, f"{args.model} on {cfg.task.name}/{args.split}"))
    say(json.dumps(result))
    return 0


@contextlib.contextmanager
def _interrupts_as_keyboard_interrupt():
    """SIGTERM ends an evaluation as Ctrl-C does (train's signals save state; eval has none to save)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _plan(config: str | None, overrides: list[str]) -> int:
    from grpo.config import split_overrides
    from grpo.tools.plan import (
        architecture,
        available_memory,
        context_verdict,
        device_kind,
        gpu_total,
        plan_memory,
        prompt_tokens,
        render,
        server_verdict,
        suggestion,
    )

    cfg = load_config(config, split_overrides(overrides)[0])
    device = device_kind(cfg)
    arch, prompt_len = architecture(cfg), prompt_tokens(cfg)
    plan = plan_memory(cfg, device, arch, prompt_len)
    available = available_memory(cfg, device)
    lines = render(plan, available)
    fits = plan.peak_bytes <= available.bytes
    if not fits:
        lines.append(suggestion(cfg, plan, available.bytes, device, gpu_total() if device == "cuda" else None))
    cache_lines, refused = server_verdict(cfg, device, arch, prompt_len, plan, available)
    lines += cache_lines + ([refused] if refused else [])
    context = context_verdict(cfg)
    lines += [context] if context else []
    _print("\n".join(lines))
    return 0 if fits and not refused and not (context or "").startswith("warning") else 1


def _doctor(path: Path, as_json: bool) -> int:
    from grpo.tools.doctor import UnreadableRun, explain

    try:
        diagnosis, lines = explain(path)
    except UnreadableRun as exc:
        alert(f"error: {exc}")
        return EXIT_BAD_INPUT
    _print(json.dumps(diagnosis.to_json(), indent=2) if as_json else "\n".join(lines))
    return 0 if diagnosis.status == "healthy" else 1


def _watch(args: argparse.Namespace) -> int:
    from grpo.tools.doctor import UnreadableRun
    from grpo.tools.watch import Trainer, Watch, parse_signal

    if args.interval <= 0:
        raise ConfigError(f"--interval must be more than 0 seconds; got {args.interval}")
    try:
        stop_signal = parse_signal(args.signal)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        trainer = Trainer.of(args.pid) if args.pid is not None else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    watch = Watch(Path(args.path), trainer=trainer, stop_signal=stop_signal, interval_s=args.interval, say=_print)
    try:
        return watch.run()
    except UnreadableRun as exc:
        alert(f"error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return watch.interrupted()


def _print(text: str) -> None:
    """Print, and let a reader that stopped early (`grpo doctor RUN | head`) go without a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _report(path: Path, out: str | None) -> int:
    from grpo.tools.doctor import UnreadableRun
    from grpo.tools.report import ReportError, write_report

    try:
        written = write_report(path, Path(out) if out else None)
    except (UnreadableRun, ReportError) as exc:
        alert(f"error: {exc}")
        return EXIT_BAD_INPUT
    _print(str(written))
    return 0


def console() -> NoReturn:
    """The `grpo` command, `python -m grpo` and `torchrun -m grpo`: main's status as the process's. Ctrl-C
    while the command still imports (torch and transformers take seconds) is one line, not a traceback."""
    from grpo.dist import exit_process

    try:
        status = main()
    except KeyboardInterrupt:
        alert(START_INTERRUPTED)
        status = EXIT_INTERRUPTED
    exit_process(status)


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
    train.add_argument("--ray-strategy", choices=["PACK", "SPREAD"], default="PACK",
                       help="with --launcher ray: the placement group's strategy: PACK (as few nodes as possible) "
                            "or SPREAD (bundles dealt over the nodes in turn: with as many ranks as servers on two "
                            "nodes, each node a rank and its server)")
    train.add_argument("--max-restarts", type=int, default=3, help="with --launcher: group restarts after a rank "
                                                                   "is lost")

    quick = sub.add_parser("quickstart", help="GRPO on SmolLM2-135M-Instruct, arithmetic, CPU; accuracy before/after")
    quick.add_argument("--run-dir")
    quick.add_argument("overrides", nargs="*")

    ev = sub.add_parser("eval", help="held-out accuracy of a model: greedy, plus pass@k / maj@k when --samples > 1")
    ev.add_argument("--model", required=True, help="hub name, local directory, checkpoint model dir or short name")
    ev.add_argument("--task", choices=["gsm8k", "arith", "dataset"])
    ev.add_argument("--split", choices=["test", "train"], default="test")
    ev.add_argument("--max-samples", type=int, default=None, help="the first N problems of the split (default: "
                                                                    "eval.max_samples if the config sets it, else all)")
    ev.add_argument("--samples", type=int, default=1)
    ev.add_argument("--temperature", type=float, default=1.0)
    ev.add_argument("--max-new-tokens", type=int, default=None,
                    help="the answer budget (default: eval.max_new_tokens, else rollout.max_new_tokens if the config "
                         f"sets it, else {DEFAULT_EVAL_TOKENS})")
    ev.add_argument("--batch-size", type=int, default=None, help="rows per generation batch (default: "
                                                                   "eval.batch_size)")
    ev.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
                    help="default: model.dtype (auto: the precision this device multiplies faster)")
    ev.add_argument("--device", default=None, help="default: model.device (auto)")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--config", help="config whose task section (prompt, data path, arith knobs) to use")
    ev.add_argument("--output", help="also write one JSON object to this file: the figures, and under "
                                     "\"answers\" one entry per problem (question, gold, the greedy completion, "
                                     "reward, status, correct, scored) with, for --samples K, its K \"samples\" "
                                     "(completion, reward, status, correct, vote) and their \"majority\"")
    ev.add_argument("overrides", nargs="*", help="dotted overrides, e.g. task.path=... task.reward=math "
                                                 "eval.max_new_tokens=512 (keys eval does not use are refused)")

    plan = sub.add_parser("plan", help="the peak memory a run will need, by phase (load, generation, update), "
                                       "predicted from the model's config before anything loads, and a started "
                                       "server's KV cache; exit 1 when it does not fit or the cache cannot work")
    plan.add_argument("--config", help="YAML file or preset name")
    plan.add_argument("overrides", nargs="*", help="dotted.key=value, as for grpo train")

    config = sub.add_parser("config", help="grpo config show [--config X] [overrides]")
    show = config.add_subparsers(dest="config_command", required=True).add_parser(
        "show", help="the resolved config with every key's default and meaning (a valid --config file)")
    show.add_argument("--config", help="YAML file or preset name")
    show.add_argument("overrides", nargs="*")

    exp = sub.add_parser("export", help="write a checkpoint's model where users load it; --merged: LoRA merged in")
    exp.add_argument("--checkpoint", required=True, help="a checkpoint directory (RUN_DIR/checkpoints/step_NNNNNN)")
    exp.add_argument("--out", required=True, help="a new directory to write")
    exp.add_argument("--merged", action="store_true", help="merge a LoRA adapter into its base: a plain model")

    doc = sub.add_parser("doctor", help="explain a run after the fact (grpo, AReaL, verl, TRL, any framework's "
                                        "step log; TensorBoard, wandb): cause, first bad "
                                        "step, evidence, last good checkpoint; exit 0 healthy, 1 a problem, 2 unreadable")
    doc.add_argument("run_dir", help="a grpo run directory, an AReaL trainer.log (or its directory), a verl console "
                                     "log, a TRL output directory / checkpoint-N, another framework's console log "
                                     "that prints steps with their metrics, a TensorBoard log directory, or a "
                                     "wandb run directory (wandb/ for its latest run)")
    doc.add_argument("--json", action="store_true", help="print the diagnosis as one JSON object")

    watch = sub.add_parser("watch", help="guard a live run (grpo, AReaL, verl, TRL, others) as it grows: at the first "
                                         "problem print the diagnosis, the last good checkpoint and the resume "
                                         "command, and with --pid stop the trainer; exit 0 ended healthy, 1 a "
                                         "problem, 2 unreadable")
    watch.add_argument("path", help="what grpo doctor reads: a grpo run directory, an AReaL trainer.log (or its "
                                    "directory), a verl console log, a TRL console log or output directory, a "
                                    "TensorBoard log directory or a wandb run directory; it may not exist yet")
    watch.add_argument("--pid", type=int, help="the trainer's process id: signalled at the first problem")
    watch.add_argument("--signal", default="TERM", help="the signal --pid gets (default TERM)")
    watch.add_argument("--interval", type=float, default=10.0, help="seconds between looks at the files "
                                                                    "(default 10)")

    rep = sub.add_parser("report", help="one self-contained HTML file (works offline) with a run's curves, its "
                                        "events marked, and the doctor's diagnosis at the top")
    rep.add_argument("run_dir", help="any PATH grpo doctor reads")
    rep.add_argument("--out", help="the HTML file to write (default: RUN_DIR/report.html for a grpo run, else "
                                   "./<name>-report.html)")

    health_exits = ("0 healthy (every server serving), 1 unhealthy (a problem: a server gone, given up on, "
                    "not generating, serving old weights, starting past its startup timeout or failed with no "
                    "restart left; the trainer stopped, crashed or stuck; too little disk), 2 not a run directory, "
                    "3 not serving yet (a server starting within its startup timeout, or failed and to be "
                    "restarted, and nothing else wrong)")
    health = sub.add_parser("health", help=f"is a run healthy now: servers generating, versions, memory, disk; "
                                           f"exit {health_exits}", description=f"Is a run healthy now: the trainer, "
                            f"its servers generating and the weights they serve, memory, disk. Exit status "
                            f"{health_exits}.")
    health.add_argument("run_dir", nargs="?", help="default: the most recently active run under ./runs")

    args, extra = parser.parse_known_args(argv)
    if hasattr(args, "overrides") and any(word.startswith("--") for word in extra):
        # OpenRLHF's and ms-swift's `--flag value` words become `flag=value` overrides, which the config loader
        # answers; ms-swift's command words (`swift rlhf`) pasted before them are left out.
        from grpo.config.foreign_names import flag_overrides
        from grpo.config.openrlhf_names import OPENRLHF
        from grpo.config.swift_names import SWIFT

        translated = flag_overrides((OPENRLHF, SWIFT), sys.argv[1:] if argv is None else argv, extra)
        if translated is not None:
            args, extra = parser.parse_known_args(translated[0])
            extra = [*extra, *translated[1]]
    # Overrides after an option (`--nproc 2 actor.lr=1`) are overrides still, checked like the others.
    strays = [e for e in extra if e.startswith("-") or "=" not in e or not hasattr(args, "overrides")]
    if strays:
        parser.error(f"unrecognized arguments: {' '.join(strays)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    if args.command in ("train", "quickstart") and args.run_dir:
        args.overrides = [*args.overrides, f"run_dir={args.run_dir}"]
    if args.command == "train" and args.launcher == "ray":
        from grpo.launch.ray import launch

        return launch(args.config, args.overrides, args.nproc, args.ray_address, args.max_restarts, args.ray_strategy)
    if args.command in ("train", "quickstart"):
        from grpo.entry import run

        return run(args.config if args.command == "train" else "quickstart", args.overrides)
    try:
        if args.command == "config":
            from grpo.config.doc import render

            print(render(load_config(args.config, args.overrides)), end="")
            return 0
        if args.command == "plan":
            return _plan(args.config, args.overrides)
        if args.command == "health":
            from grpo.tools.health import check, find_run

            lines, status = check(find_run(args.run_dir))
            print("\n".join(lines))
            return status
        if args.command == "export":
            from grpo.tools.export import export_checkpoint

            print(export_checkpoint(Path(args.checkpoint), Path(args.out), args.merged))
            return 0
        if args.command == "doctor":
            return _doctor(Path(args.run_dir), args.json)
        if args.command == "report":
            return _report(Path(args.run_dir), args.out)
        if args.command == "watch":
            return _watch(args)
        return _eval(args)
    except (ConfigError, RunDirLocked, FileNotFoundError, PermissionError, DiskError) as exc:
        alert(one_line(exc))
        return exit_status(exc)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("grpo")
    except PackageNotFoundError:
        return "unknown (not installed)"


if __name__ == "__main__":
    console()
