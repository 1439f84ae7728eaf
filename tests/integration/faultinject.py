"""Inject a SIGKILL or a disk error into one chosen file operation of a real `grpo train` process.

The trainer is started with `faults.stop_before_record_at_step=S`, so it stops itself (SIGSTOP) just
before it records step S: the metrics line, the checkpoint save, the pruning of old checkpoints and
the checkpoint event. strace is then attached to it, set to tamper with the N-th call of one system
call, and the trainer is continued. strace counts each system call of each thread separately from
the moment it attaches, so an operation of the record is named by (system call, N), and the same
sequence of operations happens in every run: a reference run enumerates them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def start_stopped(run_dir: Path, overrides: list[str], step: int, stderr: Path | None = None) -> subprocess.Popen:
    """A `grpo train` process that has stopped itself just before recording `step`; its stderr goes
    to `stderr` (default: RUN_DIR.stderr beside the run directory)."""
    stderr = stderr or Path(f"{run_dir}.stderr")
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grpo", "train", "--config", "tiny", f"run_dir={run_dir}", *overrides,
             f"faults.stop_before_record_at_step={step}"],
            stdout=subprocess.DEVNULL, stderr=err,
        )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        raise RuntimeError(f"the trainer exited before step {step}: see {stderr}")
    return proc


def continue_traced(proc: subprocess.Popen, log: Path, inject: str | None = None) -> int:
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
        # The trainer is strace's child for waiting purposes now; Popen.wait still reaps it.
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
