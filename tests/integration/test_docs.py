"""Every command on the getting-started page runs as written, and the own-data page's example trains (issue 30).

Blocks whose first line is a `# long ...` comment (the install and the quickstart, minutes) are not run
here; tests/unit/test_docs.py checks they are the README's commands.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import DOCS, code_blocks, commands
from tests.processes import env_with_src

pytestmark = pytest.mark.slow


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[0] == "grpo", f"not a grpo command: {command}"
    env = env_with_src()
    return subprocess.run([sys.executable, "-m", "grpo", *argv[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _short_commands(page: Path) -> list[str]:
    blocks = [text for lang, text in code_blocks(page) if lang == "bash"]
    return [c for text in blocks if not text.lstrip().startswith("# long") for c in commands(text)]


def test_getting_started_commands_run_as_written(tmp_path):
    shown = _short_commands(DOCS / "getting-started.md")
    assert len(shown) >= 8 and all("tiny" in c for c in shown)
    for command in shown:
        done = _run(command, tmp_path)
        assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    # What the page says they leave behind.
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["status"] == "finished"
    assert (tmp_path / "tiny-model" / "config.json").is_file()


def test_own_data_example_trains(tmp_path):
    blocks = code_blocks(DOCS / "own-data.md")
    rows, reward, command = blocks[0], blocks[1], blocks[2]
    assert rows[0] == "jsonl" and reward[0] == "python" and command[0] == "bash"
    (tmp_path / "data").mkdir()
    for split in ("train", "test"):
        (tmp_path / "data" / f"{split}.jsonl").write_text(rows[1])
    (tmp_path / "my_rewards.py").write_text(reward[1])
    [line] = commands(command[1])
    assert "--config quickstart" in line
    done = _run(line.replace("--config quickstart", "--config tiny") + " train.steps=2", tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    metrics = [json.loads(x) for x in (tmp_path / "runs" / "mine" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 2 and all(m["rollout/unscorable"] == 0 for m in metrics)
