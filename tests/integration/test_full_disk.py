"""A disk that fills at a checkpoint larger than the reserve of "nearly full" (16 MiB): once the
partial checkpoint is removed the disk looks free again, yet the error must still say "no space",
be recorded in events.jsonl, and `grpo doctor` and `grpo health` must read the run. A real tmpfs."""

from __future__ import annotations

import json

from grpo.cli import main
from grpo.errors import EXIT_DISK

# ~10 MiB of weights; with Adam's moments a checkpoint after step 1 is ~32 MiB, step 0's ~11 MiB.
WIDER = ["model.tiny.hidden_size=256", "model.tiny.num_layers=4", "model.tiny.intermediate_size=512"]


def test_a_disk_full_at_a_large_checkpoint_says_no_space_and_is_recorded(small_disk, capsys):
    disk = small_disk("40m")  # step 0 fits; step 2's does not, and its removal frees ~28 MiB again
    run_dir = disk / "r"
    code = main(["train", "--config", "tiny", f"run_dir={run_dir}", "train.steps=2", "checkpoint.every_steps=2",
                 *WIDER])
    err = capsys.readouterr().err
    assert code == EXIT_DISK, err[-2000:]
    assert "disk error: No space left on device while writing" in err, err[-1000:]
    crashes = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()
               if json.loads(line)["kind"] == "crash"]
    assert crashes and "No space left on device" in crashes[-1]["message"]
    assert main(["doctor", str(run_dir)]) != 2
    out = capsys.readouterr().out
    assert "disk_full" in out and "step_000000" in out, out
    main(["health", str(run_dir)])
    assert "last good: " in capsys.readouterr().out


def test_a_disk_full_at_the_first_checkpoint_is_recorded(small_disk, capsys):
    disk = small_disk("8m")  # not even step 0's checkpoint (~11 MiB) fits
    run_dir = disk / "r"
    code = main(["train", "--config", "tiny", f"run_dir={run_dir}", "train.steps=2", *WIDER])
    err = capsys.readouterr().err
    assert code == EXIT_DISK, err[-2000:]
    assert "No space left on device" in err, err[-1000:]
    assert '"crash"' in (run_dir / "events.jsonl").read_text()
    assert main(["doctor", str(run_dir)]) != 2
    assert "disk_full" in capsys.readouterr().out
    assert main(["health", str(run_dir)]) == 1  # read, and unhealthy; not "not a run directory" (2)
