"""What every console-log reader shares: lines fed in order (from a file streamed once, or from a
watch as the log grows), cleaned of launchers' prefixes, scanned for crashes, and a `RunRecord` that
can be taken at any point (`result`) and taken again after more lines.

A reader per framework (`verl.VerlReader`, `areal.ArealReader`, `trl.TrlLogReader`, ...) reads its step
lines; `ConsoleReader` reads a log of any other framework, for its crash and for the step lines of any
shape that `generic` knows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from grpo.tools.doctor import generic
from grpo.tools.doctor.crashes import FATAL, FRAME, TEARDOWN, TRACEBACK, UNCAUGHT, CrashScanner
from grpo.tools.doctor.record import Checkpoint, Evidence, Mark, RunRecord
from grpo.tools.doctor.textlog import clean, iter_lines, listed_lines, log_suffix, read_ends

# What a framework prints at launch (its modules in a traceback, its config dump, its actors): enough
# to name the framework of a log that crashed before its first step.
MARKERS = {
    "verl": re.compile(r"\bverl[./]|\(TaskRunner pid=|\(main_task pid=|RayPPOTrainer|ray_trainer\.py|"
                       r"actor_rollout_ref\.|data\.train_files"),
    "areal": re.compile(r"\bareal[./]|AReaL|StatsLogger|RemoteSGLangEngine|name_resolve"),
    "trl": re.compile(r"\btrl[./]|GRPOTrainer|GRPOConfig|[Uu]nsloth"),
    "openrlhf": re.compile(r"openrlhf[./]|OpenRLHF"),
    "open-reasoner-zero": re.compile(r"\borz\.(?:ppo|exps)\b|Open-Reasoner-Zero|orz_ckpt"),
    "prime-rl": re.compile(r"\bprime[_-]rl\b|Starting (?:orchestrator|training) step|\| Mismatch KL: |"
                           r"\| Max\. Off-Policy Level: "),
    "ms-swift": re.compile(r"\bswift[./]|ms-swift|swift rlhf"),
    "slime": re.compile(r"\bslime[./]|\(RolloutManager pid=|\(MegatronTrainRayActor pid="),
}
# A trainer's client getting no completion from its inference server: waiting for it to answer (TRL's
# `vllm_mode="server"`, the server started apart with `trl vllm-serve`; after its timeout the client raises "The vLLM
# server can't be reached"), or refused on the server's generation endpoint as it retries (an HTTP client's error
# status: httpx's "Client error '403 Forbidden' for url '.../generate'", "Server error '503 Service Unavailable'
# ...", as slime's rollout manager prints them). No completion can be generated until the server answers.
SERVER_UNANSWERED = re.compile(r"Server is not up yet|vLLM server can't be reached|"
                               r"(?:Client|Server) error '\d{3}[^']*' for url '[^']*/"
                               r"(?:generate|(?:v1/)?(?:chat/)?completions)\b")


def framework_of(text: str) -> str | None:
    """The framework whose launch markers show most in `text`, or None."""
    counts = {name: len(pattern.findall(text[:4 << 20])) for name, pattern in MARKERS.items()}
    best = max(counts, key=counts.get)
    return best if counts[best] else None


class LogReader:
    source = "log"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.record = RunRecord(self.source, str(path), console=True)
        self.scanner = CrashScanner(str(path))
        self.line_no = 0
        self.current = 0  # the last step logged

    def feed(self, raw: str) -> None:
        self.line_no += 1
        line = clean(raw)
        # A log printed as a list of its lines is rare: the cheap tests first (one character is found fastest).
        if "'" in line and "', '" in line:
            pieces = listed_lines(line)
            if len(pieces) > 1:
                for piece in pieces:
                    self._take(piece)
                return
        self._take(line)

    def _take(self, line: str) -> None:
        self.scanner.feed(self.line_no, line, self.current + 1)
        if ("erver" in line or " error '" in line) and SERVER_UNANSWERED.search(line):
            self.record.marks.append(Mark(self.current + 1, "server_unreachable", line.strip()[:200],
                                          Evidence(str(self.path), self.line_no, line.strip()[:300])))
        self.line(self.line_no, line)

    def feed_all(self, lines: Iterable[str]) -> "LogReader":
        for raw in lines:
            self.feed(raw)
        return self

    def line(self, number: int, line: str) -> None:
        """One cleaned line of the log (number: as editors count it)."""

    def finish(self, final: bool) -> None:
        """What is read once the lines so far are in (checkpoints on disk): called by every `result`.
        final: no more lines will come (the whole file was read, or the trainer exited); a live reader
        may still hold lines whose step the next ones decide."""

    def result(self, final: bool = True) -> RunRecord:
        self.finish(final)
        self.record.crashes = self.scanner.found()
        return self.record

    @classmethod
    def read(cls, path: Path, lines: Iterable[str] | None = None) -> RunRecord:
        return cls(path).feed_all(iter_lines(path) if lines is None else lines).result()


class ConsoleReader(LogReader):
    """A log of a framework without a reader of its own, under the framework its launch lines name
    (`source`, else "log"): read for what ended it, and for its steps where its lines show them in a
    shape `generic` knows. A step number that goes back starts a new attempt (a resume); a log that keeps two
    counts (slime's `rollout N` and `step N`, which part when a rollout feeds several updates) is compared
    count by count."""

    def __init__(self, path: Path, source: str = "log") -> None:
        self.source = source
        super().__init__(path)
        self.steps = generic.StepReader()
        self.counts: dict[str, int] = {}  # each count's last step (`step`, `iter`, `rollout`)

    def line(self, number: int, line: str) -> None:
        for found in self.steps.feed(number, line):
            self._step(found)
        if generic.says_finished(line):
            self.record.finished = True
        saved = generic.saved_checkpoint(line) if "/" in line else None
        if saved and all(c.step != saved[0] for c in self.record.checkpoints):
            self.record.checkpoints.append(Checkpoint(*saved))

    def _step(self, found: generic.Found) -> None:
        record, read = self.record, found.step
        evidence = Evidence(str(self.path), found.line, found.text)
        last = self.counts.get(read.counter, 0)
        if read.step < last:
            record.restart(Mark(read.step, "restart", f"the step count went back from {last} to {read.step}",
                                evidence))
            # the earlier attempt's counts are over: its other count going back too is the same restart
            self.counts = {counter: min(step, read.step) for counter, step in self.counts.items()}
        self.counts[read.counter] = read.step
        for name, value in read.metrics.items():
            record.put(read.step, name, value)
        record.evidence_by_step.setdefault(read.step, evidence)
        record.total_steps = read.total or record.total_steps
        self.current = read.step

    def finish(self, final: bool) -> None:
        if final:  # live, a step's metrics may still be coming
            for found in self.steps.flush():
                self._step(found)
        self.record.progress = self.steps.progress


LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


def find_console_log(path: Path) -> tuple[Path, str] | None:
    """(the log, its framework or "log") for a console log that shows no step of a format with its own
    reader but names its framework, ended in a crash, shows step lines `generic` reads or a trainer's client
    getting no answer from its inference server: the file
    itself, or the first such file in a directory."""
    if path.is_file():
        candidates = [path]
    elif path.is_dir():
        try:
            candidates = sorted(p for p in path.iterdir() if log_suffix(p) in LOG_SUFFIXES and p.is_file())
        except OSError:
            return None
    else:
        return None
    for candidate in candidates:
        text = read_ends(candidate)
        source = framework_of(text)
        lines = [clean(line) for line in text.splitlines()]
        ended = next((line for line in reversed(lines) if line.strip() and not TEARDOWN.search(line)), "")
        if source is not None or TRACEBACK in text or any(FATAL.search(line) or FRAME.match(line) for line in lines) \
                or UNCAUGHT.match(ended) or generic.shows_steps(lines) \
                or any(SERVER_UNANSWERED.search(line) for line in lines):
            return candidate, source or "log"
    return None
