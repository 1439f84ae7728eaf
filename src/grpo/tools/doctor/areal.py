"""An AReaL run: `trainer.log`, and `llm_server.log` beside it when there is one.

The trainer's StatsLogger prints, per step,

    20251111-11:37:11.251 StatsLogger INFO: Epoch 2/5 Step 5/935 Train step 940/4675 done.

and then the step's stats as a tabulate "fancy_grid" table, four key/value pairs to a row
(`│ grpo_actor/task_reward/avg │ 0.0000e+00 │ ... │`). Errors from the rollout client (connection
refused, server disconnected, timeouts) land in the same log between steps: they belong to the step
after the last one printed. The SGLang server's own log has wall-clock stamps; its failures are
placed at the step whose "done" line came first after them. Checkpoints are directories named
`epoch{E}epochstep{S}globalstep{G}`; G counts from 0, so one holds the state after `Train step G+1`.
"""

from __future__ import annotations

import bisect
import os
import re
from pathlib import Path

from grpo.tools.doctor.record import (ACCURACY, ENTROPY, EVAL_ACCURACY, GRAD_NORM, KL, LENGTH, LOSS, MEMORY_GIB,
                                PHASE_PREFIX, REWARD, REWARD_STD, STEP_S, TRUNCATED, ZERO_STD, Checkpoint, Evidence,
                                Mark, RunRecord)
from grpo.tools.doctor.textlog import number, read_head, read_lines, timestamp

TRAINER_LOG = "trainer.log"
SERVER_LOG = "llm_server.log"
_DONE = re.compile(r"Train step (\d+)/(\d+) done")
_CHECKPOINT = re.compile(r"epoch(\d+)epochstep(\d+)globalstep(\d+)")
_MEMORY = re.compile(r"(?:memory reserved|device memory used)[^:]*:\s*([\d.]+)", re.IGNORECASE)
# Key suffixes of AReaL's stats -> canonical names (the prefix is the actor's name, e.g. grpo_actor/).
_KEYS = (
    ("task_reward/avg", REWARD), ("task_reward/std", REWARD_STD), ("rollout/reward", REWARD),
    ("correct_ratio/avg", ACCURACY), ("actor_loss/avg", LOSS), ("kl_rewards/avg", KL), ("approx_kl/avg", KL),
    ("entropy/avg", ENTROPY), ("grad_norm", GRAD_NORM), ("response_length/avg", LENGTH), ("seq_len/avg", LENGTH),
    ("no_eos_ratios/avg", TRUNCATED), ("zero_std_ratio", ZERO_STD), ("eval-rollout/task_reward/avg", EVAL_ACCURACY),
)
_TIMING = re.compile(r"^timeperf/(.+)$")
# What in a trainer log says the inference server could not be reached (so rollouts failed).
UNREACHABLE = re.compile(r"connection refused|ConnectionRefusedError|ClientConnectorError|Cannot connect to host|"
                         r"ServerDisconnectedError|RemoteDisconnected|Connection reset by peer|"
                         r"No healthy SGLang servers|Connect call failed", re.IGNORECASE)
ROLLOUT_ERROR = re.compile(r"Failed after \d+ retries|request timed out|TimeoutError|rollout .*failed", re.IGNORECASE)
# What in a server log says the server died.
SERVER_DEATH = re.compile(r"out of memory|OutOfMemoryError|Scheduler hit an exception|Received sigquit|"
                          r"^Killed\b|Segmentation fault|core dumped|oom-kill|exited with (?:code|status) [1-9]",
                          re.IGNORECASE)
OOM = re.compile(r"out of memory|OutOfMemoryError|oom-kill", re.IGNORECASE)
RESTART = re.compile(r"recover(?:ing)? from|resum(?:e|ing) from|Loaded recover info", re.IGNORECASE)
NONFINITE = re.compile(r"\b(?:nan|inf) (?:loss|grad)|loss is nan|non-finite|grad_norm is (?:nan|inf)", re.IGNORECASE)


def find_trainer_log(path: Path) -> Path | None:
    if path.is_file() and path.name.endswith(".log") and _looks_like_areal(path):
        return path
    if path.is_dir():
        direct = path / TRAINER_LOG
        if direct.is_file() and _looks_like_areal(direct):
            return direct
    return None


def _looks_like_areal(path: Path) -> bool:
    head = read_head(path, 1 << 20)
    return bool(_DONE.search(head) or "StatsLogger" in head or "RemoteSGLangEngine" in head)


def read_record(trainer_log: Path, lines: list[str] | None = None, server_lines: list[str] | None = None) -> RunRecord:
    """`lines`, `server_lines`: the two logs' lines, when the caller has read them already (a watcher
    that follows them as they grow)."""
    record = RunRecord("areal", str(trainer_log))
    lines = read_lines(trainer_log) if lines is None else lines
    step_ends: list[tuple[float, int]] = []  # (time the step was printed done, step)
    current = 0  # the last step printed done
    previous_done: float | None = None
    for number_, line in enumerate(lines, 1):
        stamp = timestamp(line)
        done = _DONE.search(line)
        if done:
            step, total = int(done.group(1)), int(done.group(2))
            if step <= current:
                record.marks.append(Mark(step, "restart", f"the step count went back from {current} to {step} "
                                         "(the trainer restarted)", Evidence(str(trainer_log), number_, line.strip())))
            current, record.total_steps = step, total
            record.evidence_by_step[step] = Evidence(str(trainer_log), number_, line.strip())
            if stamp is not None:
                step_ends.append((stamp, step))
                if previous_done is not None and stamp > previous_done:
                    record.put(step, STEP_S, stamp - previous_done)
                previous_done = stamp
            continue
        if line.startswith(("│", "|")) and current:
            _table_row(record, current, line, Evidence(str(trainer_log), number_, line.strip()))
            continue
        evidence = Evidence(str(trainer_log), number_, line.strip()[:300])
        if UNREACHABLE.search(line):
            record.marks.append(Mark(current + 1, "server_unreachable", line.strip()[:200], evidence))
        elif ROLLOUT_ERROR.search(line):
            record.marks.append(Mark(current + 1, "rollout_error", line.strip()[:200], evidence))
        elif NONFINITE.search(line):
            record.marks.append(Mark(current + 1, "nonfinite", line.strip()[:200], evidence))
        elif RESTART.search(line):
            record.marks.append(Mark(current + 1, "restart", line.strip()[:200], evidence))
        memory = _MEMORY.search(line)
        if memory and current:
            record.put(current, MEMORY_GIB, float(memory.group(1)))
        for match in _CHECKPOINT.finditer(line):
            if "sav" in line.lower():
                _add_checkpoint(record, match, line)
        if "Training completes" in line or "training completes" in line:
            record.finished = True
    server_log = trainer_log.parent / SERVER_LOG
    if server_lines is not None or server_log.is_file():
        _server_marks(record, server_log, step_ends, read_lines(server_log) if server_lines is None else server_lines)
    _scan_checkpoint_dirs(record, trainer_log.parent)
    return record


def _table_row(record: RunRecord, step: int, line: str, evidence: Evidence) -> None:
    cells = [c.strip() for c in re.split(r"[│|]", line)[1:-1]]
    for key, text in zip(cells[0::2], cells[1::2]):
        value = number(text)
        if not key or value is None:
            continue
        timing = _TIMING.match(key)
        if timing:
            record.put(step, PHASE_PREFIX + timing.group(1), value)
            continue
        for suffix, name in _KEYS:
            if key == suffix or key.endswith("/" + suffix):
                if name == EVAL_ACCURACY or name not in record.metrics.get(step, {}):
                    record.put(step, name, value)
                    if name == REWARD:
                        record.evidence_by_step[step] = evidence
                break


def _server_marks(record: RunRecord, server_log: Path, step_ends: list[tuple[float, int]], lines: list[str]) -> None:
    """One server_failure mark per step the server's log shows it dying in; its detail and evidence
    the most telling line (an OOM over a generic exception)."""
    ends = sorted(step_ends)
    times = [t for t, _ in ends]
    last_time: float | None = None
    last_step = max(record.metrics) if record.metrics else 0
    deaths: dict[int, list[Evidence]] = {}
    for number_, line in enumerate(lines, 1):
        stamp = timestamp(line)
        if stamp is not None:
            last_time = stamp
        if not SERVER_DEATH.search(line):
            continue
        if last_time is None:
            step = last_step + 1
        else:
            at = bisect.bisect_left(times, last_time)  # the first step printed done after the failure
            step = ends[at][1] if at < len(ends) else (ends[-1][1] + 1 if ends else 1)
        deaths.setdefault(step, []).append(Evidence(str(server_log), number_, line.strip()[:300]))
    for step, lines in sorted(deaths.items()):
        oom = [e for e in lines if OOM.search(e.text)]
        telling = (oom or lines)[0]
        what = "died of CUDA out of memory" if oom else "died"
        record.marks.append(Mark(step, "server_failure", f"the inference server {what}: {telling.text[:160]}", telling))
        for other in lines:
            if other is not telling:
                record.marks.append(Mark(step, "server_log", other.text[:200], other))


def _add_checkpoint(record: RunRecord, match: re.Match, text: str) -> None:
    step = int(match.group(3)) + 1
    if all(c.step != step for c in record.checkpoints):
        path = text[text.find("/"):].split()[0] if "/" in text else match.group(0)
        record.checkpoints.append(Checkpoint(step, path.rstrip(".,'\"")))
        record.checkpoints.sort(key=lambda c: c.step)


def _scan_checkpoint_dirs(record: RunRecord, root: Path) -> None:
    """Checkpoint directories under the log's directory (AReaL nests them six deep: checkpoints/
    USER/EXPERIMENT/TRIAL/NAME/epoch...); found on disk, they replace the paths the log printed."""
    base = len(root.parts)
    for dirpath, dirnames, _ in os.walk(root, onerror=lambda exc: None):
        here = Path(dirpath)
        if len(here.parts) - base >= 7:
            dirnames.clear()
            continue
        for name in list(dirnames):
            match = _CHECKPOINT.fullmatch(name)
            if match:
                dirnames.remove(name)  # nothing to find inside a checkpoint
                step = int(match.group(3)) + 1
                record.checkpoints = [c for c in record.checkpoints if c.step != step]
                record.checkpoints.append(Checkpoint(step, str(here / name)))
    record.checkpoints.sort(key=lambda c: c.step)
