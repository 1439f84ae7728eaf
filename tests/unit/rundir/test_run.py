from pathlib import Path

from grpo.config import CheckpointConfig
from grpo.rundir.run import RESERVE_FILE, RunDir


def test_only_the_writing_rank_repairs_the_run_directory(tmp_path: Path):
    run = tmp_path / "r"
    run.mkdir()
    unfinished = run / ".launch.json.tmp-1740"  # rank 0's write under way when another rank opens the directory
    unfinished.write_text("{")
    torn = run / "metrics.jsonl"
    torn.write_text('{"step": 1}\n{"step"')

    assert RunDir(run, CheckpointConfig(), writes=False).open() == []
    assert unfinished.exists() and torn.read_text().endswith('{"step"') and not (run / RESERVE_FILE).exists()

    notes = RunDir(run, CheckpointConfig(), writes=True).open()
    assert not unfinished.exists() and torn.read_text() == '{"step": 1}\n' and (run / RESERVE_FILE).is_file()
    assert any("torn" in note for note in notes), notes
