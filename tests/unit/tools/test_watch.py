"""`grpo watch`'s Tail: every line of a log followed by name, once, across a file that does not exist yet,
torn last lines, rotation and truncation; and what `--signal` accepts."""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from grpo.tools.doctor.record import UnreadableRun
from grpo.tools.watch import Tail, Watch, identify, parse_signal


def append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_a_log_that_does_not_exist_yet_then_a_torn_line_held_until_complete(tmp_path):
    log = tmp_path / "train.log"
    tail = Tail(log)
    assert tail.poll() == []
    append(log, "step:1 - a:1\nstep:2 - critic/score/mean:0.")
    assert tail.poll() == ["step:1 - a:1"]  # the torn half is not a line yet
    append(log, "45\n")
    assert tail.poll() == ["step:2 - critic/score/mean:0.45"]
    assert tail.poll() == [] and tail.count == 2


def test_lines_are_counted_as_editors_count_them_and_nuls_dropped(tmp_path):
    log = tmp_path / "train.log"
    append(log, "\0\0\0a\rb\x0cc\x85d\n2\n")
    assert Tail(log).poll() == ["a\rb\x0cc\x85d", "2"]


def test_a_fifo_in_place_of_the_log_is_refused_not_waited_on(tmp_path):
    log = tmp_path / "train.log"
    os.mkfifo(log)
    with pytest.raises(UnreadableRun, match="not a regular file"):
        Tail(log).poll()


def test_rotation_reads_the_old_file_to_its_end_then_the_new_one(tmp_path):
    log = tmp_path / "train.log"
    append(log, "1\n")
    tail = Tail(log)
    lines = tail.poll()
    append(log, "2\n")  # written after the last look, before the rotation
    os.replace(log, tmp_path / "train.log.1")
    append(log, "3\n")
    lines += tail.poll()
    assert lines == ["1", "2", "3"] and tail.rotations == 1


def test_copytruncate_grown_past_the_old_end_is_caught_and_the_copy_read(tmp_path):
    log = tmp_path / "train.log"
    append(log, "line 1\n")
    tail = Tail(log)
    lines = tail.poll()
    append(log, "line 2\n")
    shutil.copy(log, tmp_path / "train.log.1")
    with open(log, "r+") as f:
        f.truncate(0)
    append(log, "line 3, longer than the first two together\n")
    lines += tail.poll()
    assert lines == ["line 1", "line 2", "line 3, longer than the first two together"]
    assert tail.truncations == 1


def test_a_truncation_without_a_copy_starts_again_from_the_top(tmp_path):
    log = tmp_path / "train.log"
    append(log, "a long first line\n")
    tail = Tail(log)
    lines = tail.poll()
    with open(log, "r+") as f:
        f.truncate(0)
    append(log, "b\n")
    lines += tail.poll()
    assert lines == ["a long first line", "b"]


def test_signals():
    assert parse_signal("TERM") == parse_signal("sigterm") == parse_signal("15") == signal.SIGTERM
    assert parse_signal("INT") == signal.SIGINT
    with pytest.raises(ValueError, match="not a signal"):
        parse_signal("NOPE")


@pytest.mark.parametrize("pid, says", [(0, "process group"), (-1, "process group"), (-4242, "process group"),
                                       (1, "init"), ("self", "this watch"), ("parent", "this watch")])
def test_a_pid_that_is_not_one_trainer_is_refused_before_anything_is_sent(tmp_path, capsys, pid, says):
    from grpo.cli import main

    pid = {"self": os.getpid(), "parent": os.getppid()}.get(pid, pid)
    assert main(["watch", str(tmp_path / "train.log"), "--pid", str(pid)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_a_pid_reused_by_another_process_is_not_signalled():
    """The trainer exited and its pid now names a process that started later: never signalled."""
    import subprocess
    import sys

    from grpo.tools import watch as watch_module

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        trainer = watch_module.Trainer.of(child.pid)
        assert trainer.alive()
        reused = watch_module.Trainer(child.pid, started="1")  # what it was when the watch began: another start
        assert not reused.alive()
        with pytest.raises(ProcessLookupError):
            reused.signal(signal.SIGTERM)
        assert child.poll() is None  # nothing was sent
    finally:
        child.kill()
        child.wait()


def test_the_watch_says_once_that_a_trl_log_is_buffered(tmp_path):
    """Bars drawn to step 8 before the dicts of steps 1-8 came in one flush (stdout buffered under nohup)."""
    log = tmp_path / "train.log"
    bars = "".join(f"\r {s * 10}%|#| {s}/10 [00:0{s}<00:01, 1.0it/s]" for s in range(1, 9))
    dicts = "".join(f"{{'loss': '0.01', 'grad_norm': '0.3', 'reward': '0.{s}', 'reward_std': '0.2', "
                    f"'frac_reward_zero_std': '0.1', 'epoch': '0.{s}'}}\n" for s in range(1, 9))
    log.write_text(bars + "\n" + dicts + "\r  90%|#| 9/10 [00:09<00:01, 1.0it/s]\n")
    said: list[str] = []
    watch = Watch(log, interval_s=0.01, say=said.append)
    watch.follower = identify(log)
    watch.follower.poll()
    watch._judge(ended=False)
    watch._judge(ended=False)
    assert sum("buffered output" in line for line in said) == 1
    assert watch.record.steps() == list(range(1, 9))
