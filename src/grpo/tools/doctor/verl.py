"""A verl console log: its trainer prints one line per step,

    (TaskRunner pid=2231) step:12 - global_seqlen/mean:81234.000 - critic/score/mean:0.412 - ...

(`(main_task pid=N)` in releases before 0.3; values plain, or as pformat prints them:
`np.float64(0.49)`), checkpoint saves naming `global_step_N` (the state after step N), Ray's and
vLLM's errors in between. Lines from other processes interleave and the last line may be torn: a
line is read only as far as it parses. A step line with validation metrics only (`step:0 -
val-core/...`, before training) is an evaluation, not a training step; a resume line (`Load from
checkpoint folder: .../global_step_40`) starts a new attempt at the step after the one it loads.

A Ray actor's death is the inference server's failure unless it died in its creation task (it never
started). An out-of-memory line is the inference server's failure only when it comes from the rollout: the
engine's frames or the rollout's worker method (`generate_sequences`, vLLM's `wake_up`, the KV cache)
are the nearest role named before it in its traceback. The training side (`update_actor`,
`compute_log_prob`, `backward`) runs in the same Ray workers: its OOM is left to the crash it ends in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from grpo.tools.doctor.logreader import LogReader
from grpo.tools.doctor.record import (
    ACCURACY,
    CRITIC_GRAD_NORM,
    CRITIC_LOSS,
    ENTROPY,
    EVAL_ACCURACY,
    GRAD_NORM,
    KL,
    LENGTH,
    LOSS,
    MEMORY_GIB,
    PHASE_PREFIX,
    REWARD,
    REWARD_STD,
    STEP_S,
    TRUNCATED,
    ZERO_VARIANCE,
    Checkpoint,
    Evidence,
    Mark,
    RunRecord,
)
from grpo.tools.doctor.textlog import as_step, clean, log_suffix, number, read_ends

_STEP = re.compile(r"(?:^|[\s)])step:(\d+) - (.*)$")
_CHECKPOINT = re.compile(r"global_step_(\d+)")
_PROGRESS = re.compile(r"Training Progress:.*?\|\s*(\d+)/(\d+)")
_KEYS = {
    "critic/score/mean": REWARD, "critic/rewards/mean": REWARD, "critic/score/std": REWARD_STD,
    "actor/pg_loss": LOSS, "actor/kl_loss": KL, "critic/kl": KL, "actor/entropy": ENTROPY,
    "actor/grad_norm": GRAD_NORM, "critic/vf_loss": CRITIC_LOSS, "critic/grad_norm": CRITIC_GRAD_NORM,
    "response_length/mean": LENGTH, "response_length/clip_ratio": TRUNCATED,
    "timing_s/step": STEP_S, "perf/max_memory_allocated_gb": MEMORY_GIB, "critic/score/zero_std_frac": ZERO_VARIANCE,
    "critic/accuracy/mean": ACCURACY,
}
_PHASES = {"timing_s/gen": "generate", "timing_s/reward": "reward", "timing_s/old_log_prob": "old_log_prob",
           "timing_s/ref": "ref", "timing_s/adv": "advantages", "timing_s/update_actor": "update",
           "timing_s/update_weights": "sync", "timing_s/save_checkpoint": "checkpoint", "timing_s/testing": "eval"}
INFRA = re.compile(r"ActorDiedError|RayActorError|EngineDeadError|EngineCore.{0,200}(?:died|failed)|"
                   r"node .{0,200} (?:dead|died)|raylet .{0,200}died|Connection refused|The actor died", re.IGNORECASE)
OOM = re.compile(r"out of memory|OutOfMemoryError|OOM[- ]kill|killed by the memory monitor", re.IGNORECASE)
RESTART = re.compile(r"Load from checkpoint folder|Resuming from|resume from .{0,300}global_step", re.IGNORECASE)
# Words one of INFRA, OOM or RESTART needs: a line without any is not matched against them (most lines).
_HINTS = ("rror", "died", "dead", "efused", "emory", "OOM", "oom", "esum", "checkpoint")
# One search for any of them: cheaper than a test per hint on every line.
_HINT = re.compile("|".join(map(re.escape, _HINTS)))
# Ray's explanation of an actor's death lists the OOM killer among its possible causes: not evidence of one.
_MAYBE = "potential root causes"
# An actor that died in its creation task never started (its worker could not set up: no GPU, an import):
# not an inference server dying under a run; its traceback says why.
_NEVER_STARTED = "creation task"
# Which side of a colocated worker a traceback's line names: the rollout engine, or the training update.
ROLLOUT_SIDE = re.compile(r"vllm|sglang|generate_sequences|wake_up|KV cache|cache blocks|EngineCore", re.IGNORECASE)
TRAINING_SIDE = re.compile(r"update_actor|update_policy|update_critic|compute_(?:ref_)?log_prob|compute_values|"
                           r"backward|optimizer|dp_actor|dp_critic|ppo_update")
# What opens a traceback (Python's header, Ray's remote-task header): the side named before it is forgotten.
_TRACEBACK_START = re.compile(r"Traceback \(most recent call last\)|ray::\S+\(\) \(pid=")


def looks_like_verl(path: Path) -> bool:
    """A step line in the log's first or last megabytes: however the log ends (a checkpoint save, a
    traceback, Ray's shutdown lines, a torn line) and however much start-up output came first."""
    return any(_STEP.search(clean(line)) for line in read_ends(path).splitlines() if "step:" in line)


_LOG_ORDER = {".log": 0, ".txt": 1, ".out": 2}  # which of a directory's files is verl's log, first


def find_log(path: Path) -> Path | None:
    if path.is_file():
        return path if looks_like_verl(path) else None
    if path.is_dir():
        for candidate in sorted(path.iterdir(), key=lambda p: (_LOG_ORDER.get(log_suffix(p), 3), p.name)):
            if log_suffix(candidate) not in _LOG_ORDER:
                continue
            if candidate.is_file() and looks_like_verl(candidate):
                return candidate
    return None


class VerlReader(LogReader):
    source = "verl"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.side: str | None = None  # "rollout" or "training": the nearest side the current traceback named

    def line(self, number_: int, line: str) -> None:
        record = self.record
        evidence = None
        self._follow_side(line)
        if "step:" in line:
            match = _STEP.search(line)
            if match and as_step(int(match.group(1)[:12])) is not None:
                step = int(match.group(1)[:12])
                evidence = Evidence(str(self.path), number_, line.strip()[:300])
                values, trained = _pairs(record, match.group(2))
                if trained and step <= self.current:
                    record.restart(Mark(step, "restart", f"the step count went back from {self.current} to "
                                             f"{step}", evidence))
                for name, value in values.items():
                    record.put(step, name, value)
                if not trained:
                    return  # validation only (step:0 before training, or a test_freq step's extra line)
                self.current = step
                record.evidence_by_step[step] = evidence
                self.side = None
                return
        if _HINT.search(line) and _MAYBE not in line and _NEVER_STARTED not in line and (
                INFRA.search(line) or (OOM.search(line) and self.side == "rollout")):
            evidence = Evidence(str(self.path), number_, line.strip()[:300])
            record.marks.append(Mark(self.current + 1, "server_failure", line.strip()[:200], evidence))
        elif _HINT.search(line) and RESTART.search(line):
            evidence = Evidence(str(self.path), number_, line.strip()[:300])
            loaded = _CHECKPOINT.search(line)
            step = int(loaded.group(1)[:12]) + 1 if loaded else self.current + 1
            record.restart(Mark(step, "restart", f"resumed from the checkpoint of step {step - 1}" if loaded
                                     else line.strip()[:200], evidence))
            self.current = step - 1 if loaded else self.current
            return
        if "global_step_" in line:
            checkpoint = _CHECKPOINT.search(line)
            lower = line.lower()
            if checkpoint and ("sav" in lower or "folder" in lower) and "load" not in lower:
                step = int(checkpoint.group(1)[:12])
                start = max(line.rfind(" ", 0, checkpoint.start()), line.rfind(":", 0, checkpoint.start())) + 1
                path = line[start:checkpoint.end()].strip("'\",")
                if all(c.step != step for c in record.checkpoints):
                    record.checkpoints.append(Checkpoint(step, path))
        if "Training Progress:" in line:
            bar = _PROGRESS.search(line)
            if bar:
                record.progress = max(record.progress, int(bar.group(1)[:12]))
                record.total_steps = record.total_steps or as_step(int(bar.group(2)[:12]))
        if "Final validation metrics" in line or "Training Progress: 100%" in line:
            record.finished = True

    def _follow_side(self, line: str) -> None:
        if 'File "' not in line and "ray::" not in line and "Traceback" not in line \
                and not _HINT.search(line):
            return  # most lines: neither a frame, a traceback's header nor an error
        if ("Traceback" in line or "ray::" in line) and _TRACEBACK_START.search(line):
            self.side = None
        if ROLLOUT_SIDE.search(line):
            self.side = "rollout"
        elif TRAINING_SIDE.search(line):
            self.side = "training"

    def finish(self, final: bool) -> None:
        record = self.record
        for path in _checkpoint_dirs(self.path.parent):
            step = int(path.name.rsplit("_", 1)[1])
            record.checkpoints = [c for c in record.checkpoints if c.step != step] + [Checkpoint(step, str(path))]
        record.checkpoints.sort(key=lambda c: c.step)


def read_record(log: Path, lines=None) -> RunRecord:
    return VerlReader.read(log, lines)


def _pairs(record: RunRecord, text: str) -> tuple[dict[str, float], bool]:
    """A step line's metrics under canonical names, and whether it held a training metric."""
    pairs = []
    for pair in text.split(" - "):
        key, sep, value_text = pair.partition(":")
        value = number(value_text) if sep else None
        if value is not None:
            pairs.append((key.strip(), value))
    return metrics_of(record, pairs)


def knows(key: str) -> bool:
    """A training metric's name as verl logs it."""
    return key in _KEYS


def metrics_of(record: RunRecord, pairs: Iterable[tuple[str, float]]) -> tuple[dict[str, float], bool]:
    """verl's metrics, named as every logger of its writes them (console, TensorBoard, wandb), under canonical
    names, and whether one was a training metric (not only validation ones); a total step count sets the run's."""
    values: dict[str, float] = {}
    trained = False
    for key, value in pairs:
        if key in _KEYS:
            values[_KEYS[key]] = value
            trained = True
        elif key in _PHASES:
            values[PHASE_PREFIX + _PHASES[key]] = value
        elif key.startswith("val-core/") and "mean@1" in key:
            values[EVAL_ACCURACY] = value
        elif key == "training/total_steps" or key == "trainer/total_training_steps":
            record.total_steps = as_step(value) or record.total_steps
    return values, trained


def _checkpoint_dirs(root: Path) -> list[Path]:
    found = []
    for depth in ("global_step_*", "*/global_step_*", "*/*/global_step_*", "*/*/*/global_step_*"):
        try:
            found += [p for p in root.glob(depth) if p.is_dir() and p.name.rsplit("_", 1)[1].isdigit()]
        except OSError:
            break
    return found
