from __future__ import annotations

import errno
import fcntl
import os
import random
import zlib

import pytest
import torch

from grpo.rundir import direct
from grpo.rundir.checkpoints import file_crc32
from grpo.rundir.direct import STAGING, DirectFile, Written


def write_through(path, chunks: list[bytes], **kwargs) -> DirectFile:
    with DirectFile(path, **kwargs) as stream:
        for chunk in chunks:
            assert stream.write(chunk) == len(chunk)
        assert stream.tell() == sum(map(len, chunks))
    return stream


def assert_same_as_a_plain_write(tmp_path, stream: DirectFile, chunks: list[bytes]) -> None:
    expected = b"".join(chunks)
    plain = tmp_path / "plain"
    with open(plain, "wb") as f:
        f.writelines(chunks)
    assert stream.path.read_bytes() == plain.read_bytes() == expected
    assert stream.written == Written(len(expected), zlib.crc32(expected))
    assert stream.written.crc32 == file_crc32(stream.path)  # what the manifest's verify computes


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, STAGING + 3, 2 * STAGING])
def test_a_file_of_any_size_is_the_bytes_written_with_their_size_and_crc(tmp_path, size):
    chunks = [random.Random(size).randbytes(size)]
    assert_same_as_a_plain_write(tmp_path, write_through(tmp_path / "f", chunks), chunks)


def test_many_small_writes_are_staged_into_the_same_bytes(tmp_path):
    rng = random.Random(0)
    chunks = [rng.randbytes(rng.choice([1, 7, 100, 4096, 5000, 70_000])) for _ in range(400)]
    chunks.append(rng.randbytes(STAGING))  # one write larger than the staging buffer, not on a block boundary
    assert_same_as_a_plain_write(tmp_path, write_through(tmp_path / "f", chunks), chunks)


def test_a_file_written_again_is_truncated(tmp_path):
    write_through(tmp_path / "f", [b"x" * 10_000])
    stream = write_through(tmp_path / "f", [b"short"])
    assert stream.path.read_bytes() == b"short"


def test_whole_blocks_go_past_the_page_cache_and_the_tail_through_it(tmp_path):
    with DirectFile(tmp_path / "f") as stream:
        if not stream.direct:
            pytest.skip(f"the filesystem of {tmp_path} refuses O_DIRECT")
        stream.write(b"a" * (STAGING + 3))  # a whole staging buffer is written
        assert stream.direct and fcntl.fcntl(stream.fileno(), fcntl.F_GETFL) & os.O_DIRECT
    assert not stream.direct  # the 3-byte tail went through the page cache
    assert stream.path.stat().st_size == STAGING + 3


def test_torch_save_writes_through_it(tmp_path):
    tensors = {"w": torch.randn(300, 200), "b": torch.arange(7)}
    with DirectFile(tmp_path / "t.pt") as stream:
        torch.save(tensors, stream)
    loaded = torch.load(tmp_path / "t.pt")
    assert all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    assert stream.written.crc32 == file_crc32(tmp_path / "t.pt")


# --- where O_DIRECT is not there, or refused ---------------------------------------------------------

CHUNKS = [b"head", random.Random(1).randbytes(STAGING + 4099), b"tail"]


def test_a_filesystem_refusing_o_direct_at_open_gets_the_same_bytes(tmp_path, ramfs):
    stream = write_through(ramfs / "f", CHUNKS)
    assert not stream.direct
    assert_same_as_a_plain_write(tmp_path, stream, CHUNKS)


def test_no_o_direct_at_all_writes_through_the_page_cache(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "O_DIRECT")  # macOS
    stream = write_through(tmp_path / "f", CHUNKS)
    assert not stream.direct
    assert_same_as_a_plain_write(tmp_path, stream, CHUNKS)


def fail_direct_writes(monkeypatch, code: int) -> list[int]:
    """os.write fails with `code` on descriptors opened O_DIRECT (others write as usual): -> the failed lengths."""
    failed, write = [], os.write

    def refusing(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            failed.append(len(data))
            raise OSError(code, os.strerror(code))
        return write(fd, data)

    monkeypatch.setattr(direct.os, "write", refusing)
    return failed


def test_a_filesystem_refusing_the_first_direct_write_gets_the_same_bytes(tmp_path, monkeypatch):
    with DirectFile(tmp_path / "f") as stream:
        if not stream.direct:
            pytest.skip(f"the filesystem of {tmp_path} refuses O_DIRECT")
        failed = fail_direct_writes(monkeypatch, errno.EINVAL)  # as one wanting another alignment does
        for chunk in CHUNKS:
            stream.write(chunk)
    assert failed == [STAGING] and not stream.direct
    assert_same_as_a_plain_write(tmp_path, stream, CHUNKS)


# --- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC, errno.EROFS])
@pytest.mark.parametrize("where", ["write", "close"])
def test_a_failed_direct_write_raises_its_errno_and_closes_the_file(tmp_path, monkeypatch, code, where):
    before = open_fds()
    with pytest.raises(OSError) as raised, DirectFile(tmp_path / "f") as stream:
        if not stream.direct:
            pytest.skip(f"the filesystem of {tmp_path} refuses O_DIRECT")
        fail_direct_writes(monkeypatch, code)
        stream.write(b"x" * (STAGING + 1 if where == "write" else STAGING - 1))
    assert type(raised.value) is OSError and raised.value.errno == code
    assert stream.closed and open_fds() == before


@pytest.mark.parametrize("size", [STAGING + 1, STAGING - 1], ids=["in a write", "at close"])
def test_a_full_disk_raises_enospc_from_the_direct_path_and_closes_the_file(small_disk, size):
    disk = small_disk("1m")
    before = open_fds()
    with pytest.raises(OSError) as raised, DirectFile(disk / "f") as stream:
        if not stream.direct:
            pytest.skip("this kernel's tmpfs refuses O_DIRECT (before Linux 6.6)")
        stream.write(b"x" * size)
    assert type(raised.value) is OSError and raised.value.errno == errno.ENOSPC
    assert stream.direct  # it failed writing past the page cache (the tail of `at close` was not reached)
    assert stream.closed and open_fds() == before


def test_a_file_that_cannot_be_created_raises_and_leaks_nothing(tmp_path):
    before = open_fds()
    with pytest.raises(FileNotFoundError):
        DirectFile(tmp_path / "no such directory" / "f")
    assert open_fds() == before
