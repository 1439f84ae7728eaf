"""The dataset task: column mapping, text and chat prompts, gold extraction, every column for rewards, errors."""

import json
from pathlib import Path

import pytest

from grpo.config import TaskConfig, load_config
from grpo.errors import ConfigError
from grpo.tasks import build_task, reward_columns

from .test_files import write_rows

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say a"}]


def dataset(tmp_path: Path, train: list[dict], test: list[dict] | None = None, suffix: str = ".jsonl", **keys):
    write_rows(tmp_path / f"train{suffix}", train)
    write_rows(tmp_path / f"test{suffix}", test or train)
    return build_task(TaskConfig(name="dataset", path=str(tmp_path), **keys))


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_text_prompts_with_a_column_mapping_from_every_format(tmp_path, suffix):
    rows = [{"problem": f"What is {i} + 1?", "solution": f"so #### {i + 1}", "level": str(i)} for i in range(3)]
    task = dataset(tmp_path, rows, suffix=suffix, prompt_column="problem", answer_column="solution",
                   gold_pattern=r"####\s*(\S+)")
    assert task.num_train == 3
    problems = task.eval_problems(None)
    assert [p.question for p in problems] == [r["problem"] for r in rows]
    assert [p.gold for p in problems] == ["1", "2", "3"]
    assert [p.messages for p in problems] == [None] * 3
    assert [dict(p.columns) for p in problems] == [{k: v for k, v in r.items() if k != "problem"} for r in rows]


def test_chat_prompts_are_kept_as_given_and_their_question_is_the_last_user_message(tmp_path):
    task = dataset(tmp_path, [{"chat": CHAT, "label": "a"}], prompt_column="chat", answer_column="label")
    [problem] = task.eval_problems(None)
    assert list(problem.messages) == CHAT
    assert problem.question == "Say a" and problem.gold == "a"


def test_every_column_but_the_prompt_reaches_reward_functions_with_gold_and_question(tmp_path):
    rows = [{"prompt": "p0", "answer": 7, "target": "x", "meta": {"k": 1}, "completion": "c0"},
            {"prompt": "p1", "answer": None, "target": "y", "meta": None, "completion": "c1"}]
    task = dataset(tmp_path, rows)
    assert reward_columns(task.eval_problems(None)) == {  # TRL leaves out `prompt` and `completion`
        "answer": [7, None], "target": ["x", "y"], "meta": [{"k": 1}, None],
        "gold": ["7", ""], "question": ["p0", "p1"],  # a number is its text; no answer is no gold
    }


def test_gold_pattern_takes_the_last_match_and_its_first_group(tmp_path):
    rows = [{"prompt": "p", "answer": "ANSWER: 1 ... ANSWER: 2"}, {"prompt": "q", "answer": "none here"}]
    task = dataset(tmp_path, rows, gold_pattern=r"ANSWER: (\d+)")
    assert [p.gold for p in task.eval_problems(None)] == ["2", ""]  # no match: no gold, so unscorable
    whole = dataset(tmp_path, rows, gold_pattern=r"\d+")
    assert [p.gold for p in whole.eval_problems(None)] == ["2", ""]


def test_nested_fields_sharegpt_prompts_and_boxed_golds_load_and_the_load_says_how(tmp_path, caplog):
    """Other frameworks' rows: ShareGPT's {from, value} messages, the gold in a dict column's field, and a MATH
    solution whose last \\boxed{} is the answer; each way of reading is said once at load."""
    solution = r"So $x=\boxed{\frac{1}{4}}$."
    rows = [{"conversations": [{"from": "human", "value": "x?"}], "reward_model": {"solution": solution}}]
    with caplog.at_level("INFO", logger="grpo.tasks.dataset"):
        task = dataset(tmp_path, rows, prompt_column="conversations", answer_column="reward_model.solution")
    [problem] = task.eval_problems(None)
    assert problem.messages == ({"role": "user", "content": "x?"},) and problem.gold == r"\frac{1}{4}"
    assert reward_columns([problem])["reward_model"] == [{"solution": solution}]  # the column reaches rewards whole
    assert "chat messages given as ShareGPT's {from, value} read as {role, content}" in caplog.text
    assert r"1 golds read from the answer's last \boxed{} (MATH's format" in caplog.text


def test_a_prompt_read_from_a_field_leaves_its_column_to_the_rewards(tmp_path):
    rows = [{"0": {"from": "human", "value": "q"}, "1": {"ground_truth": {"value": "7"}}}]
    [problem] = dataset(tmp_path, rows, prompt_column="0.value", answer_column="1.ground_truth.value").eval_problems(1)
    assert (problem.question, problem.gold, sorted(problem.columns)) == ("q", "7", ["0", "1"])


def test_without_an_answer_column_the_gold_is_empty(tmp_path):
    task = dataset(tmp_path, [{"prompt": "p", "target": "a"}], answer_column=None)
    assert task.train_problem(0, 0).gold == ""


def test_data_made_for_trl_without_the_default_answer_column_loads_without_gold_and_says_so(tmp_path, caplog):
    """TRL has no gold column: its data (open-r1's `solution`, Countdown's `target`) lacks `answer`. Left at its
    default, task.answer_column then means no gold, said in the load line; a named column stays required."""
    rows = [{"prompt": "p", "solution": "1"}]
    with caplog.at_level("INFO", logger="grpo.tasks.dataset"):
        task = dataset(tmp_path, rows)
    assert [p.gold for p in task.eval_problems(None)] == [""]
    assert reward_columns(task.eval_problems(None))["solution"] == ["1"]
    assert ("no column 'answer', so no gold answers, as in TRL: the reward functions read their own columns; "
            "task.answer_column=COLUMN names the gold's column") in caplog.text
    one_line_error(tmp_path, rows, r"has no column 'label' \(task.answer_column\)", answer_column="label")


def test_train_and_test_files_replace_the_directory(tmp_path, monkeypatch):
    write_rows(tmp_path / "a.jsonl", [{"prompt": "a1"}, {"prompt": "a2"}])
    write_rows(tmp_path / "b.csv", [{"prompt": "b1"}])
    monkeypatch.chdir(tmp_path)
    task = build_task(TaskConfig(name="dataset", train_files=["a.jsonl", "b.csv"], test_files=["b.csv"],
                                 answer_column=None, max_train_problems=2))
    assert task.num_train == 2 and [p.question for p in task.eval_problems(None)] == ["b1"]


def test_split_names_choose_the_files(tmp_path):
    write_rows(tmp_path / "train.jsonl", [{"prompt": "t", "answer": "1"}])
    write_rows(tmp_path / "validation.jsonl", [{"prompt": "v", "answer": "1"}])
    task = build_task(TaskConfig(name="dataset", path=str(tmp_path), test_split="validation"))
    assert [p.question for p in task.eval_problems(None)] == ["v"]


def test_the_keys_load_from_yaml_with_overrides(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"task: {{name: dataset, path: {tmp_path}, prompt_column: chat, answer_column: null}}\n")
    cfg = load_config(config, ["task.train_files=[a.jsonl, b.parquet]", "task.gold_pattern=####(.*)"])
    assert (cfg.task.name, cfg.task.prompt_column, cfg.task.answer_column) == ("dataset", "chat", None)
    assert cfg.task.train_files == ["a.jsonl", "b.parquet"] and cfg.task.gold_pattern == "####(.*)"


# --- errors: one line each, at the file and row where it helps ------------------------------------


def one_line_error(tmp_path, train, match, test=None, **keys):
    with pytest.raises(ConfigError, match=match) as info:
        dataset(tmp_path, train, test, **keys)
    assert "\n" not in str(info.value)


def test_an_unknown_column_names_the_columns_that_exist(tmp_path):
    one_line_error(tmp_path, [{"question": "q", "answer": "1"}],
                   r"train.jsonl has no column 'prompt' \(task.prompt_column\); its columns: question, answer$")
    one_line_error(tmp_path, [{"prompt": "q", "reward_model": {"ground_truth": "1", "style": "rule"}}],
                   r"has no column 'reward_model.answer' \(task.answer_column\); its columns: prompt, reward_model "
                   r"\(reward_model.ground_truth, reward_model.style\); set task.answer_column",
                   answer_column="reward_model.answer")
    one_line_error(tmp_path, [{"prompt": "q", "solution": "1"}],
                   r"has no column 'gold_text' \(task.answer_column\); its columns: prompt, solution; set "
                   r"task.answer_column to the column holding the gold answer, or task.answer_column=null if your "
                   r"reward functions read their own columns \(as TRL's do\)$", answer_column="gold_text")


def test_an_empty_split_is_named(tmp_path):
    write_rows(tmp_path / "train.jsonl", [{"prompt": "q", "answer": "1"}])
    (tmp_path / "test.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match=f"{tmp_path / 'test.jsonl'} has no problems: it has no rows"):
        build_task(TaskConfig(name="dataset", path=str(tmp_path)))


@pytest.mark.parametrize("chat,message", [
    ([], r"train.jsonl:1: column 'chat' holds an empty list of chat messages"),
    (["hi"], r"train.jsonl:1: column 'chat' holds chat messages, but message 0 is 'hi'; each must be "
             r"\{\"role\": \"...\", \"content\": \"...\"\} with text values"),
    ([{"role": "user", "content": "a"}, {"role": "user"}], r"message 1 is \{'role': 'user'\}"),
    ([{"role": "user", "content": ["multimodal"]}], r"message 0 is \{'role': 'user', 'content': \['multimodal'\]\}"),
])
def test_a_messages_column_of_the_wrong_shape_names_the_row_and_message(tmp_path, chat, message):
    one_line_error(tmp_path, [{"chat": chat, "answer": "1"}], message, prompt_column="chat")


@pytest.mark.parametrize("prompt,message", [
    ("  ", r"test.jsonl:2: no prompt \(column 'prompt' is empty\)"),
    (None, r"test.jsonl:2: no prompt \(column 'prompt' is empty\)"),
    (3, r"test.jsonl:2: column 'prompt' must hold the prompt as text or a list of \{role, content\} messages, "
        r"got int"),
])
def test_a_row_without_a_usable_prompt_names_its_line(tmp_path, prompt, message):
    good = {"prompt": "q", "answer": "1"}
    one_line_error(tmp_path, [good], message, test=[good, {"prompt": prompt, "answer": "1"}])


@pytest.mark.parametrize("answer,message", [
    (["1", "2"], (r"train.jsonl:1: column 'answer' holds 2 answers \(\['1', '2'\]\), and a gold is one answer: set "
                  r"task.answer_column to a column holding one, or task.answer_column=null and compare with the list "
                  r"in your reward function \(it gets the column as `answer`\)$")),
    ({"ground_truth": "1", "style": "rule"}, (r"train.jsonl:1: column 'answer' holds a dict, not the answer: name one "
                                              r"of its fields, task.answer_column=answer.ground_truth or answer.style$")),
])
def test_an_answer_that_is_not_one_answer_names_its_line_and_what_to_set(tmp_path, answer, message):
    one_line_error(tmp_path, [{"prompt": "q", "answer": answer}], message)


def test_a_prompt_that_is_a_dict_names_its_fields(tmp_path):
    one_line_error(tmp_path, [{"0": {"from": "human", "value": "q"}, "answer": "1"}],
                   r"train.jsonl:1: column '0' holds a dict, not the prompt: name one of its fields, "
                   r"task.prompt_column=0.from or 0.value$", prompt_column="0")


def test_a_system_prompt_with_chat_prompts_is_refused_not_ignored(tmp_path):
    one_line_error(tmp_path, [{"chat": CHAT, "answer": "a"}], r"train.jsonl:1: task.system_prompt applies to text "
                   r"prompts, but column 'chat' holds chat messages, used as given", prompt_column="chat",
                   system_prompt="You are helpful.")


@pytest.mark.parametrize("column,fix", [("gold", " or set task.answer_column=gold"), ("completions", "$")])
def test_a_column_named_like_a_reward_keyword_must_be_the_one_it_stands_for(tmp_path, column, fix):
    one_line_error(tmp_path, [{"prompt": "q", "answer": "1", column: "x"}],
                   f"column '{column}' clashes with the '{column}' keyword reward functions are given; "
                   f"rename the column{fix}")


def test_a_question_column_beside_the_prompt_reaches_rewards_as_it_is_as_in_trl(tmp_path):
    """GSM8K mapped for TRL keeps `question` beside the chat `prompt`; grpo's `question` (the prompt as text) is
    given only to data without one."""
    task = dataset(tmp_path, [{"prompt": CHAT, "question": "the data's", "answer": "a"}])
    assert reward_columns(task.eval_problems(None))["question"] == ["the data's"]
    task = dataset(tmp_path, [{"prompt": CHAT, "answer": "a"}])
    assert reward_columns(task.eval_problems(None))["question"] == ["Say a"]


def test_a_gold_column_can_be_the_answer_column(tmp_path):
    task = dataset(tmp_path, [{"prompt": "q", "gold": "#### 4"}], answer_column="gold", gold_pattern="#### (.*)")
    assert reward_columns(task.eval_problems(None))["gold"] == ["4"]


@pytest.mark.parametrize("keys,message", [
    ({}, r"no train data: set task.path to a directory with the split files or to hub:ORG/NAME, "
         r"or set task.train_files"),
    ({"train_files": ["t.jsonl"]}, r"no test data: .* or set task.test_files"),
    ({"path": "hub"}, r"task.path=hub is GSM8K's shorthand; name the dataset: hub:ORG/NAME"),
    ({"path": "hub:"}, r"task.path='hub:' names no dataset"),
    ({"gold_pattern": "(unclosed"}, r"task.gold_pattern='\(unclosed' is not a valid regular expression"),
])
def test_where_the_data_is_must_be_said(tmp_path, monkeypatch, keys, message):
    write_rows(tmp_path / "t.jsonl", [{"prompt": "q", "answer": "1"}])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        build_task(TaskConfig(name="dataset", **keys))


def test_the_hub_needs_the_datasets_package_or_says_so(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ConfigError, match=r"task.path=hub:org/name needs the `datasets` package: "
                                          r"pip install 'grpo\[data\]'"):
        build_task(TaskConfig(name="dataset", path="hub:org/name"))


def test_problem_ids_name_the_task_split_and_row(tmp_path):
    task = dataset(tmp_path, [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}])
    assert sorted(task.train_problem(i, 0).id for i in range(2)) == ["dataset-train-0", "dataset-train-1"]
    assert json.dumps([p.id for p in task.eval_problems(1)]) == '["dataset-test-0"]'


def test_an_evaluation_reads_only_its_split(tmp_path):
    (tmp_path / "test.jsonl").write_text('{"prompt": "p", "answer": "1"}\n')
    task = build_task(TaskConfig(name="dataset", test_files=[str(tmp_path / "test.jsonl")]), splits=("test",))
    assert [p.gold for p in task.eval_problems(None)] == ["1"] and task.num_train == 0


def test_relative_paths_are_saved_absolute(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    for split in ("train", "test"):
        (tmp_path / "data" / f"{split}.jsonl").write_text('{"prompt": "p", "answer": "1"}\n')
    monkeypatch.chdir(tmp_path)
    cfg = TaskConfig(name="dataset", path="data")
    build_task(cfg)
    assert cfg.path == str(tmp_path / "data")
    cfg = TaskConfig(name="dataset", train_files=["data/train.jsonl"], test_files=["data/*.jsonl"])
    build_task(cfg)
    assert cfg.train_files == [str(tmp_path / "data" / "train.jsonl")]
    assert cfg.test_files == [str(tmp_path / "data" / "*.jsonl")]


def test_rows_in_memory_read_like_files():
    from grpo.tasks.files import register_memory

    path = register_memory("unit-test", {"train": [{"prompt": "p", "answer": "2"}], "test": [{"prompt": "q", "answer": None}]})
    task = build_task(TaskConfig(name="dataset", path=path))
    assert task.train_problem(0, 0).gold == "2" and task.eval_problems(None)[0].gold == ""
    with pytest.raises(ConfigError, match="no in-memory dataset 'other' in this process"):
        build_task(TaskConfig(name="dataset", path="memory:other"))


def test_prompts_ending_with_the_assistants_message_are_counted_at_load(tmp_path, caplog):
    """Whole conversations in the prompt column look like prefills: the load says how many end so."""
    caplog.set_level("INFO", logger="grpo.tasks.dataset")
    answered = CHAT + [{"role": "assistant", "content": "a"}]
    dataset(tmp_path, [{"chat": answered, "label": "a"}, {"chat": CHAT, "label": "a"}], prompt_column="chat",
            answer_column="label")
    assert "1 prompts end with the assistant's message (e.g. " in caplog.text
    assert "leave it out of the prompt column" in caplog.text


def test_a_prompt_ending_with_a_system_message_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"column 'chat''s prompt ends with the system's message; a prompt ends "
                                          r"with the user's \(or a tool's\) message"):
        dataset(tmp_path, [{"chat": CHAT[:1], "label": "a"}], prompt_column="chat", answer_column="label")
