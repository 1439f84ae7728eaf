"""The doctor and the watch on hostile input: numbers of any size, any nesting, special files in place
of logs, inf and NaN in step counters, and hundreds of mutated runs of every format. Always a verdict,
"unknown", or one line and exit 2; never a traceback, never a hang."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from grpo.cli import main
from grpo.tfrecord import frame, records
from grpo.tools.doctor import examine, judge, render
from grpo.tools.doctor.record import UnreadableRun
from grpo.tools.watch import identify
from tests.foreign_logs import FORMATS, dead, healthy, write_log

HUGE = "9" * 400
ENORMOUS = "9" * 5001
DEEP = "[" * 100_000 + "]" * 100_000


def doctor(path: Path, capsys) -> int:
    capsys.readouterr()
    code = main(["doctor", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and code in (0, 1, 2), err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
    return code


def watched(path: Path) -> None:
    """One poll of `grpo watch`: identify, read what is new, judge, render."""
    follower = identify(path)
    if follower is None:
        return
    follower.poll()
    record = follower.record()
    record.running = True
    render(judge(record), record)


def grpo_run(root: Path, metrics: str = "", stopped: str | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "metrics.jsonl").write_text(metrics or '{"step": 1, "reward/mean": 0.5}\n')
    (root / "events.jsonl").write_text('{"time": 1, "step": 1, "kind": "run_start", "message": "", "evidence": {}}\n')
    if stopped is not None:
        (root / "STOPPED.json").write_text(stopped)
    return root


def trl_dir(root: Path, state: str) -> Path:
    (root / "checkpoint-2").mkdir(parents=True)
    (root / "checkpoint-2" / "trainer_state.json").write_text(state)
    return root


CASES = {
    "grpo_huge_int": lambda p: grpo_run(p, f'{{"step": 1, "reward/mean": {HUGE}}}\n{{"step": {HUGE}}}\n'),
    "grpo_enormous_int": lambda p: grpo_run(p, f'{{"step": 1, "reward/mean": {ENORMOUS}}}\n'),
    "grpo_deep_metrics": lambda p: grpo_run(p, DEEP + "\n"),
    "grpo_deep_stopped": lambda p: grpo_run(p, stopped=DEEP),
    "trl_huge_int": lambda p: trl_dir(p, json.dumps({"global_step": 2, "log_history": [
        {"step": 1, "reward": 0.4, "loss": 0.1}]}).replace("0.4", HUGE)),
    "trl_enormous_step": lambda p: trl_dir(p, f'{{"global_step": 2, "max_steps": {ENORMOUS}, "log_history": '
                                              f'[{{"step": {ENORMOUS}, "reward": 0.5}}]}}'),
    "trl_deep_state": lambda p: trl_dir(p, DEEP),
    "trl_infinite_step": lambda p: trl_dir(p, '{"global_step": 2, "log_history": [{"step": Infinity, "reward": NaN}]}'),
    "verl_inf_total": lambda p: _text(p / "train.log", "(TaskRunner pid=1) step:1 - critic/score/mean:0.5 - "
                                      "training/total_steps:inf\n(TaskRunner pid=1) step:2 - critic/score/mean:nan - "
                                      f"trainer/total_training_steps:nan - actor/pg_loss:{HUGE}\n"),
    "verl_huge_step": lambda p: _text(p / "train.log", f"(TaskRunner pid=1) step:{HUGE} - critic/score/mean:0.5\n"),
    "areal_bad_memory": lambda p: _text(p / "trainer.log", "20251111-11:37:11.251 StatsLogger INFO: Epoch 1/1 Step 1/9 "
                                        "Train step 1/9 done.\n20251111-11:37:11.300 memory reserved (GB): 1.2.3\n"
                                        "│ grpo_actor/task_reward/avg │ 1.2.3e+4e │\n"),
    "areal_huge_step": lambda p: _text(p / "trainer.log", f"20251111-11:37:11.251 StatsLogger INFO: Train step {HUGE}/"
                                       f"{HUGE} done.\n"),
}


def _text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_values_get_a_verdict_or_one_line(tmp_path, capsys, case):
    target = CASES[case](tmp_path / "run")
    if doctor(target, capsys) == 2:
        with pytest.raises(UnreadableRun):  # the watch says the same one line (exit 2)
            watched(target)
    else:
        watched(target)


@pytest.mark.parametrize("special", ["fifo", "dev_zero", "directory_as_log"])
def test_a_log_replaced_by_a_special_file_is_refused_not_read(tmp_path, capsys, special):
    log = tmp_path / "train.log"
    if special == "fifo":
        os.mkfifo(tmp_path / "pipe")
        log.symlink_to(tmp_path / "pipe")
    elif special == "dev_zero":
        log.symlink_to("/dev/zero")
    else:
        log.mkdir()
    assert doctor(log, capsys) == 2
    if special != "directory_as_log":
        with pytest.raises(UnreadableRun, match="not a regular file"):
            watched(log)


MUTATIONS = ("huge", "enormous", "inf", "nan", "negative", "deep", "bytes", "dup", "cut", "crlf")


def mutate(text: str, rng: random.Random) -> str:
    """One hostile change at a random place: a number replaced, brackets, junk bytes, a line twice, a cut."""
    kind = rng.choice(MUTATIONS)
    digits = [i for i, ch in enumerate(text) if ch.isdigit()]
    at = rng.choice(digits) if digits else rng.randrange(len(text) + 1)
    if kind in ("huge", "enormous", "inf", "nan", "negative"):
        new = {"huge": HUGE, "enormous": ENORMOUS, "inf": "inf", "nan": "nan", "negative": "-7"}[kind]
        return text[:at] + new + text[at + 1:]
    if kind == "deep":
        return text[:at] + "[" * 5000 + text[at:]
    if kind == "bytes":
        return text[:at] + "".join(chr(rng.randrange(0x80, 0x2000)) for _ in range(20)) + "\x00\x0c\x85" + text[at:]
    lines = text.splitlines(keepends=True)
    i = rng.randrange(len(lines)) if lines else 0
    if kind == "dup":
        return "".join(lines[:i] + lines[i:i + 3] * 2 + lines[i + 3:])
    if kind == "cut":
        return text[:at]
    return text.replace("\n", "\r\n")


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("name", ["areal", "verl", "trl_log", "grpo", "trl_state"])
def test_hundreds_of_mutated_runs_never_crash_the_doctor_or_the_watch(tmp_path, name, seed):
    rng = random.Random(seed * 31 + len(name))
    root = tmp_path / "run"
    steps = [healthy(s) if s < 6 else dead(s) for s in range(1, 10)]
    if name == "trl_state":
        history = [{"step": s.step, "reward": s.reward, "loss": s.loss, "grad_norm": s.grad_norm,
                    "frac_reward_zero_std": s.zero_variance} for s in steps]
        target = trl_dir(root, json.dumps({"global_step": 9, "max_steps": 20, "log_history": history}, indent=2))
        files = [root / "checkpoint-2" / "trainer_state.json"]
    else:
        log = write_log(FORMATS[name], root, steps, total=20, ending=rng.choice(["save", "traceback", "torn"]))
        target = root if name == "grpo" else log
        files = [p for p in root.rglob("*") if p.is_file() and p.suffix in (".log", ".jsonl", ".json")]
    for path in rng.sample(files, min(2, len(files))):
        text = path.read_text(errors="replace")
        for _ in range(rng.randrange(1, 4)):
            text = mutate(text, rng)
        path.write_text(text, errors="surrogatepass")
    try:
        diagnosis, record = examine(target)
        render(diagnosis, record)
        json.dumps(diagnosis.to_json())
    except UnreadableRun:
        pass
    try:
        watched(target)
    except UnreadableRun:
        pass
    shutil.rmtree(root)


LOGGED = Path(__file__).parents[2] / "data" / "logged_runs"


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """A bit flipped, the end cut, or junk bytes put in, at a random place."""
    at = rng.randrange(len(data) + 1)
    kind = rng.choice(("flip", "cut", "junk"))
    if kind == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ 1 << rng.randrange(8)]) + data[at + 1:]
    if kind == "cut":
        return data[:at]
    return data[:at] + rng.randbytes(rng.randrange(1, 40)) + data[at:]


def wandb_datastore(records: list[bytes]) -> bytes:
    """wandb's datastore around these records, each a full chunk (the hostile records are small)."""
    out = bytearray(b":W&B\xe1\xbe\x00")
    for data in records:
        room = 32768 - len(out) % 32768
        if room < 7 + len(data):
            out += bytes(room)
        out += struct.pack("<IHB", zlib.crc32(bytes([1]) + data), len(data), 1) + data
    return bytes(out)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("name", ["trl_gemma3_tensorboard", "verl_rllm54_wandb", "verl_agentr1_nan_tensorboard"])
def test_mutated_event_files_and_wandb_runs_never_crash_the_doctor_or_the_watch(tmp_path, capsys, name, seed):
    """Bytes mutated as they are on disk (the CRCs catch them: one line), and records mutated inside frames whose
    CRCs are right, so the protobuf decoders get the garbage."""
    rng = random.Random(seed)
    root = Path(shutil.copytree(LOGGED / name, tmp_path / name))
    (target,) = [f for f in root.rglob("*") if f.name.startswith("events.out.tfevents.") or f.suffix == ".wandb"]
    data = target.read_bytes()
    if seed % 2:
        target.write_bytes(mutate_bytes(data, rng))
    elif target.suffix == ".wandb":
        chunks, pos = [], 7  # the generator's runs: every record fits in one chunk
        while pos + 7 <= len(data):
            length = struct.unpack_from("<H", data, pos + 4)[0]
            chunks.append(data[pos + 7:pos + 7 + length])
            pos += 7 + length
        target.write_bytes(wandb_datastore([mutate_bytes(c, rng) if rng.random() < 0.3 else c for c in chunks]))
    else:
        with open(target, "rb") as stream:
            events = [mutate_bytes(event, rng) if rng.random() < 0.3 else event for _, event in records(stream)]
        target.write_bytes(b"".join(frame(event) for event in events))
    doctor(root, capsys)
    try:
        watched(root)
    except UnreadableRun:
        pass


METRICS = Path(__file__).parents[2] / "data" / "real_runs"


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("name", ["trl_humor_wandb_exports_lr1e6", "custom_grpo_prm_metrics_csv_30",
                                  "verl_resize_file_logger_score_zero", "tinker_rubric_rl_context_window_crash_step7",
                                  "verl_agentr1_issue30_nan_gzip"])
def test_mutated_metrics_files_and_compressed_logs_never_crash_the_doctor_or_the_watch(tmp_path, capsys, name, seed):
    """The real hand-overs with hostile values (`mutate`: huge numbers, 5000 brackets, junk, a cut), a quote left
    open, and their bytes mutated compressed (a flipped bit, a cut, junk): a verdict, or one line."""
    rng = random.Random(seed)
    root = Path(shutil.copytree(METRICS / name, tmp_path / name))
    for path in [p for p in root.iterdir() if p.name != "SOURCE"]:
        if path.suffix == ".gz":
            path.write_bytes(mutate_bytes(path.read_bytes(), rng))
            continue
        text = path.read_text()
        for _ in range(rng.randrange(1, 4)):
            text = mutate(text, rng)
        if rng.random() < 0.3:
            at = rng.randrange(len(text) + 1)
            text = text[:at] + '"' + text[at:]
        path.write_text(text, errors="surrogatepass")
    for target in [root, *(p for p in root.iterdir() if p.name != "SOURCE")]:
        doctor(target, capsys)
        try:
            watched(target)
        except UnreadableRun:
            pass
