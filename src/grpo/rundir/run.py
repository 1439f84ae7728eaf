"""The run directory as a small database: one writer, files that are whole or repaired, and a record
of what it did to get there.

    RUN_DIR/
      .lock              held by the one process writing this directory
      config.yaml        resolved config, written (atomically) only once a start has succeeded
      metrics.jsonl      one line per step; eval.jsonl every evaluation; samples.jsonl sample texts
      *.abandoned.jsonl  log lines of steps a resume or a rollback replays (cut from the logs above, kept here)
      events.jsonl       what happened: trips, rollbacks, restarts, interruptions, repairs, stops
      STOPPED.json       why the guard stopped the run, and how to resume
      summary.json       the result of a finished run
      checkpoints/       see grpo.rundir.checkpoints
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from grpo.config import CheckpointConfig
from grpo.errors import ConfigError
from grpo.rundir.checkpoints import CheckpointStore
from grpo.rundir.events import EventLog
from grpo.rundir.files import JsonlLog, atomic_write
from grpo.rundir.lock import RunLock

RESERVE_FILE = ".reserve"
RESERVE_BYTES = 1 << 20  # freed on a full disk, so the crash event and stop report can still be written
LOGS = ("metrics.jsonl", "eval.jsonl", "samples.jsonl")


class RunDir:
    def __init__(self, path: Path, checkpoint_cfg: CheckpointConfig, writes: bool = True) -> None:
        """writes=False for ranks other than 0: they read checkpoints (and write their shards into
        them) but leave the directory's files, lock and repairs to rank 0."""
        self.path = Path(path)
        self.writes = writes
        self.lock = RunLock(self.path)
        self.checkpoints = CheckpointStore(self.path / "checkpoints", checkpoint_cfg, writes)
        self.events = EventLog(self.path / "events.jsonl", writes)
        self.logs = {name: JsonlLog(self.path / name, writes) for name in LOGS}
        self.config_path = self.path / "config.yaml"
        self.stopped_path = self.path / "STOPPED.json"
        self.paused_path = self.path / "PAUSED"
        self.summary_path = self.path / "summary.json"

    def acquire(self) -> "RunDir":
        """Make the directory and take the lock; raises RunDirLocked when another process writes this
        directory, ConfigError when it cannot be made or written (a file in the way, a read-only
        filesystem), leaving nothing this call made."""
        if self.writes:
            made = self._make()
            try:
                self.lock.acquire()
            except BaseException as exc:
                if made is not None:
                    shutil.rmtree(made, ignore_errors=True)
                if isinstance(exc, OSError) and exc.errno == errno.EROFS:
                    raise self._read_only() from None
                raise
        return self

    def _make(self) -> Path | None:
        """The run directory made: -> the topmost directory made for it (None: it existed)."""
        if self.path.is_dir():
            return None
        top = self.path
        while not top.parent.exists() and top.parent != top:
            top = top.parent
        try:
            self.path.mkdir(parents=True)
        except (FileExistsError, NotADirectoryError):
            if top.is_dir():
                shutil.rmtree(top, ignore_errors=True)
            in_the_way = next(p for p in (self.path, *self.path.parents) if p.exists() and not p.is_dir())
            raise ConfigError(f"run_dir={self.path}: {in_the_way} is a file, not a directory; set run_dir to a new "
                              "directory or a run's") from None
        except OSError as exc:
            if top.is_dir():
                shutil.rmtree(top, ignore_errors=True)
            if exc.errno == errno.EROFS:
                raise self._read_only() from None
            raise
        return top

    def _read_only(self) -> ConfigError:
        return ConfigError(f"run_dir={self.path} is on a read-only filesystem; set run_dir to a directory on a "
                           "writable one")

    def open(self) -> list[str]:
        """Repair what a killed or starved writer left behind: torn log lines, unfinished atomic
        writes, unfinished or invalid checkpoints. -> one line per repair, for the event log.
        Rank 0's work alone: another rank's sweep would delete the temporary file of a write rank 0 has
        under way (its launch.json, seen under Ray) and race it for the reserve."""
        if not self.writes:
            return []
        notes = []
        for name, log in [*self.logs.items(), ("events.jsonl", self.events.log)]:
            if cut := log.repair():
                notes.append(f"cut a torn last line ({cut} bytes) from {name}")
        for stale in self.path.glob(".*.tmp-*"):
            stale.unlink(missing_ok=True)
        notes += self.checkpoints.recover()
        self._reserve()
        return notes

    def close(self) -> None:
        self.lock.release()

    def log_offsets(self) -> dict[str, int]:
        return {name: log.size() for name, log in self.logs.items()}

    def write(self, path: Path, text: str) -> None:
        """An atomic write of one of the run's files, by the process that writes them."""
        if self.writes:
            atomic_write(path, text)

    def rewind_logs(self, offsets: dict[str, int], through_step: int | None = None) -> dict[str, int]:
        """Cut each log back to its size at a checkpoint; the cut lines go to `NAME.abandoned.jsonl`.
        With `through_step` (a rollback, which goes on with the checkpoint's weights), lines just past a
        size that belong to steps up to it stay: the evaluation before training is written after the
        step-0 checkpoint. -> lines moved per log."""
        if not self.writes:
            return {}
        moved = {}
        for name, log in self.logs.items():
            keep_in = self.path / name.replace(".jsonl", ".abandoned.jsonl")
            offset = offsets.get(name, 0)
            if through_step is not None:
                offset = log.past_steps(offset, through_step)
            if n := log.rewind(offset, keep_in):
                moved[name] = n
        return moved

    def _reserve(self) -> None:
        path = self.path / RESERVE_FILE
        if path.is_file() and path.stat().st_size == RESERVE_BYTES:
            return
        try:
            with open(path, "wb") as f:
                f.write(b"\0" * RESERVE_BYTES)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            path.unlink(missing_ok=True)  # a disk too full for the reserve: the run will say so soon enough

    def release_reserve(self) -> None:
        (self.path / RESERVE_FILE).unlink(missing_ok=True)
