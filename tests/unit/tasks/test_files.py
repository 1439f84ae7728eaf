"""Reading rows from JSONL, JSON, Parquet and CSV files, finding a split's files, and the errors for bad files."""

import csv
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpo.errors import ConfigError
from grpo.tasks.files import expand_files, read_files, split_files

ROWS = [
    {"prompt": "What is 1 + 1?", "answer": "2", "level": "easy"},
    {"prompt": "What is 2 + 3?", "answer": "5", "level": "hard"},
]


def write_rows(path: Path, rows: list[dict]) -> Path:
    """`rows` in the format `path`'s suffix names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_every_format_reads_the_same_rows_and_columns(tmp_path, suffix):
    table = read_files([write_rows(tmp_path / f"train{suffix}", ROWS)])
    assert table.rows == ROWS
    assert table.columns == ["prompt", "answer", "level"]
    assert table.source == str(tmp_path / f"train{suffix}")


def test_each_row_knows_where_it_came_from(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n")  # a blank line is skipped
    csv_file = tmp_path / "b.csv"
    csv_file.write_text('prompt,answer\n"two\nlines",1\nq,2\n')  # a quoted field spans lines 2-3
    parquet = write_rows(tmp_path / "c.parquet", ROWS)
    assert read_files([jsonl]).where == [f"{jsonl}:1", f"{jsonl}:3"]
    assert read_files([csv_file]).where == [f"{csv_file}:2", f"{csv_file}:4"]
    assert read_files([parquet]).where == [f"{parquet} row 1", f"{parquet} row 2"]


def test_files_of_a_split_are_joined_and_a_column_one_lacks_is_none(tmp_path):
    a = write_rows(tmp_path / "a.jsonl", [{"prompt": "p1", "answer": "1"}])
    b = write_rows(tmp_path / "b.csv", [{"prompt": "p2", "hint": "h"}])
    table = read_files([a, b])
    assert table.columns == ["prompt", "answer", "hint"]
    assert table.rows == [{"prompt": "p1", "answer": "1", "hint": None}, {"prompt": "p2", "hint": "h", "answer": None}]
    assert table.source == f"{a}, {b}"


def test_a_json_file_is_one_array_of_rows_or_json_lines(tmp_path):
    """json.dump writes an array (Open-Reasoner-Zero's data); `datasets`' to_json writes JSON Lines under .json."""
    array = tmp_path / "a.json"
    array.write_text(json.dumps(ROWS, indent=2))
    lines = tmp_path / "b.json"
    lines.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    assert read_files([array]).rows == ROWS and read_files([lines]).rows == ROWS
    assert read_files([array]).where == [f"{array} row 1", f"{array} row 2"]
    assert read_files([lines]).where == [f"{lines}:1", f"{lines}:2"]
    write_rows(tmp_path / "dir" / "train.json", ROWS)
    assert split_files(tmp_path / "dir", "train", "task.train_files") == [tmp_path / "dir" / "train.json"]


@pytest.mark.parametrize("name", ["orz.json", "orz.jsonl"])
def test_rows_that_are_arrays_read_as_numbered_columns_and_say_so(tmp_path, name):
    row = [{"from": "human", "value": "q"}, {"from": "assistant", "ground_truth": {"value": "1"}}]
    path = tmp_path / name
    path.write_text(json.dumps([row, row]) if name.endswith(".json") else json.dumps(row) + "\n")
    table = read_files([path])
    assert table.columns == ["0", "1"] and table.rows[0] == {"0": row[0], "1": row[1]}
    assert table.notes == ["rows that are JSON arrays read item i as column i"]


def test_parquet_keeps_chat_messages_as_lists_of_dicts(tmp_path):
    rows = [{"chat": [{"role": "user", "content": "hi"}], "n": 3}]
    assert read_files([write_rows(tmp_path / "x.parquet", rows)]).rows == rows


@pytest.mark.parametrize("name,text,message", [
    ("x.jsonl", '{"prompt": "a"}\n{"prompt": \n', r"x.jsonl:2: not valid JSON"),
    ("x.jsonl", '{"prompt": "a"}\n3\n', (r"x.jsonl:2: each row must be a JSON object of columns \(or an array, "
                                        r"read as columns 0, 1, ...\), got int")),
    ("x.json", '[{"prompt": "a"}, "b"]', r"x.json row 2: each row must be a JSON object of columns .*, got str"),
    ("x.json", '[{"prompt": "a"},\n', r"x.json: not valid JSON"),
    ("x.json", '{"prompt": "a"}\n{"prompt": \n', r"x.json:2: not valid JSON"),
    ("x.jsonl", b'{"prompt": "\xff"}\n', r"x.jsonl: not UTF-8 text"),
    ("x.csv", "prompt,answer\na,1\nb,2,3\n", r"x.csv:3: 3 fields but the header names 2"),
    ("x.csv", "prompt,prompt\na,1\n", r"x.csv:1: the header names 'prompt' more than once"),
    ("x.parquet", "not parquet at all", r"x.parquet: not a readable Parquet file"),
])
def test_a_bad_file_is_a_one_line_error_at_its_place(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError, match=message) as info:
        read_files([path])
    assert "\n" not in str(info.value)


def test_parquet_without_pyarrow_names_the_extra_to_install(tmp_path, monkeypatch):
    path = write_rows(tmp_path / "x.parquet", ROWS)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # makes `import pyarrow.parquet` fail
    with pytest.raises(ConfigError, match=r"x.parquet: reading Parquet needs pyarrow: pip install 'grpo\[data\]'"):
        read_files([path])


# --- naming files ------------------------------------------------------------------------------


def test_explicit_files_and_globs(tmp_path, monkeypatch):
    for name in ("part-2.jsonl", "part-1.jsonl", "other.csv"):
        write_rows(tmp_path / name, ROWS)
    monkeypatch.chdir(tmp_path)  # relative names are relative to the working directory
    assert expand_files(["part-*.jsonl", "other.csv"], "task.train_files") == [
        Path("part-1.jsonl"), Path("part-2.jsonl"), Path("other.csv")]


@pytest.mark.parametrize("patterns,message", [
    (["missing.jsonl"], r"task.train_files: no file .*missing.jsonl"),
    (["nothing-*.jsonl"], r"task.train_files: .*nothing-\*.jsonl matches no file"),
    (["data.txt"], r"task.train_files: data.txt is not a supported file; use .jsonl, .json, .parquet, .csv"),
])
def test_files_that_cannot_be_read_are_named(tmp_path, monkeypatch, patterns, message):
    (tmp_path / "data.txt").write_text("[]")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        expand_files(patterns, "task.train_files")


def test_a_split_is_found_by_name_or_as_hub_style_shards(tmp_path):
    write_rows(tmp_path / "flat" / "train.csv", ROWS)
    write_rows(tmp_path / "flat" / "training_notes.jsonl", ROWS)  # not the train split: another name
    write_rows(tmp_path / "hub" / "data" / "train-00001-of-00002.parquet", ROWS)
    write_rows(tmp_path / "hub" / "data" / "train-00000-of-00002.parquet", ROWS)
    assert split_files(tmp_path / "flat", "train", "task.train_files") == [tmp_path / "flat" / "train.csv"]
    assert [p.name for p in split_files(tmp_path / "hub", "train", "task.train_files")] == [
        "train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]


def test_a_missing_split_says_what_was_expected(tmp_path):
    write_rows(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(ConfigError, match=f"no validation split in {tmp_path}: expected validation.jsonl, "
                                          r"validation.json, validation.parquet, validation.csv or shards validation-\*.parquet "
                                          r"there or in data/ \(or set task.test_files, or task.held_out=N: N problems drawn out of "
                                          r"the training data\)"):
        split_files(tmp_path, "validation", "task.test_files")
    with pytest.raises(ConfigError, match="task.path: no directory .*nope"):
        split_files(tmp_path / "nope", "train", "task.train_files")
