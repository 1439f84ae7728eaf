"""SIGKILL and full-disk errors at each file operation of recording a step (metrics line, checkpoint
save, pruning, checkpoint event), injected into a real `grpo train` process with strace, then a
resume: no torn checkpoint left, no metrics step lost or duplicated, parameters equal to an
uninterrupted run. A real full disk (a small tmpfs) at a checkpoint and at a metrics write too.

The ~240 operations of a record are ~60 distinct ones: the first and the last of each kind on each
file (see `faultinject.distinct`; a checkpoint shard alone is ~170 writes that differ only in their
offset). The default suite (so CI) tries every fourth distinct operation and every commit (rename);
`pytest -m "fault_injection and long"` tries every distinct one (about 4 minutes on 2 cores of an AVX2 AMD
EPYC, by hand: out of CI's 30), and GRPO_FAULTS_EVERY_OP=1 makes it try all ~240 (about an hour).
"""

from __future__ import annotations

import os
import shutil
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grpo.cli import main
from grpo.config import CheckpointConfig
from grpo.errors import EXIT_DISK
from grpo.rundir.checkpoints import CheckpointStore
from grpo.tools.doctor import diagnose

from .faultinject import STRACE, FileOp, continue_traced, distinct, killed_op, op_key, record_ops, start_stopped
from .test_run_directory import assert_same_run

pytestmark = pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install strace)")

STEP = 2  # the step whose record is attacked; keep_last=1 makes its save prune step 0
# Five steps: four metrics lines that may cross a page boundary by a clear margin, which
# test_a_real_full_disk_at_a_metrics_write needs (with one candidate, the numbers' printed lengths decided).
STEPS = 5
OVERRIDES = [f"train.steps={STEPS}", "checkpoint.every_steps=2", "checkpoint.keep_last=1"]
WRITES = ("openat", "write", "writev", "pwrite64", "ftruncate", "fsync", "fdatasync", "mkdir", "rename",
          "renameat", "renameat2")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference") / "r"
    assert main(["train", "--config", "tiny", f"run_dir={run_dir}", *OVERRIDES]) == 0
    return run_dir


@pytest.fixture(scope="module")
def ops(tmp_path_factory) -> list[FileOp]:
    """Every file-changing operation of recording step 2, from one untampered traced run."""
    base = tmp_path_factory.mktemp("trace")
    proc = start_stopped(base / "r", OVERRIDES, STEP)
    assert continue_traced(proc, base / "r.strace") == 0
    found = record_ops(base / "r.strace", base / "r", STEP)
    calls = {op.call for op in found}
    assert {"write", "writev", "rename", "fsync", "mkdir", "unlinkat"} <= calls  # metrics, save, prune
    return found


def sample(ops: list[FileOp], every: int) -> list[FileOp]:
    """Every `every`-th distinct operation, plus every rename (the commits) and the first and last."""
    ops = distinct(ops)
    chosen = ops[::every] + [op for op in ops if op.call.startswith("rename")] + [ops[-1]]
    return sorted(set(chosen), key=ops.index)


def writes(ops: list[FileOp]) -> list[FileOp]:
    """The writes a full disk can fail: not those that already fail (a mkdir of an existing
    directory is refused as existing before the kernel looks for space)."""
    return [op for op in ops if op.call in WRITES and " = -1 " not in op.text]


def marked(ops: list[FileOp]) -> list[FileOp]:
    return ops if os.environ.get("GRPO_FAULTS_EVERY_OP") == "1" else distinct(ops)


def resume_and_check(run_dir: Path, reference: Path) -> None:
    report = "\n".join(diagnose(run_dir))  # reads what the fault left, without crashing
    assert "STATUS" in report
    assert main(["train", "--config", str(run_dir / "config.yaml"),
                 "testing.faults.stop_before_record_at_step=null"]) == 0
    store = CheckpointStore(run_dir / "checkpoints", CheckpointConfig())
    valid, invalid = store.scan()
    assert invalid == [] and not (store.root / "invalid").exists(), "a torn checkpoint was left behind"
    for info in valid:
        store.verify(info)
    assert not [p.name for p in store.root.iterdir() if p.name.startswith((".tmp-", ".trash-", ".replaced-"))]
    assert_same_run(reference, run_dir, STEPS)


def kill_at(base: Path, op: FileOp) -> Path:
    run_dir = base / f"kill-{op.call}-{op.index}"
    proc = start_stopped(run_dir, OVERRIDES, STEP)
    log = Path(f"{run_dir}.strace")
    code = continue_traced(proc, log, inject=f"{op.call}:signal=KILL:when={op.index}")
    assert code == -signal.SIGKILL, f"{op}: exit {code}, not killed"
    killed = killed_op(log, run_dir)
    assert killed is not None and op_key(killed) == op.key, f"{op}: killed at {killed}"
    return run_dir


def full_disk_at(base: Path, op: FileOp) -> tuple[Path, int, str]:
    run_dir = base / f"enospc-{op.call}-{op.index}"
    proc = start_stopped(run_dir, OVERRIDES, STEP)
    code = continue_traced(proc, Path(f"{run_dir}.strace"), inject=f"{op.call}:error=ENOSPC:when={op.index}")
    return run_dir, code, Path(f"{run_dir}.stderr").read_text()


def run_kills(tmp_path: Path, chosen: list[FileOp], reference: Path) -> None:
    # The killed processes run two at a time (they are mostly start-up); resumes run here, one by one.
    with ThreadPoolExecutor(2) as pool:
        run_dirs = list(pool.map(lambda op: kill_at(tmp_path, op), chosen))
    for op, run_dir in zip(chosen, run_dirs):
        try:
            resume_and_check(run_dir, reference)
        except AssertionError as exc:
            raise AssertionError(f"after SIGKILL at {op}: {exc}") from exc


def run_full_disks(tmp_path: Path, chosen: list[FileOp], reference: Path) -> None:
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda op: full_disk_at(tmp_path, op), chosen))
    for op, (run_dir, code, stderr) in zip(chosen, outcomes):
        assert code == EXIT_DISK, f"ENOSPC at {op}: exit {code}\n{stderr[-2000:]}"
        # torch.save drops the errno of a failed write: the error then says "Input/output error"
        # unless the disk really is (nearly) full, as it is in the tmpfs tests below.
        said = ("disk error: No space left on device while writing", "disk error: Input/output error while writing")
        assert any(s in stderr for s in said), f"ENOSPC at {op}: {stderr[-800:]}"
        try:
            resume_and_check(run_dir, reference)
        except AssertionError as exc:
            raise AssertionError(f"after ENOSPC at {op}: {exc}") from exc


def test_sigkill_at_a_sample_of_the_file_operations_of_a_checkpoint_then_resume(tmp_path, ops, reference):
    run_kills(tmp_path, sample(ops, every=4), reference)


def test_a_full_disk_at_a_sample_of_the_writes_of_a_checkpoint_then_resume(tmp_path, ops, reference):
    run_full_disks(tmp_path, sample(writes(ops), every=4), reference)


@pytest.mark.fault_injection
@pytest.mark.long
def test_sigkill_at_every_file_operation_of_a_checkpoint_then_resume(tmp_path, ops, reference):
    run_kills(tmp_path, marked(ops), reference)


@pytest.mark.fault_injection
@pytest.mark.long
def test_a_full_disk_at_every_write_of_a_checkpoint_then_resume(tmp_path, ops, reference):
    run_full_disks(tmp_path, marked(writes(ops)), reference)


# --- a real full disk --------------------------------------------------------------------------


def test_a_real_full_disk_at_a_checkpoint(small_disk, reference, capsys):
    # Room for the step-0 checkpoint (1.1 MB), the 1 MiB reserve and the logs, not for a second one.
    disk = small_disk("2600k")
    run_dir = disk / "r"
    code = main(["train", "--config", "tiny", f"run_dir={run_dir}", *OVERRIDES])
    err = capsys.readouterr().err
    assert code == EXIT_DISK
    assert "disk error: No space left on device while writing" in err, err
    assert "free of" in err and "run the same command again to resume" in err
    assert [e for e in diagnose(run_dir) if "ran out of disk" in e]
    small_disk("16m")  # the user frees space
    resume_and_check(run_dir, reference)


def first_line_needing_a_new_page(reference: Path, page: int = 4096, past: int = 200, before: int = 50) -> int:
    """A full tmpfs still takes an append that fits in the file's last page: attack the first step
    whose metrics line (in the reference run) runs `past` bytes or more into a new page (the attacked
    run's lines differ from the reference's by a few bytes of timings), starting `before` bytes or more
    ahead of the boundary (part of the line is written before the disk refuses the rest)."""
    end = 0
    for step, line in enumerate((reference / "metrics.jsonl").read_bytes().splitlines(keepends=True), 1):
        start, end = end, end + len(line)
        if step >= 2 and start % page + len(line) > page + past and page - start % page > before:
            return step
    pytest.skip("no metrics line of the reference run crosses a page boundary")


def test_a_real_full_disk_at_a_metrics_write(small_disk, reference, tmp_path):
    step = first_line_needing_a_new_page(reference)
    disk = small_disk("16m")
    run_dir = disk / "r"
    stderr = tmp_path / "stderr"
    proc = start_stopped(run_dir, OVERRIDES, step, stderr=stderr)
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # fill the disk while the trainer waits to write the line
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=300) == EXIT_DISK
    err = stderr.read_text()
    assert "No space left on device while writing" in err and "metrics.jsonl" in err, err[-1000:]
    assert [line for line in (run_dir / "events.jsonl").read_text().splitlines() if '"crash"' in line]
    filler.unlink()
    resume_and_check(run_dir, reference)
    shutil.rmtree(run_dir)
