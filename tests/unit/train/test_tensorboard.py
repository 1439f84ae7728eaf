"""grpo's own event files, read back by TensorBoard's reader: what SummaryWriter would have written, field for
field, without the tensorboard package installed."""

from __future__ import annotations

import importlib
import itertools
import math
import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboards_masked_crc32c
from tensorboard.summary.writer import event_file_writer
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import scalar, text

from grpo.config import LoggingConfig
from grpo.errors import DiskError
from grpo.tfrecord import crc32c, masked_crc32c
from grpo.train import tensorboard
from grpo.train.tensorboard import TensorBoardWriter, event, scalar_value, text_value


def read(log_dir) -> EventAccumulator:
    return EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0}).Reload()


def points(accumulator: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in accumulator.Scalars(tag)]


def float32(value: float) -> float:
    return float(np.float32(value))


def test_crc32c_is_castagnolis_and_masked_as_tensorboard_masks_it():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    rng = np.random.default_rng(0)
    for data in [b"", b"\x00", bytes(rng.integers(0, 256, 1000, dtype=np.uint8))]:
        assert masked_crc32c(data) == tensorboards_masked_crc32c(data)


@pytest.mark.parametrize("step", [0, 7, 2**40, -3])
@pytest.mark.parametrize("value", [0.0, -1.5, 1 / 3, 1e39, -1e39, math.inf, 1e-50])
def test_a_scalar_event_is_summary_writers_to_the_byte(step, value):
    expected = Event(wall_time=1234.5, step=step, summary=scalar("loss", value))
    ours = event(1234.5, step=step, summary_value=scalar_value("loss", value))
    assert ours == expected.SerializeToString()
    assert Event.FromString(ours) == expected


def test_text_and_the_purge_events_are_summary_writers_to_the_byte():
    sample = "**ok** reward 1.0  \nthe answer is 4 — é"
    expected = Event(wall_time=2.0, step=3, summary=text("samples", sample))
    assert event(2.0, step=3, summary_value=text_value("samples", sample)) == expected.SerializeToString()
    # SummaryWriter(purge_step=5)'s two events, wall_time as its FileWriter.add_event sets it
    assert event(2.0, step=5, file_version="brain.Event:2") == Event(
        wall_time=2.0, step=5, file_version="brain.Event:2").SerializeToString()
    assert event(2.0, step=5, session_start=True) == Event(
        wall_time=2.0, step=5, session_log=SessionLog(status=SessionLog.START)).SerializeToString()


def test_scalars_and_texts_read_back_as_written(tmp_path):
    writer = TensorBoardWriter(tmp_path / "tb")
    values = {"reward/mean": [0.25, 0.0, -1.0, 1 / 3], "eval/accuracy": [0.1, 0.9, 0.7, 0.123456789]}
    for step in range(1, 5):
        for tag, series in values.items():
            writer.add_scalar(tag, series[step - 1], step)
        writer.add_text("samples", f"**ok** step {step}\n\nünïcode", step)
        writer.flush()
    writer.close()
    writer.close()  # twice is fine, as SummaryWriter's

    [name] = [p.name for p in (tmp_path / "tb").iterdir()]
    assert name == writer.path.name and name.startswith("events.out.tfevents.")
    assert name.split(".")[3].isdigit() and len(name.split(".")[3]) == 10  # %010d seconds, then host, pid, n
    events = read(tmp_path / "tb")
    assert events.file_version == 2.0
    assert sorted(events.Tags()["scalars"]) == sorted(values)
    for tag, series in values.items():
        assert points(events, tag) == [(step, float32(v)) for step, v in enumerate(series, start=1)]
    assert events.Tags()["tensors"] == ["samples/text_summary"]
    assert events.SummaryMetadata("samples/text_summary").plugin_data.plugin_name == "text"
    texts = events.Tensors("samples/text_summary")
    assert [(t.step, t.tensor_proto.string_val[0].decode()) for t in texts] == [
        (step, f"**ok** step {step}\n\nünïcode") for step in range(1, 5)]
    with pytest.raises(ValueError, match="is closed"):
        writer.add_scalar("late", 1.0, 5)


def crashed_and_resumed(log_dir, make_writer) -> None:
    """Steps 1-5 written, the run killed; resumed from step 3's checkpoint, steps 4-6 written again."""
    first = make_writer(log_dir, None)
    for step in range(1, 6):
        first.add_scalar("loss", float(step), step)
        first.add_text("samples", f"first {step}", step)
    first.flush()
    resumed = make_writer(log_dir, 4)
    for step in range(4, 7):
        resumed.add_scalar("loss", 10.0 * step, step)
        resumed.add_text("samples", f"resumed {step}", step)
    resumed.close()


def test_a_resumed_runs_purge_drops_what_summary_writers_drops(tmp_path, monkeypatch):
    # Both writers' file names end in a per-process counter: from 0, the two files sort in the order they were
    # written, as two processes' files seconds apart do.
    monkeypatch.setattr(tensorboard, "_writer_ids", itertools.count())
    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(0))
    crashed_and_resumed(tmp_path / "ours", lambda d, purge: TensorBoardWriter(d, purge_step=purge))
    crashed_and_resumed(tmp_path / "torch", lambda d, purge: SummaryWriter(str(d), purge_step=purge))

    ours, theirs = read(tmp_path / "ours"), read(tmp_path / "torch")
    assert points(ours, "loss") == points(theirs, "loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0),
                                                              (6, 60.0)]
    texts = [(t.step, t.tensor_proto.string_val[0]) for t in ours.Tensors("samples/text_summary")]
    assert texts == [(t.step, t.tensor_proto.string_val[0]) for t in theirs.Tensors("samples/text_summary")]
    assert [step for step, _ in texts] == [1, 2, 3, 4, 5, 4, 5, 6]  # TensorBoard's purge keeps tensors, for both


@pytest.mark.parametrize("cut", [3, 10, 14, -2], ids=["in-length", "in-length-crc", "in-data", "in-data-crc"])
def test_a_torn_last_record_is_skipped(tmp_path, cut):
    writer = TensorBoardWriter(tmp_path / "tb")
    for step in (1, 2):
        writer.add_scalar("loss", float(step), step)
    writer.flush()
    whole = writer.path.stat().st_size
    writer.add_scalar("loss", 3.0, 3)
    writer.close()
    last = writer.path.stat().st_size - whole
    assert last > 16 + 14  # 12 bytes of length and its CRC, the event, 4 of CRC: every cut is inside the record
    with open(writer.path, "r+b") as f:
        f.truncate(whole + (cut if cut > 0 else last + cut))
    assert points(read(tmp_path / "tb"), "loss") == [(1, 1.0), (2, 2.0)]


def test_metrics_log_to_tensorboard_without_the_tensorboard_package(tmp_path, monkeypatch):
    with monkeypatch.context() as without:
        for name in [n for n in sys.modules if n == "tensorboard" or n.startswith("tensorboard.")]:
            without.setitem(sys.modules, name, None)  # None: `import` of it raises ImportError
        without.setitem(sys.modules, "torch.utils.tensorboard", None)
        without.delitem(sys.modules, "grpo.train.metrics", raising=False)
        without.delitem(sys.modules, "grpo.train.tensorboard", raising=False)
        with pytest.raises(ImportError):
            importlib.import_module("tensorboard")
        metrics = importlib.import_module("grpo.train.metrics")
        logger = metrics.MetricsLogger(tmp_path, LoggingConfig(progress=False), total_steps=2, run_name="r",
                                       config_dict={}, start_step=0)
        logger.log(1, {"reward/mean": 0.5, "applied": True})
        logger.log_eval(1, "during", {"accuracy": 0.75})
        logger.log_samples(1, [{"status": "ok", "reward": 1.0, "completion": "4", "prompt": "2+2"}])
        logger.close()

    events = read(tmp_path / "tensorboard")
    assert points(events, "reward/mean") == [(1, 0.5)] and points(events, "eval/accuracy") == [(1, 0.75)]
    assert "applied" not in events.Tags()["scalars"]  # a bool is no scalar
    assert events.Tensors("samples/text_summary")[0].tensor_proto.string_val[0] == b"**ok** reward 1.0  \n4"


def test_a_full_disk_is_a_disk_error_and_what_was_flushed_stays_readable(small_disk):
    disk = small_disk("64k")
    writer = TensorBoardWriter(disk / "tensorboard")
    writer.add_scalar("reward/mean", 0.5, 1)
    writer.flush()
    with pytest.raises(DiskError) as raised:
        for step in range(2, 1000):  # 64 KiB holds a few hundred steps of one long text
            writer.add_text("samples", "x" * 1000, step)
            writer.flush()
    assert raised.value.path == writer.path
    assert points(read(disk / "tensorboard"), "reward/mean") == [(1, 0.5)]
