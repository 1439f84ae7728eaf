"""The doctor on metrics files (`metricfiles`, `csvtable`, `jsonl`): the real hand-overs of the corpus read as its
other readers read a run, the shapes TensorBoard's Download CSV and a wandb history saved with pandas take (written
here from the logged runs' own values, as those tools write them), a folder's files found and joined by step, and a
file the doctor cannot read said in one line, with what to give instead."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from grpo import metric_keys
from grpo.cli import main
from grpo.tools.doctor import examine, grpo_run, metricfiles, read, scalars, tensorboard, wandb_run
from grpo.tools.doctor.record import ENTROPY, EVAL_ACCURACY, LOSS, REWARD, Evidence, UnreadableRun
from grpo.tools.watch import DirectoryFollower, identify
from tests.real_runs import ROOT

LOGGED = ROOT.parent / "logged_runs"
EXPORTS = ROOT / "trl_humor_wandb_exports_lr1e6"
EXPORT = next((ROOT / "trl_humor_wandb_export_lr2e5_reward").glob("*.csv"))
VERL_JSONL = ROOT / "verl_resize_file_logger_score_zero" / "gsm8k.jsonl"
TINKER = ROOT / "tinker_rubric_rl_context_window_crash_step7"
METRICS_CSV = ROOT / "custom_grpo_prm_metrics_csv_30" / "metrics.csv"


def _verdict(path: Path) -> tuple:
    diagnosis = examine(path)[0]
    return diagnosis.status, diagnosis.cause, diagnosis.first_bad_step


def test_a_folder_of_wandb_chart_exports_is_one_run_joined_by_step():
    """One export per metric, each with its __MIN/__MAX band and wandb's own _step: the folder is one run, each
    step holding both files' metrics, and neither a band nor _step is a metric."""
    record = read(EXPORTS)
    assert record.source == "trl" and record.steps() == list(range(5, 201, 5))
    assert record.metrics[5] == {REWARD: -0.08962198793888092}  # TRL's per-function std is not the groups' std
    evidence = record.evidence_by_step[5]
    assert Path(evidence.file).parent == EXPORTS and evidence.line == 2 and not record.notes
    assert "train/reward -0.089622" in evidence.text and "train/rewards/reward_fn/std 0.665977" in evidence.text


def test_a_chart_export_of_two_runs_reads_the_one_with_most_values_and_names_the_other(tmp_path):
    """wandb draws every run of the chart's group: both runs' columns side by side (the two real exports' values,
    joined by step as wandb writes them)."""
    rows = {}
    for source in (EXPORTS / "wandb_export_2026-02-19T14_02_21.303-05_00.csv", EXPORT):
        with source.open(newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            for cells in reader:
                rows.setdefault(cells[0], {}).update(zip(header[1:4], cells[1:4]))
    columns = [name for source in rows.values() for name in source]
    columns = list(dict.fromkeys(columns))
    path = tmp_path / "wandb_export.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        writer.writerow(["Step", *columns])
        for step in sorted(rows, key=int):
            writer.writerow([step, *(rows[step].get(name, "") for name in columns)])
    record = read(path)
    assert record.steps() == list(range(1, 61))  # grpo_vastai's 60 steps over hearty-leaf-10's 40
    assert record.metrics[6][REWARD] == 2.074032783508301
    assert any("2 runs: grpo_vastai_20260220_001219 was read" in note and "not hearty-leaf-10" in note
               for note in record.notes)


def test_a_csv_with_a_bom_and_windows_line_ends_reads_as_written(tmp_path):
    path = tmp_path / "export.csv"
    path.write_bytes(b"\xef\xbb\xbf" + EXPORT.read_bytes().replace(b"\n", b"\r\n"))
    assert read(path).metrics == read(EXPORT).metrics


def test_a_trainers_own_csv_reads_its_step_column_and_skips_text_and_empty_cells():
    record = read(METRICS_CSV)
    assert record.source == "csv" and record.steps() == list(range(1, 31))
    assert record.metrics[1][REWARD] == 0.914309 and record.metrics[1][LOSS] == 0.00061
    assert record.metrics[5][EVAL_ACCURACY] == 0.9185 and EVAL_ACCURACY not in record.metrics[6]  # eval_step_acc


@pytest.mark.parametrize("header, why", [
    ("Relative Time (Process),hearty-leaf-10 - train/reward", "has no step column"),
    ("Name,State,Runtime,train/reward", "has no step column"),  # wandb's runs table: one row a run
])
def test_a_csv_whose_rows_are_not_steps_is_a_one_line_error_saying_what_to_give(tmp_path, capsys, header, why):
    path = tmp_path / "export.csv"
    path.write_text(f"{header}\n1.5,0.3,2,0.1\n")
    assert main(["doctor", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and str(path) in error and why in error
    assert "step, global_step, iteration or _step" in error


def _tensorboard_csvs(events: Path, folder: Path) -> Path:
    """TensorBoard's Download CSV of every scalar of a run: one `run-.-tag-<tag, / as _>.csv` a tag, `Wall
    time,Step,Value` (its NaN written NaN)."""
    folder.mkdir()
    series: dict[str, list[tuple[int, float]]] = {}
    for file in tensorboard.find_event_files(events):
        for row in tensorboard.read_file(file)[1].rows:
            for tag, value in row.values.items():
                series.setdefault(tag, []).append((row.step, value))
    for tag, points in series.items():
        lines = ["Wall time,Step,Value"] + [f"{1700000000.0 + step},{step},{'NaN' if math.isnan(v) else repr(v)}"
                                            for step, v in points]
        (folder / f"run-.-tag-{tag.replace('/', '_')}.csv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("name", ["trl_gemma3_tensorboard", "verl_agentr1_nan_tensorboard"])
def test_tensorboards_download_csvs_read_as_the_event_files_do(tmp_path, name):
    """The tag is only in the file's name, its `/` written `_`: the names are read by their words, and the run is
    judged as its event files are."""
    folder = _tensorboard_csvs(LOGGED / name, tmp_path / "csv")
    assert _verdict(folder) == _verdict(LOGGED / name)
    assert read(folder).series(REWARD) == read(LOGGED / name).series(REWARD)


def _history_csv(run: Path, path: Path) -> Path:
    """`wandb.Api().run(...).history().to_csv(path)`: pandas' unnamed index column first, a column per key, an empty
    cell where a row did not log the key (and for NaN, pandas' default)."""
    logged = wandb_run.read_datastore(wandb_run.datastore(wandb_run.find_run(run)))
    keys = sorted({key for _, values in logged.rows for key in values})
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["", *keys])
        for index, (_, values) in enumerate(logged.rows):
            writer.writerow([index, *("" if key not in values or math.isnan(values[key]) else repr(values[key])
                                      for key in keys)])
    return path


@pytest.mark.parametrize("name", ["trl_gemma3_wandb", "verl_rllm54_wandb"])
def test_a_wandb_history_saved_with_pandas_reads_as_the_wandb_run_does(tmp_path, name):
    """TRL's own step (train/global_step) over wandb's _step, which counts its calls; wandb's _runtime and
    _timestamp are not metrics."""
    path = _history_csv(LOGGED / name / "wandb", tmp_path / "history.csv")
    record, original = read(path), read(LOGGED / name / "wandb")
    assert record.steps() == original.steps() and record.series(REWARD) == original.series(REWARD)
    assert _verdict(path) == _verdict(LOGGED / name / "wandb")


def test_verls_file_logger_reads_its_nested_data_under_verls_names():
    record = read(VERL_JSONL)
    assert record.source == "verl" and record.steps() == [1, 2, 3]
    assert record.metrics[0] == {EVAL_ACCURACY: 0.0}  # the validation before training: not a training step
    assert record.metrics[1][REWARD] == 0.0 and record.metrics[1][LOSS] == 0.1204916136821339
    assert LOSS not in record.metrics[3]  # null: the logger had no number, and none is invented
    assert record.evidence_by_step[2] == Evidence(str(VERL_JSONL), 3, record.evidence_by_step[2].text)


def test_names_of_no_framework_are_read_by_their_words():
    """tinker-cookbook's `env/all/reward/total` and `optim/entropy`: no framework's names, known by their words."""
    record = scalars.build("jsonl", "keys", "run", [scalars.Start("f", [scalars.Row(
        3, {"env/all/reward/total": 0.6, "optim/entropy": 0.45, "optim/lr": 4e-05}, Evidence("f", 4, "step 3"))])])
    assert record.source == "jsonl" and record.metrics == {3: {REWARD: 0.6, ENTROPY: 0.45}}


def test_a_json_array_of_steps_and_a_torn_last_line_read_as_json_lines(tmp_path):
    lines = (TINKER / "metrics.jsonl").read_text().splitlines()
    array = tmp_path / "metrics.json"
    array.write_text(json.dumps([json.loads(line) for line in lines], indent=1))
    torn = tmp_path / "torn.jsonl"
    torn.write_text("\n".join(lines) + "\n" + lines[-1][:40])
    expected = read(TINKER / "metrics.jsonl").metrics
    assert read(array).metrics == expected and read(torn).metrics == expected
    assert any("1 line(s)" in note and "not JSON objects" in note for note in read(torn).notes)


def test_a_json_file_without_steps_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "summary.jsonl"
    path.write_text('{"train/reward": 0.5, "_runtime": 30}\nnot json\n')
    assert main(["doctor", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "1 JSON object(s) and 1 line(s) that are not one, none with a step" in error


def test_a_folders_files_that_hold_no_steps_are_skipped_and_said(tmp_path):
    """tinker's logs/ holds checkpoints.jsonl beside metrics.jsonl, and a config.json: the run is the steps."""
    folder = shutil.copytree(TINKER, tmp_path / "logs")
    (folder / "checkpoints.jsonl").write_text('{"name": "000020", "batch": 20, "state_path": "tinker://x"}\n')
    (folder / "config.json").write_text('{"learning_rate": 4e-05}\n')
    record = read(folder)
    assert record.steps() == list(range(0, 7)) and record.metrics[6][REWARD] == 0.6965612604454953
    assert any("checkpoints.jsonl" in note and "skipped" in note for note in record.notes)


def test_a_folder_whose_only_csv_has_no_step_says_so(tmp_path):
    (tmp_path / "runs.csv").write_text("Name,State,train/reward\nrun-a,finished,0.5\n")
    with pytest.raises(UnreadableRun, match="runs.csv has no step column"):
        read(tmp_path)


def test_a_foreign_metrics_jsonl_is_not_taken_for_a_grpo_run_directory(tmp_path):
    assert not grpo_run.is_run_dir(TINKER)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, metric_keys.REWARD_MEAN: 0.5}) + "\n")
    assert grpo_run.is_run_dir(tmp_path)


def test_grpo_watch_reads_a_metrics_file_again_as_its_trainer_appends_to_it(tmp_path):
    """verl's file logger appends a line a step: each poll reads the file whole, as the doctor does."""
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("")
    follower = identify(path)
    assert isinstance(follower, DirectoryFollower) and "metrics file" in follower.kind
    for count, line in enumerate(VERL_JSONL.read_text().splitlines(keepends=True), 1):
        with path.open("a") as f:
            f.write(line)
        assert follower.poll() and len(follower.record().metrics) == count
    assert isinstance(identify(tmp_path), DirectoryFollower)
    assert metricfiles.find(tmp_path) == [path]


def test_a_quote_never_closed_is_a_one_line_error_not_a_crash(tmp_path, capsys):
    path = tmp_path / "metrics.csv"
    path.write_text("step,reward\n1,\"0.5\n" + "2,0.25\n" * 40000)
    assert main(["doctor", str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "is not a CSV the doctor can read past line" in error
