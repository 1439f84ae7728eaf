"""Step metrics from the console log of a framework the doctor has no reader for (OpenRLHF, NeMo-RL, ROLL,
slime, nanoGPT-style loops, a user's own script), whatever the shape of its lines:

    step 12 | loss: 0.31 | reward: 0.52          Step 12/500 - train/reward=0.5 - actor/pg_loss=0.1
    [step 12] loss 0.31, reward 0.52             {"global_step": 12, "rollout/score": 0.5, "kl": 0.01}

A line is a step's when it names a step (`step 12`, `step: 12`, `Step 12/500` with the run's total,
`[step 12]`, `global_step=12`, `iter 12`, `Iteration 12`, slime's `rollout 12:`, a dict's step key, ms-swift's
`"global_step/max_steps": "12/500"`, LLaMA-Factory's `"current_steps": 12` beside `"total_steps": 500`) and at
least two metrics the doctor knows: `name: number`, `name=number`, a cell `name number` of a `|`- or comma-separated
list, or a table's name cell and the number cell after it.
Two shapes spread a step over lines: a step line without metrics followed at once by its metrics (a key/value
table, a pretty-printed dict), and a table whose header names a step column and metric columns, one row a step:
its cells parted by `|` or tabs, or aligned by runs of spaces (pandas' print of a metrics frame, its index
column dropped; a user's own summary), a row of ellipses in it (rows the printer or the user left out) not
its end.
Names are known by their words, whatever their case, separators or role prefix (`train/`, `actor/`, `critic/`,
`rollout/`, `policy/`, tinker's `env/all/` and `optim/`): `avg_reward`, `Train/Reward`, `Total rewards mean`,
`env/all/reward/total` and `critic/score/mean` are the reward, and the task's raw score ranks over a shaped reward
on one line (slime's `rollout/raw_reward` over its normalised `rollout/rewards`).

A line that says it saved a checkpoint whose folder names the step (`.../global_step_350`, `.../checkpoint-500`)
is that step's checkpoint, the one to resume from when a later step goes wrong.

Conservative on purpose, since a wrong step misleads more than a missing one: the learning rate, times,
throughput and epochs are never metrics, a `*_std`, `*_min` or `*_max` is not the mean, an evaluation's
numbers are not training's, and a progress bar's counter is not a step (a training bar's is the run's
progress, said when no step's metrics were logged). An evaluation's score is read as such (`eval_accuracy`, held
apart from the training reward): its name's last word is the measure, the words between `eval` and it name the
evaluated set (SkyRL's `eval/sampled/train/avg_score`, verl's `val-core/openai/gsm8k/reward/mean@1`); a line that
names a step and holds only evaluation scores is that step's evaluation, one number beside the step enough.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from grpo.tools.doctor.record import (
    ACCURACY,
    ADVANTAGE_STD,
    CRITIC_GRAD_NORM,
    CRITIC_LOSS,
    ENTROPY,
    EVAL_ACCURACY,
    GRAD_NORM,
    KL,
    LENGTH,
    LOSS,
    REWARD,
    REWARD_STD,
    TRUNCATED,
    ZERO_VARIANCE,
)
from grpo.tools.doctor.textlog import as_step

MIN_METRICS = 2  # known metrics a step needs: one number beside a step is too often something else
BLOCK_GAP = 3  # lines (a caption, a table's top border) that may come between a step line and its metrics

# The step, however a loop prints it; a dict's global step (or wandb's `_step`) is the run's own count.
# slime's `rollout N: {...}` is its step too (the rollout's id), only in that shape: "rollout 3/8" is progress.
_STEP = re.compile(
    r"(?<![\w./-])(?:(?:train|trainer)/)?(global[_ ]step|current_steps?|_step|step|iteration|iter|"
    r"rollout(?=\s+\d{1,12}:))"
    r"(?:/max_steps)?['\"]?"
    r"(?:\s*[:=#]\s*|\s+|\s*\[\s*)['\"]?(\d{1,12})(?:\s*/\s*(\d{1,12}))?(?![\d%]|\.\d|[eE][-+]?\d)", re.I)
_STEP_COLUMNS = frozenset({"step", "steps", "global_step", "iteration", "iter"})
# MiniMind's trainers count the step within its epoch: `Epoch:[2/3](150/9751)` is the run's step 9751 + 150.
_EPOCH_STEP = re.compile(r"\bepoch\s*:?\s*\[(\d{1,6})/(\d{1,6})\]\s*\((\d{1,12})/(\d{1,12})\)", re.I)
# A loop whose unit is the epoch prints a line an epoch opening with its count (`  Epoch   3 | loss=0.1 | reward=5.6`):
# that count is its step, where the line names no step of its own.
_EPOCH_LINE = re.compile(r"^\s*epoch\s*[:#]?\s*(\d{1,6})(?:\s*/\s*(\d{1,6}))?\s*(?:[|│,:]|\s-\s)", re.I)
# A dict's key for the run's total beside its step (LLaMA-Factory's trainer log: `"current_steps": 10,
# "total_steps": 1287`): the run's total, as `Step 10/1287` says it.
_TOTAL = re.compile(r"(?<![\w./-])['\"]?(?:total|max)_steps['\"]?\s*[:=]\s*(\d{1,12})(?![\d.])")
# A tqdm bar (`Training Progress:  45%|####  | 9/20 [00:03<00:04, 2.1it/s]`): progress, not a step's metrics.
_BAR = re.compile(r"\d{1,3}%\|[^|]*\|\s*(\d{1,12})/(?:\d{1,12}|\?)(?:\s*\[[^\]]*\])?")
_TRAINING_BAR = re.compile(r"train|episode|step|iteration", re.I)
# A bar of the data's preparation (HF datasets' `Generating train split`, `Map`, `Filter`) or of an epoch: not steps.
_PREPARING_BAR = re.compile(r"\bsplit\b|\bmap\b|\bfilter\b|generating|loading|tokeniz|download|epoch", re.I)
# The run's own word that training ended (a wrapper's `Killed` after it is the launcher stopping its processes).
_FINISHED = re.compile(r"\btrain(?:ing)? (?:is |has )?(?:complete[ds]?|finished|done)\b|\bfinished training\b", re.I)
_CELLS = re.compile(r"\s*(?:\||│|┃| - |[,;\t])\s*")
_TABLE = re.compile(r"\||│|┃|\t")
_BORDER = re.compile(r"^[\s|│┃+=:\-─━═╒╤╕╞╪╡╘╧╛├┼┤└┴┘┌┬┐╭╮╰╯]*$")
_ELIDED = re.compile(r"^[\s|│┃]*(?:(?:\.{2,}|…)[\s|│┃]*)+$")  # a table's left-out rows: `...`, pandas' `..  ...`
_SPACED = re.compile(r"\s{2,}")  # the gap between the columns of a table aligned by spaces
_NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?:nan|inf(?:inity)?)\b)"
_WRAPPED = r"(?:np\.float(?:16|32|64)\(|(?:torch\.)?tensor\()?"
_NAME = r"[A-Za-z_][\w/.@-]*"
_QUOTE = "['\"]?"
_VALUE = rf"{_QUOTE}{_WRAPPED}(?P<value>{_NUMBER})(?P<pct>%)?"
# A cell that is one pair: its name may have words (`Grad. Norm: 0.4`), then `:` or `=`, or a space alone.
_CELL_PAIR = re.compile(rf"{_QUOTE}(?P<name>{_NAME}(?: {_NAME}){{0,3}}){_QUOTE}\s*(?P<sep>[:=]|\s)\s*{_VALUE}\)?"
                        rf"{_QUOTE}(?:\s*[A-Za-z/]{{1,10}})?", re.I)
# Pairs inside free text (`loss=0.3 reward=0.5`): one word a name, and `:` or `=` always.
_PAIR = re.compile(rf"(?<![\w/.@-]){_QUOTE}(?P<name>{_NAME}){_QUOTE}\s*[:=]\s*{_VALUE}(?![\w.]*\d)", re.I)
_CELL_NAME = re.compile(rf"{_NAME}(?: {_NAME}){{0,3}}")
_HEADER_CELL = re.compile(r"[A-Za-z_][\w/.@ -]*")  # a column's name: `Training Loss`, `rewards / format`
_CELL_NUMBER = re.compile(rf"{_VALUE}", re.I)
_EDGES = " \t{}[]():"

# Words that only say whose number it is, dropped from a name's start (`actor/pg_loss` is `pg_loss`). A
# critic's loss and gradient norm are its own; its other numbers (verl's `critic/score/mean`) are the run's.
_ROLES = frozenset({"train", "training", "actor", "critic", "rollout", "rollouts", "policy", "trainer", "metrics",
                    "ppo", "grpo", "agent", "objective", "batch", "optim", "env", "envs", "all"})
_MEAN = frozenset({"mean", "avg", "average"})
_OTHER_STATS = frozenset({"std", "stdev", "min", "max", "var", "variance", "median", "sum", "p50", "p90", "p95",
                          "p99", "count"})
_EVAL = frozenset({"eval", "evaluation", "val", "valid", "validation", "test"})
# A name's words (roles and `mean` dropped, joined by `_`) -> (canonical name, rank): of two names for one
# measure on a line, the lower rank wins (verl's old `entropy_loss` is the entropy only without `entropy`).
_NAMES = {
    # The task's own score before any shaping ranks first: slime's `rollout/rewards` beside `rollout/raw_reward`
    # is the group-normalised reward (about 0 by construction), verl's `critic/rewards` the score less the KL.
    **dict.fromkeys(("score", "scores", "task_reward", "raw_reward", "raw_rewards", "episode_reward", "reward_score"),
                    (REWARD, 0)),
    **dict.fromkeys(("reward", "rewards", "total_reward", "total_rewards", "reward_total", "grouped_reward",
                     "grouped_rewards"),
                    (REWARD, 1)),
    **dict.fromkeys(("acc", "accuracy", "correct", "correctness", "correct_ratio", "pass@1", "pass_at_1",
                     "pass_rate", "solve_rate", "success_rate"), (ACCURACY, 0)),
    **dict.fromkeys(("loss", "pg_loss", "surrogate_loss"), (LOSS, 0)),
    **dict.fromkeys(("grad_norm", "gradient_norm", "grad_norms", "gnorm"), (GRAD_NORM, 0)),
    **dict.fromkeys(("kl", "kl_div", "kl_divergence", "approx_kl", "ref_kl", "kl_ref", "kl_loss"), (KL, 0)),
    "entropy": (ENTROPY, 0), "entropy_loss": (ENTROPY, 1),
    **dict.fromkeys(("response_length", "response_len", "completion_length", "completion_len", "completions_length",
                     "gen_len", "gen_length", "generation_length", "output_len", "output_length", "length",
                     "seq_length", "seq_len", "seqlen", "sequence_length", "resp_len", "response_lengths"),
                    (LENGTH, 0)),
    **dict.fromkeys(("response_length_clip_ratio", "completions_clipped_ratio", "completion_clipped_ratio",
                     "clipped_ratio", "truncated", "truncated_frac", "truncated_ratio", "truncation_rate",
                     "truncation_ratio", "no_eos_ratio", "no_eos_ratios"), (TRUNCATED, 0)),
    **dict.fromkeys(("vf_loss", "value_loss"), (CRITIC_LOSS, 0)),
}
_CRITIC = {LOSS: CRITIC_LOSS, GRAD_NORM: CRITIC_GRAD_NORM}
_ADVANTAGES = frozenset({"adv", "advantage", "advantages"})


@dataclass(frozen=True)
class StepLine:
    step: int
    total: int | None  # the run's steps, where the line says `Step N/M`
    metrics: dict[str, float]  # canonical name -> value
    counter: str = "step"  # the word that counts it (`step`, `iter`, `rollout`): a log may keep two counts


@dataclass(frozen=True)
class Found:
    """A step read, with the line that names it (the evidence)."""

    line: int
    text: str
    step: StepLine


# A checkpoint saved: a line that says it saves (or names the step's folder, verl's `local_global_step_folder:`) a
# path whose last part names the step (`.../global_step_350`, `.../checkpoint-500`, `.../ckpt_40`); a load is not.
_SAVED_STEP = re.compile(r"(?<=/)(?:global_step|checkpoint|ckpt)[_-]?(\d{1,12})(?![\w.])")


def saved_checkpoint(line: str) -> tuple[int, str] | None:
    """(step, path) of the checkpoint a line says was saved, or None."""
    lower = line.lower()
    if ("sav" not in lower and "step_folder" not in lower) or "load" in lower or "resum" in lower:
        return None
    found = _SAVED_STEP.search(line)
    if found is None:
        return None
    start = max(line.rfind(" ", 0, found.start()), line.rfind(":", 0, found.start())) + 1
    return int(found.group(1)), line[start:found.end()].strip("'\",")


def says_finished(line: str) -> bool:
    """Whether a line is the run's own word that training ended (`Training completes!`, `Finished training`)."""
    return ("train" in line or "Train" in line) and _FINISHED.search(line) is not None


def shows_steps(lines: list[str]) -> bool:
    """Whether these cleaned lines show a step in any shape this module reads."""
    reader = StepReader()
    return any(reader.feed(number, line) for number, line in enumerate(lines, 1)) or bool(reader.flush())


@dataclass
class _Block:
    """A step line without its metrics, and the lines after it that bring them."""

    line: int
    text: str
    step: int
    total: int | None
    metrics: dict[str, tuple[float, int]]
    counter: str
    gap: int = 0  # lines without a pair since the step line, before the metrics began
    started: bool = False


@dataclass
class _Columns:
    """A table's header: which column is the step, and the doctor's name of each metric column."""

    width: int
    step: int
    names: dict[int, tuple[str, int]]
    spaced: bool = False  # its cells aligned by runs of spaces, not parted by `|` or tabs


@dataclass
class StepReader:
    """Cleaned lines in, in order, and the steps they show out (`feed`); `flush` once no more will come.
    `progress`: the last count a training progress bar showed."""

    progress: int = 0
    _block: _Block | None = field(default=None, repr=False)
    _columns: _Columns | None = field(default=None, repr=False)

    def feed(self, number: int, line: str) -> list[Found]:
        found: list[Found] = []
        for piece in line.split("\r") if "\r" in line else (line,):
            found += self._piece(number, self._past_bars(piece))
        return found

    def flush(self) -> list[Found]:
        """The step whose metrics were still coming when the lines ended."""
        block, self._block = self._block, None
        if block is None or not _enough(block.metrics):
            return []
        return [Found(block.line, block.text, StepLine(block.step, block.total, _values(block.metrics), block.counter))]

    def _past_bars(self, piece: str) -> str:
        """The piece after its progress bars (what a process printed right after a bar's redraw), each
        training bar's count kept as the progress."""
        if "%|" not in piece:
            return piece
        start = 0
        for bar in _BAR.finditer(piece):
            label = piece[start:bar.start()]
            if _TRAINING_BAR.search(label) and not _PREPARING_BAR.search(label):
                self.progress = max(self.progress, int(bar.group(1)))
            start = bar.end()
        return piece[start:]

    def _piece(self, number: int, line: str) -> list[Found]:
        if self._columns is not None:
            if (_BORDER.match(line) or _ELIDED.match(line)) and line.strip():
                return []  # the separator under the header, or rows left out
            row = self._row(line)
            if row is not None:
                return [Found(number, line.strip()[:300], row)] if len(row.metrics) >= MIN_METRICS else []
            self._columns = None
        columns = _header(line)
        if columns is not None:
            self._columns = columns
            return self.flush()
        named = _step_of(line)
        if named is not None:
            pairs = _ranked(_pairs(line))
            found = self.flush()
            if _enough(pairs):
                return found + [Found(number, line.strip()[:300], StepLine(named.step, named.total, _values(pairs),
                                                                            named.counter))]
            self._block = _Block(number, line.strip()[:300], named.step, named.total, pairs, named.counter)
            return found
        return self._in_block(line)

    def _in_block(self, line: str) -> list[Found]:
        block = self._block
        if block is None:
            return []
        if _BORDER.match(line) and line.strip():
            return []
        pairs = _pairs(line)
        if pairs:
            block.started = True
            for name, (value, rank) in _ranked(pairs).items():
                if name not in block.metrics or rank < block.metrics[name][1]:
                    block.metrics[name] = (value, rank)
            return []
        if not block.started and block.gap < BLOCK_GAP:
            block.gap += 1
            return []
        return self.flush()

    def _row(self, line: str) -> StepLine | None:
        """A row of the table whose header was read, or None past the table's end."""
        columns = self._columns
        cells = _table_cells(line, columns.spaced)
        if columns.spaced and len(cells) == columns.width + 1 and cells[0].isdigit():
            cells = cells[1:]  # pandas' index
        if len(cells) != columns.width or not cells[columns.step].isdigit():
            return None
        values: dict[str, tuple[float, int]] = {}
        for at, (name, rank) in columns.names.items():
            number = _CELL_NUMBER.fullmatch(cells[at])
            if number is not None and (name not in values or rank < values[name][1]):
                values[name] = (_value(number), rank)
        step = as_step(int(cells[columns.step][:12]))
        return None if step is None else StepLine(step, None, _values(values))


@dataclass(frozen=True)
class _Count:
    step: int
    total: int | None  # the run's steps, where the line says one
    counter: str  # `step` (a global step, `_step`), `iter` (`iteration`) or `rollout`


def _step_of(line: str) -> _Count | None:
    """The step a line names, the run's total where it says one, and the word that counts it."""
    lower = line.lower()
    if "step" not in lower and "iter" not in lower and "rollout" not in lower:
        return _epoch_of(line) if "epoch" in lower else None
    steps = list(_STEP.finditer(line))
    if not steps:
        return _epoch_of(line) if "epoch" in lower else None
    # The run's own count, where a line names several: a global step; else the count with the largest total
    # (AReaL's `Step 5/935 Train step 940/4675`, nanochat's `Step 12/500 | Example step 3`); else the first.
    global_ = [m for m in steps if m.group(1).lower() != "step" and "step" in m.group(1).lower()]
    totals = [m for m in steps if m.group(3)]
    chosen = global_[0] if global_ else max(totals, key=lambda m: int(m.group(3))) if totals else steps[0]
    step = as_step(int(chosen.group(2)))
    if step is None:
        return None
    word = chosen.group(1).lower()
    counter = "rollout" if word == "rollout" else "iter" if word.startswith("iter") else "step"
    total = chosen.group(3) or (keyed.group(1) if (keyed := _TOTAL.search(line)) else None)
    return _Count(step, (as_step(int(total)) or None) if total else None, counter)


def _epoch_of(line: str) -> _Count | None:
    """The step of a line that counts epochs, not steps: MiniMind's step within its epoch, or the epoch itself."""
    within = _EPOCH_STEP.search(line)
    if within is not None:
        epoch, epochs, step, per_epoch = (int(g) for g in within.groups())
        run_step = as_step((epoch - 1) * per_epoch + step)
        return _Count(run_step, epochs * per_epoch, "step") if run_step else None
    opening = _EPOCH_LINE.match(line)
    if opening is None or as_step(int(opening.group(1))) is None:
        return None
    total = opening.group(2)
    return _Count(int(opening.group(1)), int(total) if total else None, "epoch")


def _header(line: str) -> _Columns | None:
    """A table header naming a step column and at least two metric columns (Unsloth's notebook table,
    a markdown table pasted in a thread, a frame printed by pandas)."""
    spaced = not _TABLE.search(line)
    # Aligned by spaces: names alone, so a line with `:` or `=` (nearly every other log line) is no header.
    if spaced and ("  " not in line or ":" in line or "=" in line):
        return None
    cells = _table_cells(line, spaced)
    if len(cells) < 1 + MIN_METRICS or not all(_HEADER_CELL.fullmatch(c) for c in cells):
        return None
    keys = ["_".join(re.split(r"[\s/_.-]+", c.lower())) for c in cells]
    step = next((i for i, key in enumerate(keys) if key in _STEP_COLUMNS), None)
    names = {i: known for i, c in enumerate(cells) if (known := canonical(c)) is not None}
    if step is None or len({name for name, _ in names.values()}) < MIN_METRICS:
        return None
    return _Columns(len(cells), step, names, spaced)


def _table_cells(line: str, spaced: bool = False) -> list[str]:
    if spaced:
        return _SPACED.split(line.strip())
    return [c.strip() for c in _TABLE.split(line.strip().strip("|│┃"))]


def _pairs(line: str) -> list[tuple[str, float]]:
    """Every `name: number` a line shows, known to the doctor or not. The step is a cell of its own
    (nanoGPT's `iter 12: loss 0.31, ...`)."""
    found = []
    listed = bool(re.search(r"\||│|┃|,", line))
    cells = [c.strip(_EDGES) for c in _CELLS.split(_STEP.sub(" | ", line))]
    skip = False
    for at, cell in enumerate(cells):
        if skip:
            skip = False
            continue
        whole = _CELL_PAIR.fullmatch(cell)
        if whole is not None and (whole.group("sep") in ":=" or listed):
            found.append((whole.group("name"), _value(whole)))
            continue
        if at + 1 < len(cells) and _TABLE.search(line) and _CELL_NAME.fullmatch(cell):
            number = _CELL_NUMBER.fullmatch(cells[at + 1])
            if number is not None:  # a key/value table: the name's cell, then its number's
                found.append((cell, _value(number)))
                skip = True
                continue
        found += [(pair.group("name"), _value(pair)) for pair in _PAIR.finditer(cell)]
    return found


def _value(match: re.Match) -> float:
    value = float(match.group("value"))
    return value / 100 if match.group("pct") and math.isfinite(value) else value


def _ranked(pairs: list[tuple[str, float]]) -> dict[str, tuple[float, int]]:
    """The pairs the doctor knows: its name -> (the value, its name's rank), the lowest rank kept."""
    found: dict[str, tuple[float, int]] = {}
    for name, value in pairs:
        known = canonical(name)
        if known is not None and (known[0] not in found or known[1] < found[known[0]][1]):
            found[known[0]] = (value, known[1])
    return found


def known(pairs: list[tuple[str, float]]) -> dict[str, float]:
    """The metrics among `(name, value)` pairs the doctor knows by their names' words, under its names (of two
    names for one measure, the task's own score over a shaped reward)."""
    return _values(_ranked(pairs))


def _values(ranked: dict[str, tuple[float, int]]) -> dict[str, float]:
    return {name: value for name, (value, _) in ranked.items()}


def _enough(known: dict[str, tuple[float, int]]) -> bool:
    """Whether the known metrics beside a step make it one: two at least, or an evaluation's score alone (its
    name says what it is, where one number of another name beside a step is too often something else)."""
    return len(known) >= MIN_METRICS or set(known) == {EVAL_ACCURACY}


def canonical(name: str) -> tuple[str, int] | None:
    """(the doctor's name for a printed metric name, its rank), or None for a name it does not know."""
    words = [w for w in re.split(r"[\s/_.-]+", name.lower().strip("'\"")) if w]
    critic = False
    while words and words[0] in _ROLES:
        critic = critic or words[0] == "critic"
        words.pop(0)
    if not words:
        return None
    if _EVAL & set(words):
        return _evaluation(words)
    if any("@" in w and not w.startswith("pass@") for w in words):
        return None
    if "zero" in words and ("std" in words or "variance" in words):
        return ZERO_VARIANCE, 0
    words = [w for w in words if w not in _MEAN]
    if "std" in words:
        rest = "_".join(w for w in words if w != "std")
        if rest in _ADVANTAGES:
            return ADVANTAGE_STD, 0
        base = _NAMES.get(rest)
        return (REWARD_STD, 0) if base is not None and base[0] == REWARD else None
    if _OTHER_STATS & set(words):
        return None
    known = _NAMES.get("_".join(words))
    if known is not None and critic and known[0] in _CRITIC:
        return _CRITIC[known[0]], known[1]
    return known


def _evaluation(words: list[str]) -> tuple[str, int] | None:
    """An evaluation's score, by its name's last word (a mean's `mean`/`avg` and verl's `@k` dropped): the words
    before it name the evaluation and its set. Its loss and the rest are not read."""
    measure = [w for w in words if w not in _MEAN and ("@" not in w or w.startswith("pass@"))]
    known = _NAMES.get(measure[-1]) if measure else None
    return (EVAL_ACCURACY, known[1]) if known is not None and known[0] in (REWARD, ACCURACY) else None
