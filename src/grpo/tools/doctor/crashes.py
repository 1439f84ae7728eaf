"""Crashes read from a console log: Python tracebacks and the fatal lines that end runs without one
(NCCL's watchdog, torch's LOG(FATAL), the kernel's or Ray's OOM killer, a segfault), each classified by what it says.

A crash is a cause only when the run ended with it: one followed by more steps was recovered from
(`cause` decides that). Classes, most telling first, since a crash says several things at once (a
Ray actor that died *because* CUDA ran out of memory is out of memory):

    out_of_memory    CUDA or host memory ran out (OutOfMemoryError, the OOM killer, Ray's monitor)
    disk_full        a write refused: no space, quota, read-only file system, or torch.save's zip writer told a
                     write came short (`PytorchStreamWriter failed writing file ...: file write failed`)
    nonfinite        the policy's numbers went NaN or infinite: sampling from probabilities that hold NaN or inf
                     (torch's multinomial, on the GPU a device-side assertion that the CUDA error after it
                     only repeats), a backward pass that returned NaN
    gpu_failure      a CUDA error or an NCCL error or timeout (illegal access, device-side assert), or no GPU
                     the process could use
    reward_broken    raised inside the reward function (its frames, or a reward's own message), or a reward that
                     could not be called with what the trainer passes it (Python's signature error names it)
    server_failure   the inference engine died (vLLM's EngineDeadError, SGLang's scheduler), or ran out of
                     memory in its own frames (its KV cache, its wake-up from sleep) or in a Ray task of its
                     actor (`ray::LLMActor.backload_to_gpu()`), or never answered (TRL's client: "The vLLM
                     server can't be reached")
    worker_failure   a Ray actor or worker process died or could not start, a segfault
    interrupted      stopped on purpose (KeyboardInterrupt, SIGTERM)
    crashed          any other exception
"""

from __future__ import annotations

import re
from collections import deque

from grpo.tools.doctor.record import Crash, Evidence

CLASSES = {
    "out_of_memory": re.compile(
        r"out of memory|OutOfMemoryError|OOM[- ]?kill|oom_kill|Killed process \d+|killed by the memory monitor|"
        r"RayOutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|memory usage .* exceeds|Cannot allocate memory|"
        r"running low on memory|killed due to memory pressure|"
        r"std::bad_alloc|not enough memory|insufficient memory|KV cache .*(?:too small|not enough)", re.I),
    "disk_full": re.compile(r"No space left on device|Disk quota exceeded|Read-only file system|"
                            r"PytorchStreamWriter failed writing file|: file write failed", re.I),
    "nonfinite": re.compile(r"probability tensor contains either\W+inf\W+nan\W+or element < 0|"
                            r"returned nan values in its \d+\w* output", re.I),
    "gpu_failure": re.compile(
        r"CUDA error|CUDA kernel errors|NCCL error|nccl(?:Internal|System|UnhandledCuda|InvalidUsage|Remote)Error|"
        r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*(?:timeout|timed out|abort)|"
        r"illegal memory access|device-side assert|cudaError|CUBLAS_STATUS_|CUDNN_STATUS_|NCCL communicator|"
        r"Process group watchdog|ProcessGroupNCCL\.cpp|"
        r"HIP error|hipError|Xid \d+|uncorrectable ECC|GPU is lost|no CUDA-capable device|No CUDA GPUs are available|"
        r"DistBackendError|CUDA driver", re.I),
    "reward_broken": re.compile(
        r"Reward function is not implemented|reward.{0,40}(?:not implemented|failed|error)|"
        r"(?:compute_score|reward_fn|reward_func|reward_score|_reward\b|rewards?\.py|reward_manager)|"
        # Python's call-signature error names the callee: a reward that cannot take what the trainer passes it
        # (a dataset column it needs and the data lacks, a calling convention it does not follow)
        r"\w*reward\w*(?:\.__call__)?\(\) (?:missing \d+ required|takes \d+|got an unexpected keyword|"
        r"got multiple values)", re.I),
    "server_failure": re.compile(
        r"EngineDeadError|EngineCore.*(?:died|failed|encountered)|Engine core .*(?:died|failed)|"
        r"Scheduler hit an exception|sglang.*(?:crash|terminated)|vllm.*(?:crash|terminated)|"
        r"No healthy SGLang servers|llm server.*(?:died|exit)|vLLM server can't be reached", re.I),
    "worker_failure": re.compile(
        r"ActorDiedError|RayActorError|The actor died|WorkerCrashedError|RaySystemError|raylet .*died|"
        r"node .* (?:dead|died)|ActorUnschedulableError|RuntimeEnvSetupError|placement group|"
        r"ChildFailedError|Segmentation fault|SIGSEGV|SIGABRT|SIGBUS|core dumped|worker .*(?:died|crashed)|"
        r"Failed to (?:start|create|register) .*(?:worker|actor)|exitcode\s*:\s*-?\d+|GetTimeoutError|"
        r"failed to import on the worker|register_center|worker group|got signal: 1\b|SIGHUP", re.I),
    "interrupted": re.compile(r"^KeyboardInterrupt|SIGTERM received|Received SIGTERM|Terminated$", re.I),
}
ORDER = ("out_of_memory", "disk_full", "nonfinite", "gpu_failure", "reward_broken", "server_failure",
         "worker_failure", "interrupted", "crashed")
# An exception raised inside the inference engine's own code: the engine failed, whatever the exception.
ENGINE_FRAMES = re.compile(r"/(?:sglang|vllm)/")
# A Ray remote task of the inference engine's actor (OpenRLHF's `LLMRayActor`, ORZ's `LLMActor`, a vLLM or
# SGLang engine, a rollout worker): what failed in it, its out-of-memory included, failed in the engine.
ENGINE_TASK = re.compile(r"ray::\w*(?:LLM|vLLM|Vllm|SGLang|Sglang|Engine|Rollout)\w*\.\w+\(\)")
# A launcher's lines as it stops the other processes after one failed (DeepSpeed's `sigkill_handler` killing
# subprocesses and reporting the exit code, torchrun sending closing signals): they report the crash before them,
# they do not say the run went on after it.
TEARDOWN = re.compile(r"sigkill_handler|Killing subprocess \d+|exits with return code|"
                      r"Sending process \d+ closing signal")
# A logger's record header on each line of a traceback it printed line by line (vLLM's engine core:
# `ERROR 06-10 10:55:03 [core.py:459]   File "...", line 77, in create_and_map`): the line is what follows it.
RECORD_HEADER = re.compile(r"^(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL)\s+(?:\d{4}-)?\d\d-\d\d\s+"
                           r"\d\d:\d\d:\d\d(?:[.,]\d+)?\s+\[[^\]\s]+:\d+\]\s?")
# Crashes that only say another one happened (a launcher's or torchrun's wrapper, the shell's "Killed"):
# the crash to name is the one before them.
WRAPPERS = re.compile(r"ChildFailedError|JobException|^Killed$|Error executing job with overrides|"
                      r"cannot schedule new futures after shutdown", re.I)
# Fatal on their own, without a traceback (the process was killed, or aborted from C++).
# Words a FATAL line holds, one at least: a line without any is not matched against FATAL (most lines).
_FATAL_HINTS = ("Watchdog", "Killed", "Segmentation", "Fatal Python", "terminate called", "ChildFailedError",
                "RayOutOfMemoryError", "*** SIG", "CUDA error", "CUDA Error", "NCCL", "Error executing job",
                "Assertion", "low on memory", "memory pressure", "watchdog", "[F", "HYDRA_FULL_ERROR")
# One search for any of them: cheaper than a test per hint on every line.
_FATAL_HINT = re.compile("|".join(map(re.escape, _FATAL_HINTS)))
HYDRA_CLOSING = "^Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace"
# What Hydra prints between its error's message and its closing line: where it looked for the config.
_HYDRA_TRAILER = re.compile(r"^(Config search path:|provider=)")
FATAL = re.compile(
    r"Watchdog caught collective operation timeout|Out of memory: Killed process|^Killed$|"
    r"Segmentation fault|Fatal Python error|terminate called after throwing|"
    r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError|RayOutOfMemoryError|"
    r"^\*\*\* SIG(?:SEGV|ABRT|BUS)|CUDA error: |RuntimeError: NCCL|Error executing job with overrides|"
    # a C or CUDA kernel's assert (a device-side assertion prints this before Python's traceback, which a
    # pasted log may not keep whole)
    r"\bAssertion `.*` failed|"
    # Ray's memory monitor killing a task or worker as the host runs out of memory: the kernel's OOM killer's
    # word, in Ray's own (the run dies of it, or the retried task goes on and the steps after show it)
    r"Task was killed due to the node running low on memory|Workers \(tasks / actors\) killed due to memory pressure|"
    # torch c10d taking the process down: its NCCL watchdog's exception (the timeout's own line may be hard-wrapped
    # in a pasted log, this one starts it), and any glog FATAL record ([F<mmdd> <time> file.cpp:N], LOG(FATAL)
    # aborts), such as the heartbeat monitor ending a process whose watchdog got stuck
    r"Process group watchdog thread terminated with exception|^\[F\d{3,4} \d\d:\d\d:\d\d|"
    # Hydra's closing line for an error it caught (a config that would not compose, a job that raised) instead of
    # Python's traceback: the program exits on it, whatever came before
    rf"{HYDRA_CLOSING}", re.I)
# A progress bar the message was printed after, on the same line (a bar redrawn without a newline): not the message.
_BAR_BEFORE = re.compile(r"^.*\d{1,3}%\|[^|]*\|[^\]\n]*\]")
TRACEBACK = "Traceback (most recent call last)"
# Ray prints a remote task's traceback under its own header, without Python's: `ray::Actor.method() (pid=N,
# ...)` (alone, or after "Unhandled error (suppress with ...): " when nothing awaited the task), then the frames.
RAY_TRACEBACK = re.compile(r"^(?:Unhandled error \(suppress with [^)]*\): )?ray::[\w.<>]+\(\) \(pid=")
# Python's own word that the traceback after it was ignored (a destructor's or an atexit callback's, at
# shutdown): it ended nothing, however the run went.
IGNORED = "Exception ignored in"
# A traceback inside a log record (`ERROR:2026-03-26 22:35:46,212:Traceback ...`, `logger.exception`'s): the
# program caught the exception and logged it. Python prints an uncaught one's header alone on its line; a
# program that then dies of it prints that, or a fatal line, after.
LOGGED = re.compile(r"\b(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL|FATAL)\b")
# The line that ends a traceback: `pkg.module.SomeError: message` or a bare exception name.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Warning|"
                        r"Timeout|Died|NotImplemented\w*|StopIteration)\b(?::.*)?$|^[A-Z]\w*Error: ")
FRAME = re.compile(r'^\s*File "([^"]*)", line \d+, in (\S+)')
# The marks Python prints under a frame's code to point at the failing part (3.11+): not code.
_CARETS = re.compile(r"^[\s~^]+$")
# An uncaught exception's own line, as Python prints it last (`ImportError: cannot import name ...`); a log
# whose last line is one ended with it, even where its traceback was not kept (pasted, or cut off).
UNCAUGHT = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::.*)?$")
# Ray's line for a remote task's failure, `ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=..)`:
# the remote traceback follows and ends on the inner exception's own line; where the log ends before that line
# (a pasted excerpt, a torn copy), this line is the last word on what ended the run, its inner name the class.
RAY_CHAINED = re.compile(r"^(?:\w+\.)*Ray\w*Error\((\w+)\): ")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]")
MAX_KEPT = 40  # crashes kept per log: the first few and the latest
REPEAT_WINDOW = 50  # lines after a crash in which the same message again is a copy of it


def classify(text: str, frames: list[str], in_engine: bool = False) -> str:
    """The class of an exception line with its innermost frames (the reward function's own frames say
    it raised there; the trainer's frames that merely call it do not); `in_engine`: Ray named the inference
    engine's actor as the task it was raised in."""
    text = text[:2000]
    maybe = "potential root causes" in text  # Ray lists the OOM killer among what might have killed an actor
    engine = in_engine or any(ENGINE_FRAMES.search(f) for f in frames[-3:])
    for kind in ORDER[:-1]:
        if kind == "out_of_memory" and maybe:
            continue
        if kind == "out_of_memory" and engine and CLASSES[kind].search(text):
            return "server_failure"  # the engine ran out of memory (its KV cache, its wake-up): the server's
        if kind == "server_failure" and engine:
            return kind
        if kind == "reward_broken":
            inner = " ".join(frames[-3:])
            if CLASSES[kind].search(text) or (inner and CLASSES[kind].search(inner)):
                return kind
        elif CLASSES[kind].search(text):
            return kind
    return "crashed"


class CrashScanner:
    """Fed a log's cleaned lines in order; keeps the crashes it read."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.crashes: list[Crash] = []
        self._frames: list[str] | None = None  # inside a traceback: its frames so far
        self._traceback_line = 0
        self._last: Crash | None = None  # the log's last line so far, when it is an exception's own line
        self._ignored = False  # the traceback being read follows an IGNORED line
        self._chained: Crash | None = None  # a RAY_CHAINED line in the traceback being read, not yet closed
        self._in_engine = False  # the traceback being read is of a Ray task of the inference engine's actor
        self._recent: deque[str] = deque(maxlen=8)  # the last lines with text, stripped: what a closing line closes
        self._code = ""  # the traceback being read: the code line of its last frame
        self._step = 0  # the step the traceback being read began in

    def found(self) -> list[Crash]:
        """The crashes read so far, with the exception line the log ends on when no traceback held it, or
        Ray's line for the remote failure when the log ends inside the traceback after it, or else the
        traceback the log ends inside of (a pasted excerpt that stops before the exception's own line): an
        exception propagated through those frames, and nothing after it says the run went on."""
        return self.crashes + [c for c in (self._last, self._chained or self._unclosed()) if c is not None]

    def _unclosed(self) -> Crash | None:
        if not self._frames or self._ignored:
            return None
        file, _, function = self._frames[-1].rpartition(" ")
        text = (f"a traceback without its exception line, last in {function} ({file.rsplit('/', 1)[-1]})"
                + (f": {self._code}" if self._code else ""))
        return Crash(self._step, classify(self._code or "", self._frames, self._in_engine), text[:300],
                     Evidence(self.file, self._traceback_line, text[:300]))

    def feed(self, line_no: int, line: str, step: int) -> None:
        if line.strip():
            if self._last is not None and not TEARDOWN.search(line):
                self._last = None  # the log went on after it: not what ended the run
            self._recent.append(line.strip())
        if self._frames is None and "Traceback" not in line and "ray::" not in line and 'File "' not in line \
                and "Error" not in line and "Exception" not in line and not _FATAL_HINT.search(line):
            return  # most lines: neither a traceback nor a fatal line
        stripped = line.strip()
        if not stripped:
            return
        if IGNORED in stripped:
            self._ignored = True
            return
        if TRACEBACK in stripped or (self._frames is None and RAY_TRACEBACK.match(stripped)):
            self._frames, self._traceback_line, self._code, self._step = [], line_no, "", step
            self._ignored = self._ignored or bool(LOGGED.search(stripped.partition(TRACEBACK)[0]))
            self._in_engine = bool(ENGINE_TASK.search(stripped))
            return
        if self._frames is None and FRAME.match(stripped):
            # a traceback whose header was not kept (a pasted excerpt)
            self._frames, self._traceback_line, self._code, self._step = [], line_no, "", step
        if self._frames is None and UNCAUGHT.match(line):
            self._last = Crash(step, classify(stripped, []), stripped[:300], Evidence(self.file, line_no, stripped[:300]))
            return
        if self._frames is not None:
            stripped = RECORD_HEADER.sub("", stripped).strip() or stripped
            frame = FRAME.match(stripped)
            if frame:
                self._frames.append(f"{frame.group(1)} {frame.group(2)}")
                self._code = ""
                return
            if self._frames and not self._code and not _CARETS.match(stripped):
                self._code = stripped
            if _EXCEPTION.match(stripped):
                if not self._ignored:
                    self._add(line_no, stripped, step, self._frames, self._in_engine)
                self._frames, self._ignored, self._chained, self._in_engine = None, False, None, False
                return
            chained = RAY_CHAINED.match(stripped)
            if chained and not self._ignored:
                self._in_engine = self._in_engine or bool(ENGINE_TASK.search(stripped))
                kind = classify(chained.group(1), self._frames, self._in_engine)
                self._chained = Crash(step, kind, stripped[:300], Evidence(self.file, line_no, stripped[:300]))
            if line_no - self._traceback_line > 400:  # never closed: not a traceback after all
                self._frames, self._ignored, self._chained, self._in_engine = None, False, None, False
            return
        if _FATAL_HINT.search(stripped) and FATAL.search(stripped) \
                and not self._repeats(line_no, stripped):
            self._add(line_no, self._hydra_message(stripped) or _BAR_BEFORE.sub("", stripped), step, [])

    def _hydra_message(self, closing: str) -> str | None:
        """For Hydra's closing line, its error's message before it (the config search path it printed between
        left out), with the closing line: that says what to fix."""
        if not re.match(HYDRA_CLOSING, closing, re.I):
            return None
        before = [line for line in list(self._recent)[:-1] if not _HYDRA_TRAILER.match(line)]
        return f"{before[-1]} ({closing})" if before else None

    def _repeats(self, line_no: int, text: str) -> bool:
        """A fatal line that says again what the traceback just read said, right after it (other actors'
        copies, Ray's "[repeated 3x across cluster]"): that crash, whose frames classify it, not another."""
        if not self.crashes or line_no - self.crashes[-1].evidence.line > REPEAT_WINDOW:
            return False
        message = _REPEATED.sub("", text).strip()
        return len(message) >= 20 and message in self.crashes[-1].text

    def _add(self, line_no: int, text: str, step: int, frames: list[str], in_engine: bool = False) -> None:
        crash = Crash(step, classify(text, frames, in_engine), text[:300], Evidence(self.file, line_no, text[:300]))
        if len(self.crashes) >= MAX_KEPT:
            del self.crashes[MAX_KEPT // 4]  # keep the first ones, and the latest
        self.crashes.append(crash)


SPECIFIC = ("out_of_memory", "disk_full", "nonfinite", "gpu_failure", "reward_broken", "server_failure")


def final(crashes: list[Crash], after_step: int, after_line: int | None = None) -> Crash | None:
    """The crash that ended the run, of those after its last logged step (after that step's line, when
    known): the most telling specific class (out of memory over the worker that died of it), else the
    first that is not a wrapper of another (the root of the chain: a config error before torchrun's
    ChildFailedError)."""
    late = [c for c in crashes if (c.evidence.line > after_line if after_line is not None else c.step > after_step)]
    if not late:
        return None
    specific = [c for c in late if c.kind in SPECIFIC]
    if specific:
        chosen = min(specific, key=lambda c: (SPECIFIC.index(c.kind), c.evidence.line))
        return Crash(after_step + 1, chosen.kind, chosen.text, chosen.evidence)
    roots = [c for c in late if not WRAPPERS.search(c.text)]
    chosen = (roots or late)[0]
    return Crash(after_step + 1, chosen.kind, chosen.text, chosen.evidence)
