"""scripts/gpu_check.py's own smoke check (--device cpu): its runs train, and its summary reads their figures.
Where a GPU is, the same script is the check; here it must not rot between the sessions that have one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo.config import TinyModelConfig
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from tests.processes import env_with_src

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


@pytest.mark.slow
def test_the_gpu_check_trains_every_step_and_reads_its_figures(tmp_path):
    model_dir = tmp_path / "tiny-llama"
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (model_dir / "model.safetensors").unlink()  # the script needs the config and tokenizer only
    done = subprocess.run([sys.executable, str(SCRIPT), "--model-dir", str(model_dir), "--out", str(tmp_path / "out"),
                           "--device", "cpu"], capture_output=True, text=True, env=env_with_src(), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "tiny preset: exit 0, 6 of 6 steps updated" in summary
    for dtype in ("bfloat16", "float32"):  # the length reward gives random completions different rewards
        line = next(line for line in summary.splitlines() if line.startswith(f"quickstart shape, {dtype}:"))
        assert "6 of 6 steps updated" in line and "nan" not in line, line
    assert "suite" not in summary  # the GPU's own parts are not run on a CPU


def test_a_model_dir_without_a_config_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--model-dir", str(tmp_path), "--device", "cpu",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env_with_src(),
                          timeout=120)
    assert done.returncode == 1 and done.stderr.strip() == (
        f"--model-dir {tmp_path} has no config.json: give a model directory (its weights may be absent)")
