"""An AReaL run: `trainer.log`, and `llm_server.log` beside it when there is one.

The trainer's StatsLogger prints, per step,

    20251111-11:37:11.251 StatsLogger INFO: Epoch 2/5 Step 5/935 Train step 940/4675 done.

and then the step's stats as a tabulate "fancy_grid" table, four key/value pairs to a row
(`│ grpo_actor/task_reward/avg │ 0.0000e+00 │ ... │`). Errors from the rollout client (connection
refused, server disconnected, timeouts) land in the same log between steps: they belong to the step
after the last one printed. The SGLang server's own log has wall-clock stamps; its failures are
placed at the step whose "done" line came first after them. Checkpoints are directories named
`epoch{E}epochstep{S}globalstep{G}`; G counts from 0, so one holds the state after `Train step G+1`.

A step's table is taken once it is whole (its bottom border, or the next step's line): a watch that
polls between its rows must not judge half a table. Lines may carry launchers' prefixes (`docker
logs -t`, Kubernetes) and colours: `textlog.clean` takes them off first.
"""

from __future__ import annotations

import bisect
import os
import re
from pathlib import Path

from grpo.tools.doctor.logreader import LogReader
from grpo.tools.doctor.record import (
    ACCURACY,
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
from grpo.tools.doctor.textlog import as_step, clean, iter_lines, number, read_ends, timestamp

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
    ("no_eos_ratios/avg", TRUNCATED), ("zero_std_ratio", ZERO_VARIANCE),
)
_EVAL_KEYS = ("eval-rollout/task_reward/avg", "eval-rollout/reward")  # held-out: never the training reward
_TIMING = re.compile(r"^timeperf/(.+)$")
# What in a trainer log says the inference server could not be reached (so rollouts failed).
UNREACHABLE = re.compile(r"connection refused|ConnectionRefusedError|ClientConnectorError|Cannot connect to host|"
                         r"ServerDisconnectedError|RemoteDisconnected|Connection reset by peer|"
                         r"No healthy SGLang servers|Connect call failed", re.IGNORECASE)
ROLLOUT_ERROR = re.compile(r"Failed after \d+ retries|request timed out|TimeoutError|rollout .{0,200}failed", re.IGNORECASE)
# What in a server log says the server died.
SERVER_DEATH = re.compile(r"out of memory|OutOfMemoryError|Scheduler hit an exception|Received sigquit|"
                          r"^Killed\b|Segmentation fault|core dumped|oom-kill|exited with (?:code|status) [1-9]",
                          re.IGNORECASE)
OOM = re.compile(r"out of memory|OutOfMemoryError|oom-kill", re.IGNORECASE)
RESTART = re.compile(r"recover(?:ing)? from|resum(?:e|ing) from|Loaded recover info", re.IGNORECASE)
_RESUMED_AT = re.compile(r"(?:resuming|resume) from step (\d+)", re.IGNORECASE)
# Words one of UNREACHABLE, ROLLOUT_ERROR, NONFINITE or RESTART needs: most lines have none and skip them.
_HINTS = ("onnect", "efused", "isconnect", "eset by peer", "ealthy", "ailed", "imed out", "imeout", "nan", "NaN",
          "inf", "finite", "ecover", "esum")
NONFINITE = re.compile(r"\b(?:nan|inf) (?:loss|grad)|loss is nan|non-finite|grad_norm is (?:nan|inf)", re.IGNORECASE)


def find_trainer_log(path: Path) -> Path | None:
    """AReaL's trainer.log, or any log file that shows AReaL's steps (a `docker logs` capture)."""
    if path.is_file() and _looks_like_areal(path):
        return path
    if path.is_dir():
        direct = path / TRAINER_LOG
        if direct.is_file() and _looks_like_areal(direct):
            return direct
    return None


def _looks_like_areal(path: Path) -> bool:
    text = read_ends(path)
    return bool(_DONE.search(text) or "StatsLogger" in text or "RemoteSGLangEngine" in text)


class ArealReader(LogReader):
    source = "areal"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.step_ends: list[tuple[float, int]] = []  # (time the step was printed done, step)
        self.previous_done: float | None = None
        self.table: list[tuple[str, Evidence]] = []  # the rows of the current step's table so far
        self.server: ServerScanner | None = None

    def line(self, number_: int, line: str) -> None:
        record = self.record
        stripped = line.lstrip()
        if stripped.startswith(("│", "|")) and self.current:
            self.table.append((stripped, Evidence(str(self.path), number_, stripped.strip()[:300])))
            return
        if stripped.startswith(("╘", "+=", "+-")) and self.table:
            self._take_table()
            return
        stamp = timestamp(line)
        done = _DONE.search(line) if "Train step" in line else None
        if done:
            self._take_table()
            step, total = as_step(int(done.group(1)[:12])), as_step(int(done.group(2)[:12]))
            if step is None:
                return
            evidence = Evidence(str(self.path), number_, line.strip()[:300])
            if step <= self.current:
                record.restart(Mark(step, "restart", f"the step count went back from {self.current} to {step} "
                                         "(the trainer restarted)", evidence))
            self.current, record.total_steps = step, total
            record.evidence_by_step[step] = evidence
            if stamp is not None:
                self.step_ends.append((stamp, step))
                if self.previous_done is not None and stamp > self.previous_done:
                    record.put(step, STEP_S, stamp - self.previous_done)
                self.previous_done = stamp
            return
        evidence = Evidence(str(self.path), number_, line.strip()[:300])
        if any(hint in line for hint in _HINTS):
            self._event(line, evidence)
        memory = _MEMORY.search(line)
        if memory and self.current:
            value = number(memory.group(1))
            if value is not None:
                record.put(self.current, MEMORY_GIB, value)
        if "globalstep" in line:
            for match in _CHECKPOINT.finditer(line):
                if "sav" in line.lower():
                    _add_checkpoint(record, match, line)
        if "Training completes" in line or "training completes" in line:
            record.finished = True

    def _event(self, line: str, evidence: Evidence) -> None:
        """A line that may say the server could not be reached, a rollout failed, a NaN, or a resume."""
        record, text = self.record, line.strip()[:200]
        if UNREACHABLE.search(line):
            record.marks.append(Mark(self.current + 1, "server_unreachable", text, evidence))
        elif ROLLOUT_ERROR.search(line):
            record.marks.append(Mark(self.current + 1, "rollout_error", text, evidence))
        elif NONFINITE.search(line):
            record.marks.append(Mark(self.current + 1, "nonfinite", text, evidence))
        elif RESTART.search(line):
            resumed = _RESUMED_AT.search(line)
            record.restart(Mark(int(resumed.group(1)[:12]) if resumed else self.current + 1, "restart", text,
                                evidence))

    def _take_table(self) -> None:
        for row, evidence in self.table:
            _table_row(self.record, self.current, row, evidence)
        self.table = []

    def follow_server(self, server_log: Path) -> "ServerScanner":
        self.server = ServerScanner(server_log)
        return self.server

    def finish(self, final: bool) -> None:
        record = self.record
        record.marks = [m for m in record.marks if m.kind not in ("server_failure", "server_log")
                        or m.evidence is None or m.evidence.file != str(self.server.path if self.server else "")]
        if self.server is not None:
            record.marks += self.server.marks(self.step_ends, max(record.steps(), default=0))
        _scan_checkpoint_dirs(record, self.path.parent)


def read_record(trainer_log: Path, lines=None, server_lines=None) -> RunRecord:
    """`lines`, `server_lines`: the two logs' lines, when the caller has them (a test)."""
    reader = ArealReader(trainer_log)
    reader.feed_all(iter_lines(trainer_log) if lines is None else lines)
    server_log = trainer_log.parent / SERVER_LOG
    if server_lines is not None or server_log.is_file():
        server = reader.follow_server(server_log)
        server.feed_all(iter_lines(server_log) if server_lines is None else server_lines)
    return reader.result()


def _table_row(record: RunRecord, step: int, line: str, evidence: Evidence) -> None:
    cells = [c.strip() for c in re.split(r"[│|]", line)[1:-1]]
    for key, text in zip(cells[0::2], cells[1::2]):
        value = number(text)
        if key and value is not None:
            put_stat(record, step, key, value, evidence)


def knows(key: str) -> bool:
    """A training stat's name as AReaL's StatsLogger logs it (its actor's name first, e.g. grpo_actor/)."""
    return "eval" not in key and any(key == suffix or key.endswith("/" + suffix) for suffix, _ in _KEYS)


def put_stat(record: RunRecord, step: int, key: str, value: float, evidence: Evidence) -> None:
    """One of AReaL's stats, named as its StatsLogger writes it to the table, TensorBoard and wandb, under its
    canonical name (the first key of a name wins: task_reward before rollout/reward)."""
    timing = _TIMING.match(key)
    if timing:
        record.put(step, PHASE_PREFIX + timing.group(1), value)
        return
    if key.startswith(_EVAL_KEYS) or any(key.endswith("/" + k) for k in _EVAL_KEYS):
        record.put(step, EVAL_ACCURACY, value)
        return
    if "eval" in key:
        return
    for suffix, name in _KEYS:
        if key == suffix or key.endswith("/" + suffix):
            if name not in record.metrics.get(step, {}):
                record.put(step, name, value)
                if name == REWARD:
                    record.evidence_by_step[step] = evidence
            break


class ServerScanner:
    """llm_server.log, fed line by line: the lines that say the server died, with the time before them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.line_no = 0
        self.last_time: float | None = None
        self.deaths: list[tuple[float | None, Evidence]] = []

    def feed(self, raw: str) -> None:
        self.line_no += 1
        line = clean(raw)
        stamp = timestamp(line)
        if stamp is not None:
            self.last_time = stamp
        if SERVER_DEATH.search(line) and len(self.deaths) < 1000:
            self.deaths.append((self.last_time, Evidence(str(self.path), self.line_no, line.strip()[:300])))

    def feed_all(self, lines) -> "ServerScanner":
        for raw in lines:
            self.feed(raw)
        return self

    def marks(self, step_ends: list[tuple[float, int]], last_step: int) -> list[Mark]:
        return _server_marks(self.deaths, step_ends, last_step)


def _server_marks(found: list[tuple[float | None, Evidence]], step_ends: list[tuple[float, int]],
                  last_step: int) -> list[Mark]:
    """One server_failure mark per step the server's log shows it dying in (the step whose "done" line
    came first after the death); its detail and evidence the most telling line (an OOM over a generic
    exception)."""
    ends = sorted(step_ends)
    times = [t for t, _ in ends]
    deaths: dict[int, list[Evidence]] = {}
    for when, evidence in found:
        if when is None:
            step = last_step + 1
        else:
            at = bisect.bisect_left(times, when)
            step = ends[at][1] if at < len(ends) else (ends[-1][1] + 1 if ends else 1)
        deaths.setdefault(step, []).append(evidence)
    marks = []
    for step, lines in sorted(deaths.items()):
        oom = [e for e in lines if OOM.search(e.text)]
        telling = (oom or lines)[0]
        what = "died of CUDA out of memory" if oom else "died"
        marks.append(Mark(step, "server_failure", f"the inference server {what}: {telling.text[:160]}", telling))
        marks += [Mark(step, "server_log", other.text[:200], other) for other in lines if other is not telling]
    return marks


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
