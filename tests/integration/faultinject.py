"""Inject a SIGKILL or a disk error into one chosen file operation of a real `grpo train` process.

The trainer is started with `testing.faults.stop_before_record_at_step=S`, so it stops itself (SIGSTOP) just
before it records step S: the metrics line, the checkpoint save, the pruning of old checkpoints and
the checkpoint event. strace is then attached to it, set to tamper with the N-th call of one system
call, and the trainer is continued. strace counts each system call of each thread separately from
the moment it attaches, so an operation of the record is named by (system call, N), and the same
sequence of operations happens in every run: a reference run enumerates them.

The trainers are real `grpo train` processes forked from a server that has already imported grpo
(multiprocessing's forkserver, which has run no torch work, so forking it is safe): a trial then
costs its training, not four seconds of imports, which is what lets CI try every operation.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.waiting import wait_until

# The system calls that change files. Reads cannot tear anything: a kill during one is the same as
# a kill just before the next change.
MUTATING = ("openat", "write", "writev", "pwrite64", "ftruncate", "fsync", "fdatasync", "rename", "renameat",
            "renameat2", "mkdir", "mkdirat", "unlink", "unlinkat", "rmdir")
_LINE = re.compile(r"^(?P<call>\w+)\((?P<args>.*)")

STRACE = shutil.which("strace")


@dataclass(frozen=True)
class FileOp:
    call: str
    index: int  # the N-th call of `call` since strace attached
    text: str  # the strace line, the run directory written RUN

    @property
    def key(self) -> str:
        return op_key(self.text)

    def __str__(self) -> str:
        return f"{self.call}#{self.index} {self.text[:110]}"


_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(["grpo.cli", "grpo.train.loop"])


def _grpo(argv: list[str], stderr: str) -> None:
    """`python -m grpo ARGV` in a forked child: stdout discarded, stderr to a file."""
    with open(os.devnull, "w") as null, open(stderr, "w") as err:
        os.dup2(null.fileno(), 1)
        os.dup2(err.fileno(), 2)
    from grpo.cli import main

    sys.exit(main(argv))


class Trainer:
    """A `grpo train` process: its pid, and its exit status as Popen gives it (-N: killed by signal N)."""

    def __init__(self, argv: list[str], stderr: Path) -> None:
        self._process = _FORKSERVER.Process(target=_grpo, args=(argv, str(stderr)), daemon=True)
        self._process.start()
        self.pid = self._process.pid

    def wait(self, timeout: float) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            self._process.kill()
            raise TimeoutError(f"grpo train (pid {self.pid}) still running after {timeout}s")
        return self._process.exitcode

    def kill(self) -> None:
        self._process.kill()
        self._process.join()

    def alive(self) -> bool:
        return self._process.is_alive()

    def stopped(self) -> bool:
        """Stopped by a signal (its own SIGSTOP), read from /proc."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def start_stopped(run_dir: Path, overrides: list[str], step: int, stderr: Path | None = None) -> Trainer:
    """A `grpo train` process that has stopped itself just before recording `step`; its stderr goes
    to `stderr` (default: RUN_DIR.stderr beside the run directory)."""
    stderr = stderr or Path(f"{run_dir}.stderr")
    proc = Trainer(["train", "--config", "tiny", f"run_dir={run_dir}", *overrides,
                    f"testing.faults.stop_before_record_at_step={step}"], stderr)
    # The forkserver, not this process, is its parent, so waitpid(WUNTRACED) cannot see the stop:
    # poll its state instead.
    try:
        wait_until(lambda: proc.stopped() or not proc.alive(), 300, f"the trainer stopping before step {step}",
                   interval=0.01)
    finally:
        if not proc.stopped():
            proc.kill()
    if not proc.stopped():
        raise RuntimeError(f"the trainer did not stop before step {step}: see {stderr}")
    return proc


def continue_traced(proc: Trainer, log: Path, inject: str | None = None) -> int:
    """Attach strace to the stopped trainer, continue it, and wait: -> the trainer's exit status."""
    command = [STRACE, "-p", str(proc.pid), "-o", str(log), "-e", "trace=" + ",".join(MUTATING)]
    if inject:
        command += ["-e", f"inject={inject}"]
    tracer = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    attached = tracer.stderr.readline()  # "strace: Process N attached": only then may it go on
    if "attached" not in attached:
        tracer.kill()
        proc.kill()
        raise RuntimeError(f"strace did not attach: {attached!r}")
    os.kill(proc.pid, signal.SIGCONT)
    try:
        return proc.wait(timeout=300)
    finally:
        tracer.wait(timeout=60)


def record_ops(log: Path, run_dir: Path, step: int) -> list[FileOp]:
    """The file-changing operations of recording `step`, from an untampered trace: everything from
    the stop up to and including the write of the checkpoint's event."""
    counts: dict[str, int] = {}
    ops: list[FileOp] = []
    committed = False
    for raw in log.read_text().splitlines():
        match = _LINE.match(raw)
        if not match:
            continue
        call, args = match.group("call"), match.group("args")
        counts[call] = counts.get(call, 0) + 1
        if call in ("write", "writev") and re.match(r"[12],", args):
            continue  # the console, not a file
        if call == "openat" and "O_WRONLY" not in args and "O_RDWR" not in args and "O_CREAT" not in args:
            continue  # opened for reading
        ops.append(FileOp(call, counts[call], raw.replace(str(run_dir), "RUN")))
        if call.startswith("rename") and f'step_{step:06d}"' in args and ".tmp-" in args:
            committed = True
        if committed and call in ("write", "writev") and "events" in ops[-2].text:
            return ops
    raise RuntimeError(f"the record of step {step} was not found in {log}")


_PATH_CALLS = ("openat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "unlink", "unlinkat", "rmdir")


def op_key(text: str) -> str:
    """What identifies an operation across runs: the call, and for calls that name files, the names
    (temporary names made random by a library are blanked)."""
    call = text.split("(", 1)[0]
    if call not in _PATH_CALLS:
        return call  # the data written holds timestamps; the position (its index) identifies it
    names = re.findall(r'"([^"]*)"', text.split(") = ")[0])
    return call + " " + " ".join(re.sub(r"\.tmp\w{6,8}$", ".tmpX", name) for name in names)


_FD_CALLS = ("write", "writev", "pwrite64", "ftruncate", "fsync", "fdatasync")


def distinct(ops: list[FileOp]) -> list[FileOp]:
    """The first and the last operation of each kind on each file: a kill or a full disk at the
    100th write of a checkpoint shard tears the same file, in the same way, as at the 50th (a DCP
    shard alone is ~170 writes). Writes are attributed to the file opened last before them."""
    opened = ""
    first: dict[str, FileOp] = {}
    last: dict[str, FileOp] = {}
    for op in ops:
        key = op.key
        if op.call == "openat":
            opened = key.split(" ", 1)[1]
        elif op.call in _FD_CALLS:
            key = f"{op.call} {opened}"
        first.setdefault(key, op)
        last[key] = op
    chosen = set(first.values()) | set(last.values())
    return [op for op in ops if op in chosen]


def killed_op(log: Path, run_dir: Path) -> str | None:
    """The operation during which strace delivered the injected SIGKILL, from the trial's trace
    (the run directory written RUN)."""
    lines = log.read_text().splitlines()
    for i, raw in enumerate(lines):
        if "(INJECTED)" in raw or "+++ killed by SIGKILL +++" in raw:
            for prior in reversed(lines[: i + 1]):
                if _LINE.match(prior):
                    return prior.replace(str(run_dir), "RUN")
    return None
