"""The doctor on TensorBoard event files and wandb runs written by the real writers from real runs' values
(tests/data/logged_runs/): each diagnosed as its truth and as the real run's own log is; and the readers on
what such files go through: torn by a kill, corrupted, several starts in one directory, several runs in
wandb/, a TRL output directory's runs/, a console log whose steps went to wandb only."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest

from grpo.cli import main
from grpo.tfrecord import records
from grpo.tools.doctor import examine, read, scalars, tensorboard, wandb_run
from grpo.tools.doctor.record import (
    ACCURACY,
    CRITIC_LOSS,
    GRAD_NORM,
    KL,
    LENGTH,
    LOSS,
    REWARD,
    TRUNCATED,
    ZERO_VARIANCE,
    Evidence,
    UnreadableRun,
)
from grpo.tools.watch import DirectoryFollower, identify
from tests.real_runs import ROOT, runs, score

LOGGED = ROOT.parent / "logged_runs"
RUNS = runs(LOGGED)
REAL = {run.name: run for run in runs()}
GEMMA_STEPS = list(range(10, 251, 10))


def _verdict(diagnosis) -> tuple:
    return diagnosis.status, diagnosis.cause, diagnosis.first_bad_step


def _real(run):
    """The real run a logged run's values came from (`derived_from: real_runs/<name> (...)`)."""
    return REAL[run.source["derived_from"].split()[0].split("/")[1]]


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(LOGGED / name, tmp_path / name))


def _event_file(folder: Path) -> Path:
    (file,) = tensorboard.find_event_files(folder)
    return file


def _wandb_run(folder: Path) -> Path:
    (run,) = (folder / "wandb").iterdir()
    return run


def test_the_logged_runs_are_small_and_cover_both_writers_and_both_frameworks():
    assert len(RUNS) >= 7
    assert {run.source["framework"].split()[0] for run in RUNS} == {"trl", "verl"}
    assert {run.name.rsplit("_", 1)[1] for run in RUNS} >= {"tensorboard", "wandb"}
    assert max(f.stat().st_size for f in LOGGED.rglob("*") if f.is_file()) < 50_000


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_each_logged_run_is_diagnosed_as_its_truth_and_as_its_real_log(run):
    diagnosis, record = examine(run.target)
    assert not score(run, diagnosis), (score(run, diagnosis), diagnosis.explanation)
    assert record.source == run.source["framework"].split()[0]
    assert _verdict(diagnosis) == _verdict(examine(_real(run).target)[0])


def test_the_logged_steps_and_values_are_the_real_runs():
    """float32 in an event file, the JSON number in wandb: the real run's rewards either way."""
    real = dict(read(REAL["unsloth_gemma3_gsm8k_250"].target).series(REWARD))
    for name in ("trl_gemma3_tensorboard", "trl_gemma3_wandb", "trl_gemma3_resumed_tensorboard"):
        record = read(next(run.target for run in RUNS if run.name == name))
        assert record.steps() == GEMMA_STEPS, name
        assert dict(record.series(REWARD)) == pytest.approx(real, rel=1e-6), name


def test_a_wandb_run_is_found_from_its_directory_its_datastore_and_wandb_s_folder():
    folder = LOGGED / "trl_gemma3_wandb" / "wandb"
    run = _wandb_run(folder.parent)
    for target in (folder, run, wandb_run.datastore(run)):
        record = read(target)
        assert record.path == str(run)
        # TRL's own step (train/global_step), not wandb's _step, which counted the 25 calls from 0
        assert record.steps() == GEMMA_STEPS and record.total_steps == 250  # max_steps, from the run's config


def test_the_latest_of_several_wandb_runs_is_read_or_the_one_latest_run_names(tmp_path):
    wandb = tmp_path / "wandb"
    older = shutil.copytree(_wandb_run(LOGGED / "verl_rllm54_wandb"), wandb / "run-20250101_000000-older")
    shutil.copytree(_wandb_run(LOGGED / "verl_agentr1_nan_wandb"), wandb / "offline-run-20250102_000000-newer")
    assert _verdict(examine(wandb)[0]) == ("problem", "nonfinite", 83)
    (wandb / "latest-run").symlink_to(older.name)  # wandb's own pointer wins over the names
    assert _verdict(examine(wandb)[0]) == ("problem", "reward_not_wired", 1)


def test_a_wandb_run_reads_the_crash_its_captured_console_shows_after_its_history(tmp_path):
    run = shutil.copytree(_wandb_run(LOGGED / "verl_rllm54_wandb"), tmp_path / "run-20250101_000000-x")
    with open(run / "files" / "output.log", "a") as console:  # the real run's own traceback would follow here
        console.write("Traceback (most recent call last):\n  File \"main_ppo.py\", line 1, in <module>\n"
                      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    diagnosis, record = examine(run)
    assert record.steps() == [1, 4] and record.evidence_by_step[4].file == str(wandb_run.datastore(run))
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("reward_not_wired", 1)  # the reward came first
    assert [crash.step for crash in record.crashes] == [5]  # after the history's last step


def test_a_console_log_without_steps_takes_the_steps_its_wandb_logger_wrote(tmp_path):
    """verl run with trainer.logger=['wandb']: the console shows no step; wandb/ beside it holds them all (the
    real console here trimmed of its step lines, as such a run prints it)."""
    console = (REAL["rllm_issue54_score_zero_every_step"].target).read_text().splitlines()
    kept = [line for line in console if " step:" not in line and "prompt_length/" not in line]
    (tmp_path / "console.log").write_text("\n".join(kept) + "\n")
    shutil.copytree(LOGGED / "verl_rllm54_wandb" / "wandb", tmp_path / "wandb")
    diagnosis, record = examine(tmp_path)
    assert record.source == "verl" and record.steps() == [1, 4] and record.path == str(tmp_path)
    assert _verdict(diagnosis) == ("problem", "reward_not_wired", 1)


def test_a_trl_output_directory_reads_the_event_files_in_its_runs_folder(tmp_path):
    out = shutil.copytree(REAL["unsloth_gemma3_gsm8k_250"].folder, tmp_path / "outputs", ignore=lambda *_: ["SOURCE"])
    shutil.copytree(LOGGED / "trl_gemma3_tensorboard" / "runs", out / "runs")
    diagnosis, record = examine(out)
    events = str(_event_file(out))
    assert record.steps() == GEMMA_STEPS and {e.file for e in record.evidence_by_step.values()} == {events}
    assert [c.step for c in record.checkpoints] == [250] and record.total_steps == 250  # the checkpoint's state
    assert _verdict(diagnosis) == ("healthy", "healthy", None)
    follower = identify(out)  # grpo watch: a step the event file logs (two folders down) is a change
    assert follower.poll() and not follower.poll()
    os.utime(events, ns=(os.stat(events).st_atime_ns, os.stat(events).st_mtime_ns + 10**9))
    assert follower.poll()
    shutil.rmtree(out / "checkpoint-250")  # killed before its first save: the events alone
    assert read(out).steps() == GEMMA_STEPS and read(out).source == "trl"


def test_several_event_files_merge_by_step_the_later_file_winning():
    folder = LOGGED / "trl_gemma3_resumed_tensorboard"
    first, second = tensorboard.find_event_files(folder)
    diagnosis, record = examine(folder)
    assert record.steps() == GEMMA_STEPS
    assert [(m.step, m.kind) for m in record.marks] == [(110, "restart")]
    assert record.evidence_by_step[100].file == str(first)
    assert all(record.evidence_by_step[s].file == str(second) for s in range(110, 151, 10))
    (restart, before, _), = record.earlier
    assert restart == 110 and sorted(before) == list(range(110, 151, 10))  # the first file's, kept as history
    assert diagnosis.history == [] and diagnosis.status == "healthy"


def _values(record) -> int:
    return sum(len(values) for values in record.metrics.values())


@pytest.mark.parametrize("cut", [1, 4, 13, 30])
def test_a_torn_last_record_ends_the_event_file(tmp_path, cut):
    """A writer killed mid-record: the records before it are read, the torn one is not an error."""
    file = _event_file(_copy(tmp_path, "verl_agentr1_nan_tensorboard"))
    whole = tensorboard.read_file(file)[1]
    file.write_bytes(file.read_bytes()[:-cut])
    torn = tensorboard.read_file(file)[1]
    assert sum(map(len, (r.values for r in torn.rows))) == sum(map(len, (r.values for r in whole.rows))) - 1
    assert _verdict(examine(file.parent)[0]) == ("problem", "nonfinite", 83)


@pytest.mark.parametrize("where, says", [(2, "its length's CRC does not match"), (14, "its data's CRC does not match")])
def test_a_corrupt_record_is_a_one_line_error_naming_the_file_and_its_offset(tmp_path, capsys, where, says):
    file = _event_file(_copy(tmp_path, "trl_gemma3_tensorboard"))
    with open(file, "rb") as stream:
        offset = [at for at, _ in records(stream)][40]  # a record in the middle
    data = bytearray(file.read_bytes())
    data[offset + where] ^= 0xFF
    file.write_bytes(bytes(data))
    assert main(["doctor", str(tmp_path / "trl_gemma3_tensorboard")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and str(file) in error and f"the record at byte {offset} is corrupt ({says})" in error


@pytest.mark.parametrize("keep", [0.5, 0.9, -1])
def test_a_torn_wandb_datastore_ends_at_its_last_whole_record(tmp_path, keep):
    run = shutil.copytree(_wandb_run(LOGGED / "trl_gemma3_wandb"), tmp_path / "run-20250101_000000-x")
    store = wandb_run.datastore(run)
    data = store.read_bytes()
    store.write_bytes(data[:int(len(data) * keep)] if keep > 0 else data[:keep])
    steps = read(run).steps()
    assert steps == GEMMA_STEPS[:len(steps)] and (keep < 0) == (len(steps) == len(GEMMA_STEPS))


def test_a_corrupt_wandb_chunk_is_a_one_line_error_naming_the_file_and_its_offset(tmp_path, capsys):
    run = shutil.copytree(_wandb_run(LOGGED / "verl_rllm54_wandb"), tmp_path / "run-20250101_000000-x")
    store = wandb_run.datastore(run)
    data = bytearray(store.read_bytes())
    flipped = data.rfind(b"critic/score/mean")  # inside the last step's history record
    data[flipped] ^= 0xFF
    store.write_bytes(bytes(data))
    assert main(["doctor", str(run)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and str(store) in error and "is corrupt (its CRC does not match)" in error
    offset = int(error.split("chunk at byte ")[1].split()[0])
    assert offset < flipped < offset + 32768


def test_the_tensor_form_of_a_scalar_reads_as_its_simple_value():
    simple = read(LOGGED / "verl_rllm54_tensorboard")
    tensor = read(LOGGED / "verl_rllm54_tensor_scalars")
    assert tensor.metrics == simple.metrics and tensor.steps() == [1, 4]  # float32 both


def _build(values: dict[str, float]):
    return scalars.build("tensorboard", "event files", "run", [scalars.Start("f", [
        scalars.Row(7, values, Evidence("f", 0, "step 7"))])])


@pytest.mark.parametrize("source, names", [
    ("trl", {"train/reward": REWARD, "train/loss": LOSS, "train/grad_norm": GRAD_NORM, "train/kl": KL,
             "train/frac_reward_zero_std": ZERO_VARIANCE, "train/completions/mean_length": LENGTH,
             "train/completions/clipped_ratio": TRUNCATED, "train/rewards/accuracy_reward/mean": ACCURACY}),
    ("verl", {"critic/score/mean": REWARD, "actor/pg_loss": LOSS, "actor/grad_norm": GRAD_NORM, "actor/kl_loss": KL,
              "response_length/mean": LENGTH, "response_length/clip_ratio": TRUNCATED, "critic/vf_loss": CRITIC_LOSS}),
    ("areal", {"grpo_actor/task_reward/avg": REWARD, "grpo_actor/actor_loss/avg": LOSS, "grpo_actor/grad_norm":
               GRAD_NORM, "grpo_actor/correct_ratio/avg": ACCURACY, "grpo_actor/no_eos_ratios/avg": TRUNCATED}),
    ("openrlhf", {"train/reward": REWARD, "train/policy_loss": LOSS, "train/kl": KL, "train/response_length": LENGTH,
                  "train/critic_loss": CRITIC_LOSS, "train/actor_lr": None}),
])
def test_each_frameworks_names_map_onto_the_record_through_its_readers_table(source, names):
    values = {tag: float(n) for n, tag in enumerate(names, 1)}
    record = _build(values)
    assert record.source == source
    assert record.metrics[7] == {name: values[tag] for tag, name in names.items() if name is not None}


def test_names_of_no_known_framework_are_a_one_line_error():
    with pytest.raises(UnreadableRun, match=r"none of a GRPO framework's metric names .* only loss/total, lr"):
        _build({"loss/total": 1.0, "lr": 0.1})


def test_a_nan_is_kept_as_a_nan():
    record = read(LOGGED / "verl_agentr1_nan_wandb" / "wandb")
    assert math.isnan(record.metrics[83][LOSS]) and record.metrics[83][REWARD] == -1


def test_grpo_watch_follows_event_files_and_wandb_runs_as_they_grow(tmp_path):
    folder = tmp_path / "logs"
    first, second = tensorboard.find_event_files(LOGGED / "trl_gemma3_resumed_tensorboard")
    folder.mkdir()
    shutil.copy(first, folder)
    follower = identify(folder)
    assert isinstance(follower, DirectoryFollower) and follower.poll() and not follower.poll()
    assert follower.record().steps() == list(range(10, 151, 10))
    shutil.copy(second, folder)  # the resumed trainer's new file
    assert follower.poll() and follower.record().steps() == GEMMA_STEPS

    wandb = shutil.copytree(LOGGED / "verl_agentr1_nan_wandb" / "wandb", tmp_path / "wandb")
    follower = identify(wandb)
    assert isinstance(follower, DirectoryFollower) and follower.poll() and not follower.poll()
    store = wandb_run.datastore(_wandb_run(tmp_path))
    os.utime(store, ns=(store.stat().st_atime_ns, store.stat().st_mtime_ns + 10**9))  # the run wrote more
    assert follower.poll() and follower.record().steps() == [83]


def test_a_log_without_step_metrics_asks_for_the_wandb_or_tensorboard_directory():
    diagnosis = examine(REAL["verl_walar_mt_grpo_window33"].target)[0]  # trainer.logger=['wandb'] only
    assert diagnosis.status == "unknown"
    assert "the run's wandb directory (wandb/ or wandb/run-*) or its TensorBoard log directory" in diagnosis.explanation
