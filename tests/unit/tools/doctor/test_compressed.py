"""Compressed logs and metrics files (`compressed`): read as what they hold by every reader, found in a folder by the
name of what they hold, streamed, and refused in one line when damaged, past the size cap, or a zip of several."""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
import zipfile
from pathlib import Path

import pytest

from grpo.cli import main
from grpo.tools.doctor import compressed, examine, read, textlog
from grpo.tools.doctor.record import UnreadableRun
from grpo.tools.watch import DirectoryFollower, identify
from tests.real_runs import ROOT

NAN_LOG = ROOT / "verl_agentr1_issue30_nan_step83" / "console.log"
FINISHED_LOG = ROOT / "verl_econ_v9_finished_300" / "training_v9.log"
TINKER = ROOT / "tinker_rubric_rl_context_window_crash_step7"
COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


def _verdict(path: Path) -> tuple:
    diagnosis = examine(path)[0]
    return diagnosis.status, diagnosis.cause, diagnosis.first_bad_step, diagnosis.last_good_checkpoint


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".zip"])
@pytest.mark.parametrize("log", [NAN_LOG, FINISHED_LOG, TINKER / "metrics.jsonl"], ids=["nan", "finished", "jsonl"])
def test_a_compressed_file_is_diagnosed_as_what_it_holds(tmp_path, suffix, log):
    path = tmp_path / (log.name + suffix)
    if suffix == ".zip":
        _zip(path, {log.name: log.read_bytes()})
    else:
        path.write_bytes(COMPRESS[suffix](log.read_bytes()))
    assert list(textlog.iter_lines(path)) == list(textlog.iter_lines(log))
    assert _verdict(path) == _verdict(log)
    assert examine(path)[0].evidence == [] or all(e.file == str(path) for e in examine(path)[0].evidence)


def test_a_folders_compressed_logs_and_metrics_files_are_found_by_what_they_hold(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "training_v9.log.gz").write_bytes(gzip.compress(FINISHED_LOG.read_bytes()))
    assert _verdict(logs) == _verdict(FINISHED_LOG)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / "output.log.xz").write_bytes(lzma.compress((TINKER / "output.log").read_bytes()))
    (crashed / "metrics.jsonl.gz").write_bytes(gzip.compress((TINKER / "metrics.jsonl").read_bytes()))
    assert _verdict(crashed) == _verdict(TINKER)


def test_a_compressed_file_cut_short_ends_where_its_data_ends(tmp_path):
    """A .gz copied while it was still being written: its lines up to the cut, as a torn plain log's."""
    data = gzip.compress(FINISHED_LOG.read_bytes())
    path = tmp_path / "training_v9.log.gz"
    path.write_bytes(data[:len(data) // 2])
    lines = list(textlog.iter_lines(path))
    whole = list(textlog.iter_lines(FINISHED_LOG))
    assert 0 < len(lines) < len(whole) and lines[:-1] == whole[:len(lines) - 1]


@pytest.mark.parametrize("make, says", [
    (lambda data: data[:20] + bytes(b ^ 0x55 for b in data[20:]), "is damaged"),
    (lambda data: b"this is not gzip at all\n" * 4, "is damaged 0 bytes into its content"),
])
def test_a_damaged_compressed_file_is_a_one_line_error(tmp_path, capsys, make, says):
    path = tmp_path / "console.log.gz"
    path.write_bytes(make(gzip.compress(FINISHED_LOG.read_bytes())))
    assert main(["doctor", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and str(path) in error and says in error


def test_a_zip_of_several_files_says_to_unzip_it(tmp_path):
    path = _zip(tmp_path / "logs.zip", {"a.log": b"step 1\n", "b.log": b"step 2\n"})
    with pytest.raises(UnreadableRun, match=r"logs.zip holds 2 files \(a.log, b.log\), not one log: unzip it"):
        read(path)


def test_past_the_size_cap_a_compressed_file_is_refused_in_one_line(tmp_path, monkeypatch):
    """A zip bomb, or a log no one should wait for: stopped once its content passes MAX_BYTES."""
    path = tmp_path / "training_v9.log.gz"
    path.write_bytes(gzip.compress(FINISHED_LOG.read_bytes()))
    monkeypatch.setattr(compressed, "MAX_BYTES", 4096)
    with pytest.raises(UnreadableRun, match=r"holds more than .* once decompressed: give the doctor the log's tail"):
        list(textlog.iter_lines(path))


def test_a_compressed_logs_ends_are_read_in_one_pass_within_bounded_memory(tmp_path, monkeypatch):
    """read_ends streams the content once, keeping its head and its last TAIL bytes, never the whole."""
    monkeypatch.setattr(textlog, "HEAD", 1000)
    monkeypatch.setattr(textlog, "TAIL", 1000)
    monkeypatch.setattr(textlog, "CHUNK", 700)
    text = FINISHED_LOG.read_bytes()
    path = tmp_path / "training_v9.log.bz2"
    path.write_bytes(bz2.compress(text))
    textlog._compressed_ends.cache_clear()
    assert textlog.read_ends(path) == text[:1000].decode() + "\n" + text[-1000:].decode()


def test_grpo_watch_reads_a_compressed_log_whole_since_it_does_not_grow(tmp_path):
    path = tmp_path / "console.log.gz"
    path.write_bytes(gzip.compress(NAN_LOG.read_bytes()))
    follower = identify(path)
    assert isinstance(follower, DirectoryFollower) and "compressed" in follower.kind
    assert follower.poll() and follower.record().steps() == read(NAN_LOG).steps()


def test_the_name_of_what_a_file_holds(tmp_path):
    zipped = _zip(tmp_path / "run.zip", {"nested/train.log": b"x\n"})
    assert compressed.inner_name(Path("train.log.gz")) == "train.log"
    assert compressed.inner_name(zipped) == "train.log"
    assert textlog.log_suffix(Path("metrics.jsonl.xz")) == ".jsonl" and textlog.log_suffix(Path("a.log")) == ".log"
    shutil.copy(zipped, tmp_path / "copy.zip")
    assert compressed.is_compressed(tmp_path / "copy.zip") and not compressed.is_compressed(Path("a.log"))
