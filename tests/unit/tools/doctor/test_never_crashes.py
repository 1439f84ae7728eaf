"""The doctor never crashes on what it reads: garbage, torn files, values of the wrong type, files it
may not open. Exit 2 for input it cannot read at all, else 0 or 1 with an account."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grpo.cli import main
from tests.processes import env_with_src

SAMPLES = Path(__file__).resolve().parent / "samples"


def run(path: Path, capsys, *flags: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["doctor", str(path), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_nothing_there_or_nothing_known(tmp_path, capsys):
    assert run(tmp_path / "missing", capsys)[0] == 2
    assert run(tmp_path, capsys)[0] == 2  # an empty directory
    (tmp_path / "noise.bin").write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4096)))
    code, _, err = run(tmp_path / "noise.bin", capsys)
    assert code == 2 and "is not a run directory or log the doctor knows" in err


def mangle(data: bytes, rng: random.Random) -> bytes:
    """Cut, splice in random bytes, and duplicate a slice: what a kill, a bad disk or a concatenation leaves."""
    if not data:
        return bytes(rng.randrange(256) for _ in range(64))
    cut = rng.randrange(len(data))
    noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    start = rng.randrange(len(data))
    return data[:cut] + noise + data[start:start + rng.randrange(1, 4000)] + data[cut:][: rng.randrange(len(data))]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sample", ["areal", "verl", "trl/output"])
def test_mangled_foreign_runs(tmp_path, capsys, sample, seed):
    rng = random.Random(seed)
    root = tmp_path / "run"
    shutil.copytree(SAMPLES / sample, root)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for path in rng.sample(files, min(3, len(files))):
        path.write_bytes(mangle(path.read_bytes(), rng))
    target = root / "train.log" if sample == "verl" else root
    for flags in ((), ("--json",)):
        code, out, err = run(target, capsys, *flags)
        assert code in (0, 1, 2) and "Traceback" not in err
        if code != 2 and flags:
            assert json.loads(out)["cause"]


GARBAGE_LINES = [b'{"step": "three", "reward/mean": "high", "actor/loss": [1]}\n', b"[1, 2, 3]\n", b"null\n",
                 b'{"step": 2, "reward/mean": NaN, "rollout/failed_frac": Infinity}\n', b"\xff\xfe\x00garbage\n",
                 b'{"kind": "trip", "step": 1, "evidence": "not a dict", "message": 5}\n', b'{"step": 3, "rew']


def test_a_grpo_run_of_garbage(tmp_path, capsys):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    for name in ("metrics.jsonl", "events.jsonl", "eval.jsonl"):
        (run_dir / name).write_bytes(b"".join(GARBAGE_LINES))
    (run_dir / "STOPPED.json").write_bytes(b'{"cause": ')
    (run_dir / "summary.json").write_bytes(b"[]")
    (run_dir / "config.yaml").write_bytes(b"train: {steps: many}\n\x00\x01")
    (run_dir / "checkpoints" / "step_000003").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_000003" / "meta.json").write_text('{"format": 2, "step": "x"}')
    code, out, err = run(run_dir, capsys)
    assert code in (0, 1) and "Traceback" not in err
    assert "unreadable line(s) in metrics.jsonl" in out and "step_000003 is INVALID" in out
    code, out, _ = run(run_dir, capsys, "--json")
    assert code in (0, 1) and json.loads(out)["source"] == "grpo"


def test_trainer_state_that_is_not_a_trainer_state(tmp_path, capsys):
    (tmp_path / "trainer_state.json").write_text('["log_history"]')
    code, _, err = run(tmp_path, capsys)
    assert code == 2 and "has no readable trainer_state.json" in err


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to another user")
@pytest.mark.parametrize("source, forbidden", [("areal", "trainer.log"), ("grpo", "events.jsonl")])
def test_permission_denied_is_one_line_and_exit_2(source, forbidden):
    """As another user (root reads everything, so the doctor runs as nobody here): a file it may not
    open is exit 2 with one line naming it, not a traceback. (pytest's tmp_path is private to root.)"""
    base = Path(tempfile.mkdtemp(prefix="doctor-perm-"))
    base.chmod(0o755)
    root = base / source
    if source == "areal":
        shutil.copytree(SAMPLES / "areal", root)
    else:
        root.mkdir()
        (root / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
        (root / "events.jsonl").write_text('{"step": 0, "kind": "checkpoint", "message": "saved"}\n')
    (root / forbidden).chmod(0o600)
    try:
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                                 "grpo", "doctor", str(root)], capture_output=True, text=True, timeout=120,
                                env=env_with_src(),
                                cwd="/")
    finally:
        shutil.rmtree(base)
    assert result.returncode == 2, result.stderr
    assert f"{forbidden} cannot be read (Permission denied)" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
