"""`grpo watch PATH`: a guard beside a run that grpo does not train (AReaL, verl, TRL), or one it does.

It follows the run's files as they grow, judges the run again with the doctor's own readers, timeline
and cause whenever a new step arrives, and at the first problem prints the doctor's diagnosis, the
last good checkpoint and that framework's resume command; with `--pid` it also signals the trainer,
so the run stops there instead of going on for hundreds of steps.

A live run is judged as one that has not ended (`RunRecord.running`): a streak must reach its full
length, a dip in the latest steps is not yet a collapse. When the run says it ended (or the trainer
given by `--pid` exits), it is judged once more as the doctor judges a finished run.

Logs are followed by name (`Tail`): a log that does not exist yet is waited for, a rotated one is read
to its end and then the new file from its start, a truncated one from its new start (what was written
just before the truncation, from logrotate's copy when there is one), and a torn last line is held
until its newline arrives. Each poll reads only what is new and feeds it to the reader, which keeps
the run's record (not its lines), so a poll costs what was written since the last one plus one
judgement. Directories (a grpo run, a TRL output directory), TensorBoard event files, wandb runs and metrics
files (a CSV or JSON lines a trainer writes a row a step) are read again whole when one of their files changes (a
poll then costs one reading of them). A compressed log does not grow: it is read whole, as the doctor reads it.

Exit status, as the doctor's: 0 the run ended healthy (or the watch was interrupted on a healthy
run), 1 a problem, 2 nothing readable (permission denied, or the trainer exited before its files
showed a run the doctor knows).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grpo.tools.doctor import (
    areal,
    console_reader,
    grpo_run,
    judge,
    logreader,
    metricfiles,
    read,
    render,
    tensorboard,
    trl,
    verl,
    wandb_run,
)
from grpo.tools.doctor.compressed import is_compressed
from grpo.tools.doctor.logreader import LogReader
from grpo.tools.doctor.record import Diagnosis, RunRecord, UnreadableRun
from grpo.tools.doctor.textlog import CHUNK, LineSplitter, open_regular

TRAINER_EXIT_WAIT_S = 30.0  # after signalling the trainer, how long to wait to say it exited
MAX_CATCH_UP = 1 << 30  # what is read from logrotate's copy after a truncation


class Tail:
    """A growing text file, followed by its path: `poll` returns the complete lines added since the
    last poll (lines as editors count them, NULs dropped, each at most textlog.MAX_LINE long)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0  # lines read so far
        self.rotations = 0
        self.truncations = 0
        self._file = None
        self._splitter = LineSplitter()
        self._new: list[str] = []
        self._seen = b""  # the last bytes read: still there at the same place, or the file was rewritten

    @property
    def opened(self) -> bool:
        return self._file is not None or self.count > 0

    def poll(self) -> list[str]:
        """The lines added since the last poll (none while the file does not exist)."""
        self._new = []
        if self._file is None:
            self._open()
        if self._file is None:
            return []
        if self._rewritten():
            self._truncated()
        self._drain()
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None  # moved away and not replaced yet: the old file may still grow
        except OSError as exc:
            raise UnreadableRun(f"{self.path} cannot be read ({exc.strerror or exc})") from None
        held = os.fstat(self._file.fileno())
        if now is not None and (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev):
            self._close_rotated()
            self._open()
            if self._file is not None:
                self._drain()
        elif held.st_size < self._file.tell():
            self._truncated()
            self._drain()
        self.count += len(self._new)
        return self._new

    def _rewritten(self) -> bool:
        """Truncated in place and grown again past where it was read to (logrotate's copytruncate
        between two polls): the bytes last read are no longer where they were."""
        end = self._file.tell()
        if not self._seen or os.fstat(self._file.fileno()).st_size < end:
            return False
        return os.pread(self._file.fileno(), len(self._seen), end - len(self._seen)) != self._seen

    def _truncated(self) -> None:
        """Read what was written after the last poll and before the truncation from the copy (LOG.1,
        LOG-DATE: logrotate's names) whose bytes match where this file was read to; then this file
        from its start."""
        end = self._file.tell()
        for copy in sorted(self.path.parent.glob(self.path.name + "[.-]*"), key=_mtime, reverse=True)[:3]:
            try:
                with open_regular(copy) as f:
                    f.seek(max(0, end - len(self._seen)))
                    if self._seen and f.read(len(self._seen)) == self._seen:
                        self._take(f.read(MAX_CATCH_UP))
                        self._new += self._splitter.flush()  # the copy's torn last line, as it was left
                        break
            except (OSError, UnreadableRun):
                continue
        self.truncations += 1
        self._file.seek(0)
        self._splitter = LineSplitter()  # the torn line was cut off with the rest
        self._seen = b""

    def _open(self) -> None:
        try:
            self._file = open_regular(self.path)
        except UnreadableRun:
            if not os.path.lexists(self.path):
                self._file = None
                return
            raise

    def _drain(self) -> None:
        while True:
            data = self._file.read(CHUNK)
            if not data:
                return
            self._take(data)

    def _take(self, data: bytes) -> None:
        if data:
            self._seen = (self._seen + data[-64:])[-64:]
            self._new += self._splitter.feed(data)

    def _close_rotated(self) -> None:
        self._new += self._splitter.flush()  # the old file's last line, torn as it was left
        self._file.close()
        self._file = None
        self._seen = b""
        self.rotations += 1


class Follower:
    """One run's files, followed: `poll` says whether anything changed, `record` reads the run."""

    kind: str  # what PATH is, in words

    def poll(self) -> bool:
        raise NotImplementedError

    def record(self, final: bool = False) -> RunRecord:
        """The run as read so far; final: no more will come (its trainer exited)."""
        raise NotImplementedError


class LogFollower(Follower):
    """A console log (AReaL's trainer.log with its llm_server.log, verl's, TRL's, Open-Reasoner-Zero's,
    prime-rl's, or one of any framework that has shown no step yet): each poll's new lines fed to its reader."""

    def __init__(self, kind: str, log: Path, reader: LogReader, server_log: Path | None = None):
        self.kind, self.log, self.reader = kind, log, reader
        self.tail = Tail(log)
        self.server_tail = Tail(server_log) if server_log is not None else None
        self.server = None

    def poll(self) -> bool:
        lines = self.tail.poll()
        self.reader.feed_all(lines)
        changed = bool(lines)
        if self.server_tail is not None:
            server_lines = self.server_tail.poll()
            if server_lines:
                if self.server is None:
                    self.server = self.reader.follow_server(self.server_tail.path)
                self.server.feed_all(server_lines)
                changed = True
        return changed

    def record(self, final: bool = False) -> RunRecord:
        return self.reader.result(final)


class DirectoryFollower(Follower):
    """A run read again by the doctor whenever one of its files changed: a grpo run directory or a TRL output
    directory (its files, one folder down: checkpoints, and a TRL's runs/ event files), TensorBoard event files, a
    wandb run (its datastore and captured console). `files` lists what is looked at."""

    def __init__(self, kind: str, root: Path, files: Callable[[Path], list[Path]] | None = None) -> None:
        self.kind, self.root = kind, root
        self.files = files or _tree
        self._seen: frozenset = frozenset()

    def poll(self) -> bool:
        now = frozenset(_stats(self.files(self.root)))
        changed, self._seen = now != self._seen, now
        return changed

    def record(self, final: bool = False) -> RunRecord:
        return read(self.root)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _tree(root: Path) -> list[Path]:
    """root's entries and its folders' entries."""
    return [entry for folder in [root] + sorted(p for p in _entries(root) if p.is_dir()) for entry in _entries(folder)]


def _trl_files(root: Path) -> list[Path]:
    return _tree(root) + tensorboard.find_event_files(root / "runs")


def _wandb_files(root: Path) -> list[Path]:
    """The latest run's datastore and console (a later run's directory appearing is a change too)."""
    run = wandb_run.find_run(root)
    if run is None:
        return []
    store = wandb_run.datastore(run)
    return [run, run / wandb_run.CONSOLE] + ([store] if store is not None else [])


def _stats(paths: list[Path]) -> list[tuple[str, int, int]]:
    found = []
    for entry in paths:
        try:
            stat = entry.stat()
        except OSError:
            continue
        found.append((str(entry), stat.st_size, stat.st_mtime_ns))
    return found


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UnreadableRun(f"{folder} cannot be listed ({exc.strerror or exc}): check its permissions") from None


TRL_DIRECTORY = ("a TRL output directory (judged at each checkpoint it saves, and at each step its runs/ event "
                 "files log)")


def identify(path: Path) -> Follower | None:
    """The follower for PATH, or None while it does not exist or shows nothing the doctor knows yet."""
    if wandb_run.find_run(path) is not None:
        return DirectoryFollower("a wandb run (its history read again as it grows)", path, _wandb_files)
    if path.is_dir():
        if grpo_run.is_run_dir(path):
            return DirectoryFollower("a grpo run directory", path)
        log = areal.find_trainer_log(path)
        if log is not None:
            return _areal(log)
        log = verl.find_log(path)
        if log is not None:
            return LogFollower(f"a verl console log ({log.name})", log, verl.VerlReader(log))
        log = trl.find_log(path)
        if log is not None:
            return LogFollower(f"a TRL console log ({log.name})", log, trl.TrlLogReader(log))
        if trl.find_root(path) is not None:
            return DirectoryFollower(TRL_DIRECTORY, path, _trl_files)
        if tensorboard.find_event_files(path):
            return DirectoryFollower("TensorBoard event files (read again as they grow)", path,
                                     tensorboard.find_event_files)
        if metricfiles.find(path):  # with the console log beside them, read as the doctor reads the folder
            return DirectoryFollower("metrics files (read again as they grow)", path)
        found = logreader.find_console_log(path)
        return _console(*found) if found is not None else None
    if path.is_file() or (path.exists() and not path.is_dir()):
        if path.name == trl.STATE:
            return DirectoryFollower(TRL_DIRECTORY, path.parent, _trl_files)
        if tensorboard.is_event_file(path):
            return DirectoryFollower("a TensorBoard event file (read again as it grows)", path, lambda file: [file])
        if metricfiles.is_metrics_file(path):
            return DirectoryFollower("a metrics file (read again as it grows)", path, lambda file: [file])
        if is_compressed(path):
            return DirectoryFollower("a compressed log (it does not grow: read whole)", path, lambda file: [file])
        if areal.find_trainer_log(path) is not None:
            return _areal(path)
        if verl.looks_like_verl(path):
            return LogFollower("a verl console log", path, verl.VerlReader(path))
        if trl.looks_like_log(path):
            return LogFollower("a TRL console log", path, trl.TrlLogReader(path))
        found = logreader.find_console_log(path)
        return _console(*found) if found is not None else None
    return None


def _console(log: Path, source: str) -> LogFollower:
    """A log known by the framework it names (or by its crash): read by that framework's reader, which takes
    the steps when they come (Open-Reasoner-Zero's and prime-rl's logs are only known so)."""
    if source == "areal":
        return _areal(log)
    return LogFollower(f"a {source} console log ({log.name})", log, console_reader(log, source))


def _areal(log: Path) -> LogFollower:
    return LogFollower(f"an AReaL trainer log ({log.name}, with {areal.SERVER_LOG} beside it)", log,
                       areal.ArealReader(log), log.parent / areal.SERVER_LOG)


@dataclass(frozen=True)
class Trainer:
    """The process `--pid` names, pinned by its start time: the watch signals that process alone, and
    not a process that took its pid after it exited."""

    pid: int
    started: str | None  # /proc/PID/stat's start time (clock ticks since boot); None where /proc is absent

    @classmethod
    def of(cls, pid: int) -> "Trainer":
        """Raises ValueError (one line) for a pid that is not one trainer process: 0, 1 and negative pids
        name process groups, init or every process; the watch's own and its parent's are never the trainer."""
        if pid <= 0:
            raise ValueError(f"--pid {pid} names a process group (or every process), not a trainer: give the "
                             "trainer's own process id, a positive number")
        if pid == 1:
            raise ValueError("--pid 1 is init, not a trainer: give the trainer's own process id")
        if pid in (os.getpid(), os.getppid()):
            raise ValueError(f"--pid {pid} is this watch (or the shell that started it), not the trainer")
        if not alive(pid):
            raise ValueError(f"no process {pid} is running: give --pid the trainer's process id")
        return cls(pid, _start_time(pid))

    def alive(self) -> bool:
        """Running, and still the process it was when the watch began."""
        return alive(self.pid) and _start_time(self.pid) == self.started

    def signal(self, sig: signal.Signals) -> None:
        """Raises ProcessLookupError when the process is gone or its pid now belongs to another one."""
        if not self.alive():
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)  # a positive pid: that process alone, never a group


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class Watch:
    """What `grpo watch` was asked to do, and what it has seen."""

    path: Path
    trainer: Trainer | None = None
    stop_signal: signal.Signals = signal.SIGTERM
    interval_s: float = 10.0
    say: Callable[[str], None] = print
    follower: Follower | None = None
    last_step: int | None = None
    diagnosis: Diagnosis | None = None
    record: RunRecord | None = field(default=None, repr=False)
    noted: set[str] = field(default_factory=set)  # notes on the run already said

    @property
    def pid(self) -> int | None:
        return self.trainer.pid if self.trainer is not None else None

    def run(self) -> int:
        self.say(f"watching {self.path} every {self.interval_s:g} s"
                 + (f"; the trainer is pid {self.pid} ({self.stop_signal.name} at the first problem)" if self.pid
                    else ""))
        waiting_said = False
        while True:
            trainer_gone = self.trainer is not None and not self.trainer.alive()
            if self.follower is None:
                self.follower = identify(self.path)
                if self.follower is not None:
                    self.say(f"{self.path} is {self.follower.kind}")
                elif not waiting_said:
                    self.say(f"waiting for {self.path} to show a run's first step")
                    waiting_said = True
            if self.follower is not None and (self.follower.poll() or trainer_gone):
                if trainer_gone:
                    self.say(f"the trainer (pid {self.pid}) exited")
                status = self._judge(ended=trainer_gone)
                if status is not None:
                    return status
            if trainer_gone:  # and its files never showed a run
                raise UnreadableRun(f"the trainer (pid {self.pid}) exited and {self.path} never showed a run the "
                                    "doctor knows")
            time.sleep(self.interval_s)

    def interrupted(self) -> int:
        """Ctrl-C: where the run stands."""
        if self.diagnosis is None:
            self.say("stopped watching before the run's first step")
            return 0
        self.say(f"stopped watching at step {self.last_step}: {self.diagnosis.explanation}")
        return 0 if self.diagnosis.status == "healthy" else 1

    def _judge(self, ended: bool) -> int | None:
        """Judge the run as it stands; -> the exit status when the watch is over, else None."""
        record = self.follower.record(final=ended)
        ended = ended or record.finished
        if record.source != "grpo":  # a grpo run says itself whether a trainer holds it
            record.running = not ended
        diagnosis = judge(record)
        self.record, self.diagnosis = record, diagnosis
        for note in record.notes:  # e.g. buffered output: steps placed between the progress bar's
            if note not in self.noted:
                self.noted.add(note)
                self.say(f"note: {note}")
        steps = record.steps()
        if diagnosis.status == "problem":
            self.say("\n".join(render(diagnosis, record)))
            if self.pid is not None and not ended:
                self._stop_trainer()
            return 1
        if ended:
            self.say(f"the run ended: {diagnosis.explanation}")
            return 0
        if steps and steps[-1] != self.last_step:
            self.last_step = steps[-1]
            self.say(f"step {steps[-1]}" + (f" of {record.total_steps}" if record.total_steps else "")
                     + ": no problem")
        return None

    def _stop_trainer(self) -> None:
        try:
            self.trainer.signal(self.stop_signal)
        except ProcessLookupError:
            self.say(f"the trainer (pid {self.pid}) had already exited")
            return
        except PermissionError:
            self.say(f"could not signal the trainer (pid {self.pid}): permission denied; stop it yourself")
            return
        self.say(f"sent {self.stop_signal.name} to the trainer (pid {self.pid})")
        deadline = time.monotonic() + TRAINER_EXIT_WAIT_S
        while time.monotonic() < deadline:
            if not self.trainer.alive():
                self.say(f"the trainer (pid {self.pid}) exited")
                return
            time.sleep(0.1)
        self.say(f"the trainer (pid {self.pid}) is still running {TRAINER_EXIT_WAIT_S:.0f} s after "
                 f"{self.stop_signal.name}; stop it with: kill -KILL {self.pid}")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: kill(0) said it exists
    return state != "Z"


def parse_signal(name: str) -> signal.Signals:
    """TERM, SIGTERM, term or 15."""
    text = name.strip().upper()
    try:
        return signal.Signals(int(text)) if text.isdigit() else signal.Signals[text if text.startswith("SIG")
                                                                                 else "SIG" + text]
    except (KeyError, ValueError):
        raise ValueError(f"--signal {name} is not a signal: give a name like TERM, INT or KILL, or a number") from None
