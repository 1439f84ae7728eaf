"""Atomic writes and append-only logs: whole or repaired, never torn, and disk errors that name the disk."""

from __future__ import annotations

import errno
import json
import os

import pytest

from grpo.errors import DiskError, is_disk_error
from grpo.rundir.files import JsonlLog, atomic_write, read_json


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("old")
    atomic_write(path, "new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_atomic_write_failure_keeps_the_old_file_and_names_the_disk(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_text("old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(DiskError) as info:
        atomic_write(path, "new")
    assert path.read_text() == "old"
    message = str(info.value)
    assert "No space left on device while writing" in message and "config.yaml" in message and "free of" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_read_json_says_what_is_wrong_instead_of_raising(tmp_path):
    assert read_json(tmp_path / "nope.json") == (None, "missing")
    (tmp_path / "bad.json").write_text('{"step": 3,')
    value, why = read_json(tmp_path / "bad.json")
    assert value is None and why.startswith("unreadable")
    (tmp_path / "ok.json").write_text('{"step": 3}')
    assert read_json(tmp_path / "ok.json") == ({"step": 3}, None)


def test_repair_cuts_a_torn_last_line_so_the_next_append_starts_clean(tmp_path):
    log = JsonlLog(tmp_path / "metrics.jsonl")
    log.append({"step": 1})
    log.append({"step": 2})
    with open(log.path, "ab") as f:
        f.write(b'{"step": 3, "rew')  # a kill or a full disk mid-line
    assert log.repair() == len(b'{"step": 3, "rew')
    log.append({"step": 3})
    assert [r["step"] for r in log.read()[0]] == [1, 2, 3]
    assert log.read()[1] == 0
    assert log.repair() == 0  # a whole log is left alone


def test_repair_of_a_log_that_is_one_torn_line(tmp_path):
    log = JsonlLog(tmp_path / "events.jsonl")
    log.path.write_bytes(b'{"kind": "cra')
    assert log.repair() == 13 and log.path.read_bytes() == b""


def test_read_skips_and_counts_garbled_lines(tmp_path):
    log = JsonlLog(tmp_path / "metrics.jsonl")
    log.path.write_bytes(b'{"step": 1}\n{"step": 2, "x\n\xff\xfe\n[1, 2]\n{"step": 3}\n')
    records, bad = log.read()
    assert [r["step"] for r in records] == [1, 3] and bad == 3


def test_rewind_moves_lines_after_the_offset_aside(tmp_path):
    log = JsonlLog(tmp_path / "metrics.jsonl")
    log.append({"step": 1})
    offset = log.size()
    log.append({"step": 2})
    log.append({"step": 3})
    kept = tmp_path / "metrics.abandoned.jsonl"
    assert log.rewind(offset, kept) == 2
    assert [r["step"] for r in log.read()[0]] == [1]
    assert [json.loads(line)["step"] for line in kept.read_text().splitlines()] == [2, 3]
    assert log.rewind(offset, kept) == 0


def test_past_steps_reaches_over_the_lines_of_steps_up_to_one(tmp_path):
    """A rollback to step 0 keeps the evaluation before training, written after step 0's checkpoint."""
    log = JsonlLog(tmp_path / "eval.jsonl")
    offset = log.size()
    log.append({"step": 0, "label": "before"})
    before = log.size()
    log.append({"step": 2, "label": "step 2"})
    log.append({"step": 0, "label": "a step-0 line after a later one is not reached"})
    assert log.past_steps(offset, 0) == before
    assert log.past_steps(offset, 2) == log.size() and log.past_steps(before, 1) == before
    assert JsonlLog(tmp_path / "none.jsonl").past_steps(0, 5) == 0


def test_a_failed_append_takes_its_partial_line_back(tmp_path, monkeypatch):
    log = JsonlLog(tmp_path / "metrics.jsonl")
    log.append({"step": 1})
    real_write = os.write

    def half_then_full(fd, data):
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(DiskError, match="metrics.jsonl"):
        log.append({"step": 2, "reward/mean": 0.5})
    monkeypatch.undo()
    assert log.path.read_text() == '{"step": 1}\n'


@pytest.mark.parametrize("exc,expected", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EROFS, "Read-only file system"), True),
    (RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file data/3: file write failed"), True),
    (OSError(errno.ENOENT, "No such file"), False),
    (ValueError("bad shape"), False),
])
def test_is_disk_error(exc, expected):
    assert is_disk_error(exc) is expected
