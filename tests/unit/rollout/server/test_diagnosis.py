"""Reading why a server failed from real logs of SGLang and vLLM failing (tests/data/server_logs/, and logs from
GitHub threads in its real/): the line chosen, the cause and knob named, likely_cause's sentence; harmless lines
never chosen; failures told apart."""

from __future__ import annotations

import pytest

from grpo.rollout.server.diagnosis import (
    CATEGORIES,
    KNOWN_CAUSES,
    MEMORY_KNOBS,
    SERVER_BUG,
    UNSUPPORTED_FEATURE,
    Reading,
    likely_cause,
    message,
    one_line,
    read_log,
    same_failure,
    server_error,
)
from tests.server_logs import LOGS, REAL, expected_real, server_log

NOT_OOM = ("not by the kernel's OOM killer (no OOM kill in the kernel log since it started): something outside grpo "
           "killed it")
SCHEDULER = "Subprocess scheduler_0 (pid=6766) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
BAD_ARG = "sglang serve: error: unrecognized arguments: --no-such-flag"
BAD_ARG_KNOB = ("fix rollout.server.extra_args (or rollout.server.command); if they do not pass the value it rejects, "
                "model.name's config.json does, for a newer server: upgrade vLLM/SGLang and transformers")
REFUSED = ("[http_server] Error: Input length (200 tokens) exceeds the maximum allowed length (35 tokens). Use a "
           "shorter input or enable --allow-auto-truncate.")
KV_KNOB = ("a prompt with its answer budget is longer than the server allows: lower rollout.max_new_tokens, or cut "
           "prompts with task.truncate_prompts=left (task.max_prompt_tokens); vLLM allows its --max-model-len "
           "(rollout.server.extra_args), SGLang no input longer than its KV cache holds (raise "
           "rollout.server.kv_cache_gib)")
ENGINE_CORE = "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup"
WORKER = "Worker proc VllmWorker-0 died unexpectedly (exit code: None), shutting down executor."
DIED = "died and its log does not say why (not the kernel's OOM killer: no OOM kill in the kernel log since it started)"
MEMORY = one_line(
    "ValueError: Available memory on node 0 (9.89/13.09 GiB) on startup is less than desired CPU memory utilization "
    "(0.99, 12.96 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory "
    "reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization "
    "0.5`) or reduce CPU memory used by other processes.", 400)
NO_VLLM = ("/work/main/.venv/bin/python: Error while finding module specification for "
           "'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named 'vllm')")
UNVERIFIED = "its weights did not verify after a reload: restarting it from the weight files"
PYTHON_KNOB = "point rollout.server.python at the Python of the server's environment (e.g. .venv-vllm/bin/python)"

# (log, what grpo recorded of the failure besides the log (SOURCE), the line, the knob, the sentence)
CASES = [
    ("sglang_scheduler_killed", {"exit": "killed by SIGKILL"}, SCHEDULER, None,
     f'its scheduler_0 was killed by SIGKILL, {NOT_OOM}; the server said: "{SCHEDULER}"'),
    ("sglang_server_killed", {"exit": "killed by SIGKILL"}, None, None, f"it was killed by SIGKILL, {NOT_OOM}"),
    ("sglang_bad_arg", {"exit": "exited with status 2", "while_starting": True}, BAD_ARG, BAD_ARG_KNOB,
     f'it exited with status 2; the server said: "{BAD_ARG}": {BAD_ARG_KNOB}'),
    ("sglang_kv_too_small", {"exit": "killed by SIGKILL", "stopped_by_grpo": True, "reason": UNVERIFIED},
     REFUSED, KV_KNOB, f'grpo stopped it ({UNVERIFIED}); the server said: "{REFUSED}": {KV_KNOB}'),
    ("vllm_enginecore_killed", {"exit": "exited with status 0"}, ENGINE_CORE, None,
     f'its engine core {DIED}; the server said: "{ENGINE_CORE}"'),
    ("vllm_worker_killed", {"exit": "exited with status 0"}, WORKER, None,
     f'its VllmWorker-0 {DIED}; the server said: "{WORKER}"'),
    ("vllm_memory_refused", {"exit": "exited with status 1", "while_starting": True}, MEMORY, MEMORY_KNOBS,
     f'it exited with status 1; the server said: "{MEMORY}": {MEMORY_KNOBS}'),
    ("vllm_wrong_python", {"exit": "exited with status 1", "while_starting": True}, NO_VLLM, PYTHON_KNOB,
     f'it exited with status 1; the server said: "{NO_VLLM}": {PYTHON_KNOB}'),
]


def failure_of(log: str, recorded: dict, oom_kills: tuple[str, ...] | None = ()) -> dict:
    """A failure as the supervisor records it from this log; no OOM kill in the kernel log unless given."""
    said, knob = server_error(server_log(log))
    return {"reason": "the server process failed", **recorded, "server_error": said, "knob": knob,
            "oom_kills": oom_kills}


def test_every_real_log_kept_is_tested():
    assert sorted(p.stem for p in LOGS.glob("*.log")) == sorted(case[0] for case in CASES)


@pytest.mark.parametrize("log, recorded, said, knob, cause", CASES, ids=[case[0] for case in CASES])
def test_a_real_failure_reads_as_what_happened(log, recorded, said, knob, cause):
    assert server_error(server_log(log)) == (said, knob)
    assert likely_cause(failure_of(log, recorded), attached=False) == cause


EXPECTED = expected_real()


KNOBS = {kind.name: kind.knob for kind in (*KNOWN_CAUSES, *CATEGORIES)}


def test_every_log_from_elsewhere_has_its_expected_cause():
    assert sorted(p.stem for p in REAL.glob("*.log")) == sorted(case.log for case in EXPECTED)
    assert {case.cause for case in EXPECTED} <= {*KNOBS, "unknown", "killed", "stopped"}


@pytest.mark.parametrize("case", EXPECTED, ids=[case.log for case in EXPECTED])
def test_a_real_log_from_elsewhere_reads_as_its_cause_with_what_to_change(case):
    reading = read_log(case.lines())
    cause = None if case.cause == "unknown" else case.cause  # an error grpo has no advice for: quoted alone
    assert (reading.cause, reading.line and case.quote in reading.line) == (cause, True), reading.line
    assert reading.knob == KNOBS.get(case.cause)


def test_a_watchdogs_timeout_is_a_hang_not_the_unexplained_death_that_follows_it():
    lines = (REAL / "sglang_watchdog_timeout.log").read_text().splitlines()
    said, knob = server_error(lines)
    cause = likely_cause({"reason": "x", "exit": "exited with status 1", "server_error": said, "knob": knob,
                          "oom_kills": []}, attached=False)
    assert cause.startswith('it exited with status 1; the server said: "Watchdog timeout (self.watchdog_timeout=300)"')
    assert "--watchdog-timeout" in cause and "does not say why" not in cause


def test_a_killed_child_keeps_the_kernel_logs_word_on_oom():
    unread = likely_cause(failure_of("sglang_scheduler_killed", {"exit": "killed by SIGKILL"}, None), False)
    assert unread == ("its scheduler_0 was killed by SIGKILL (often the OOM killer; the kernel log was not readable "
                      f'to confirm); the server said: "{SCHEDULER}"')
    oom = "Out of memory: Killed process 6766 (sglang::schedul)"
    killed = failure_of("sglang_scheduler_killed", {"exit": "killed by SIGKILL"}, (oom,))
    assert likely_cause(killed, False).startswith(f"the kernel killed it for lack of memory (OOM: {oom})")


def harmless(lines: list[str]) -> list[str]:
    """The lines a start that went well prints, up to its server's "Application startup complete.", that
    mention an error, a missing module or a warning."""
    healthy = next((lines[:i] for i, line in enumerate(lines) if "Application startup complete." in line), [])
    return [line for line in healthy if any(word in line for word in ("rror", "No module named", "arning", "WARN"))]


def test_harmless_lines_of_every_real_log_are_never_the_cause():
    lines = [line for case in CASES for line in harmless(server_log(case[0]))]
    assert any("Ignore import error" in line and "No module named 'cutlass'" in line for line in lines)
    assert any("No module named 'openai_harmony'" in line for line in lines)
    assert any("OSError: [Errno 24] Too many open files" in line for line in lines)  # vLLM's ulimit warning
    assert server_error(lines) == (None, None)
    # ...nor hide a real missing module
    assert server_error(lines + server_log("vllm_wrong_python")) == (NO_VLLM, PYTHON_KNOB)


def test_an_unknown_error_is_quoted_without_a_knob_and_a_wrapper_is_not_the_error():
    assert server_error(["loading", "KeyError: 'rope_scaling'", "shutting down"]) == ("KeyError: 'rope_scaling'", None)
    # the first error: those after it are its consequences
    assert server_error(["KeyError: 'rope_scaling'", "RuntimeError: Engine process failed to start"]) == (
        "KeyError: 'rope_scaling'", None)
    assert server_error(["RuntimeError: Engine core initialization failed. See root cause above."]) == (None, None)
    # torch.compile's wrapper names the backend, the line after it what the backend raised
    assert server_error(["torch._dynamo.exc.BackendCompilerFailed: backend='<VllmBackend>' raised:",
                         "KeyError: 'rope_scaling'"]) == ("KeyError: 'rope_scaling'", None)
    # an exception's repr is the error where a wrapper's quote of it ran onto a line of its own
    assert server_error(["RuntimeError: Worker failed with error 'at 1:0:", "ValueError('no rope_scaling')', please "
                         "check the stack trace above for the root cause"])[0].startswith("RuntimeError: Worker")
    assert server_error(["ValueError('no rope_scaling')', please check the stack trace above"]) == (
        "ValueError('no rope_scaling')', please check the stack trace above", None)
    assert server_error(["INFO serving", "INFO done"]) == (None, None)


def test_an_object_lacking_an_attribute_is_the_servers_bug_a_module_lacking_one_is_not():
    # an object of the server's own classes missing what its code calls; a module missing a name is another version's
    worker = "AttributeError: 'NGRAMWorker' object has no attribute 'update_weights_from_tensor'"
    assert read_log([worker]) == Reading(worker, SERVER_BUG.name, SERVER_BUG.knob)
    module = "AttributeError: module 'transformers' has no attribute 'Qwen9Config'"
    assert read_log([module]) == Reading(module, None, None)
    # a launcher's task label (srun --label) is no part of the line
    assert read_log([f"0: {worker}"]).line == worker


DETOKENIZER = "Subprocess detokenizer (pid=9) crashed with exit code 1."
SEGFAULT = "Subprocess scheduler_0 (pid=9) crashed with exit code -11."
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
# as vLLM 0.32 words an engine's death seen by its API servers (vllm/v1/utils.py)
ENGINE_KILLED = "RuntimeError: Process EngineCore_DP0 (PID: 9) died with exit code -9"
ENGINE_DIED = "RuntimeError: Engine core process EngineCore_DP0 died unexpectedly."


@pytest.mark.parametrize("failure, cause", [
    ({"exit": "killed by SIGTERM"}, "it was killed by SIGTERM"),
    ({"exit": "exited with status 3"},
     "it exited with status 3 while starting or serving: see the last lines of its log"),
    ({"exit": "exited with status 1", "server_error": DETOKENIZER},
     f'its detokenizer exited with status 1; the server said: "{DETOKENIZER}"'),
    ({"exit": "killed by SIGKILL", "server_error": SEGFAULT},
     f'its scheduler_0 crashed (SIGSEGV); the server said: "{SEGFAULT}"'),
    ({"exit": "killed by SIGKILL", "server_error": SIGQUIT},
     f'a child process of it {DIED}; the server said: "{SIGQUIT}"'),
    ({"exit": "exited with status 1", "server_error": ENGINE_KILLED},
     f'its EngineCore_DP0 was killed by SIGKILL, {NOT_OOM}; the server said: "{ENGINE_KILLED}"'),
    ({"exit": "exited with status 1", "server_error": ENGINE_DIED},
     f'its EngineCore_DP0 {DIED}; the server said: "{ENGINE_DIED}"'),
    ({"exit": "killed by SIGKILL", "stopped_by_grpo": True, "reason": "hung: no one-token generation in 10s"},
     "grpo stopped it (hung: no one-token generation in 10s)"),
])
def test_every_sentence_says_what_happened_in_good_grammar(failure, cause):
    assert likely_cause({"reason": "x", "oom_kills": [], **failure}, attached=False) == cause


def test_failures_differing_only_in_numbers_are_the_same_failure():
    a = failure_of("vllm_memory_refused", {"exit": "exited with status 1"})
    b = {**a, "server_error": a["server_error"].replace("9.89", "10.1")}
    assert same_failure(a, b)
    assert not same_failure(a, {**b, "exit": "killed by SIGKILL"})
    assert not same_failure(a, {**b, "server_error": "KeyError: 'rope_scaling'"})


def test_what_a_server_said_is_one_line():
    page = "<!DOCTYPE HTML>\n<html>\n<head><title>Error response</title></head>\n<body>\n<p>Error code: 501</p>\n" * 20
    line = one_line(page)
    assert "\n" not in line and "<" not in line and len(line) <= 200 and line.startswith("Error response")
    # a repr in angle brackets is no markup
    said = "AssertionError: res=<Response [502]>, res.text=''"
    assert one_line(said) == said


def test_the_shells_killed_is_read_only_where_nothing_before_it_says_why():
    assert read_log(real("vllm_killed_after_kv_blocks")) == Reading("Killed", "killed", None)
    # SGLang kills itself after a failed warmup: the warmup's error, not the kill
    assert read_log(real("sglang_warmup_proxy_502")).cause == "http_proxy"
    # a script's bash says where
    killed = "./serve.sh: line 3: 4567 Killed                  python -m vllm.entrypoints.openai.api_server"
    assert read_log(["INFO loading", killed]).cause == "killed"
    assert likely_cause({"reason": "x", "exit": "exited with status 137", "server_error": "Killed", "oom_kills": None},
                        attached=False).startswith("a child process of it was killed by SIGKILL (often the OOM killer")


@pytest.mark.parametrize("logged, said", [
    ("(EngineCore_0 pid=58) ERROR 11-27 12:00:00 [core.py:12] EngineCore hit a wall", "EngineCore hit a wall"),
    ("ERROR:root:could not load the tokenizer", "ERROR:root:could not load the tokenizer"),
    ("[rank1]:[E1127 12:00:01.123 ProcessGroupNCCL.cpp:475] [Rank 1] lost its peer",
     "[E1127 12:00:01.123 ProcessGroupNCCL.cpp:475] [Rank 1] lost its peer"),
    ("[2026-11-27 12:00:01,588 E 13261 13261] core_worker.cc:228: lost its raylet",
     "core_worker.cc:228: lost its raylet"),
    ("FATAL: cannot open libcuda.so.1", "FATAL: cannot open libcuda.so.1"),
    ("  what():  std::bad_alloc", "what(): std::bad_alloc"),
    ("./serve.sh: line 3: 4567 Segmentation fault      (core dumped) python -m sglang.launch_server",
     "./serve.sh: line 3: 4567 Segmentation fault (core dumped) python -m sglang.launch_server"),
    ("./serve.sh: line 3: 4567 Floating point exception (core dumped) python -m sglang.launch_server",
     "./serve.sh: line 3: 4567 Floating point exception (core dumped) python -m sglang.launch_server"),
])
def test_an_error_logged_without_a_traceback_is_read_before_the_death_it_explains(logged, said):
    assert read_log(["INFO starting", logged, "INFO shutting down"]) == Reading(said, None, None)
    assert read_log(["INFO starting", logged, ENGINE_CORE]).line == said
    # after a child's death an error line is its consequence: the death is what happened
    assert read_log(["INFO starting", ENGINE_CORE, logged]) == Reading(ENGINE_CORE, "died", None)
    # a warning in glog's form is no error
    assert read_log(["[W1127 12:00:01.1 ProcessGroupNCCL.cpp:1479] Warning: destroy_process_group() was not "
                     "called"]).line is None


# vLLM's config line at every start (transformerlab/transformerlab-app#370, cut): it names trust_remote_code
# without any failure.
VLLM_CONFIG = ("INFO 04-16 12:12:41 llm_engine.py:174] Initializing an LLM engine (v0.5.4) with config: "
               "model='deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B', trust_remote_code=True, dtype=torch.bfloat16, "
               "max_seq_len=131072,")


def real(log: str) -> list[str]:
    return (REAL / f"{log}.log").read_text().splitlines()


def test_a_cause_whose_own_line_is_vague_is_quoted_with_the_line_that_says_more():
    assert read_log(real("vllm_nccl_p2p")).line.endswith(
        "; last error: nvmlDeviceGetP2PStatus(0,0,NVML_P2P_CAPS_INDEX_READ) failed: Not Supported")
    assert read_log(real("sglang_segfault_nccl_init")).line == (
        "Fatal Python error: Segmentation fault; in ncclCommInitRank (pynccl_wrapper.py:351)")
    # other signal handlers' reports of a crash: abseil's in a Ray worker (which reports it twice, its frame after
    # the first), UCX's (its backtrace's first frames are the handler's own)
    assert read_log(real("vllm_ray_sigsegv_nccl_proxy")).line == (
        "*** SIGSEGV received at time=1746566409 on cpu 131 ***; in addProxyOpIfNeeded")
    assert read_log(real("sglang_ucx_segfault_nccl_proxy")).line.endswith("; in SaveProxy (proxy.cc:518)")
    # and torch's, whose native frames are File "<unknown>", line 0
    assert read_log(real("vllm_update_weights_asleep_segfault")).line == (
        "!!!!!!! Segfault encountered !!!!!!!; in cuMemcpyDtoDAsync_v2")


def test_a_symptom_is_read_after_the_causes_that_explain_it():
    # vLLM's config at every start is no refusal of remote code
    assert read_log([VLLM_CONFIG, *real("vllm_cuda_driver_oom")]).cause == "out_of_memory"
    # Ray waiting for GPUs it then got: what failed afterwards says why
    assert read_log(real("vllm_placement_group_wait") + real("vllm_sampler_oom")).cause == "out_of_memory"
    # a rank that lost its gloo peer, or crashed, after an error that explains it
    assert read_log(real("vllm_cuda_driver_oom") + real("sglang_graph_capture_gloo")).cause == "out_of_memory"
    assert read_log(real("vllm_free_memory_on_device") + real("sglang_segfault_nccl_init")).cause == (
        "memory_taken_at_start")
    # a crashed rank leaves its peers waiting: the crash, not the timeout
    assert read_log(real("sglang_segfault_nccl_init") + real("sglang_watchdog_timeout")).cause == "native_crash"
    # a server that stopped after an error no cause explains stopped for that error; errors after the hang's report
    # are its consequences
    errored = read_log(real("sglang_cpu_device_name_none") + real("sglang_detokenizer_heartbeat_hang"))
    assert errored == Reading("TypeError: argument of type 'NoneType' is not iterable", "server_bug", SERVER_BUG.knob)
    assert read_log(real("sglang_detokenizer_heartbeat_hang") + real("sglang_cpu_device_name_none")).cause == "hang"
    # a full disk, told only in a warning, explains a weight file cut short and NCCL's failure on a full /dev/shm
    for after in ("vllm_safetensors_incomplete", "vllm_nccl_dev_shm"):
        assert read_log(real("sglang_disk_full_sigbus") + real(after)).cause == "disk_full"
    # so does a /dev/shm too small, told by Ray in a warning, and a NCCL failure or a capture that fails after it
    assert read_log(real("gpustack_ray_dev_shm") + real("vllm_nccl_dev_shm")).cause == "shm_too_small"
    # a certificate not verified is why the hub could not be reached, whatever transformers then says of the model
    hub = "OSError: We couldn't connect to 'https://huggingface.co' to load this file"
    assert read_log(real("vllm_hub_certificate_verify") + [hub]).cause == "tls_certificate"
    # CUDA graphs failing to capture are read after what failed inside the capture: a lost peer, memory
    assert read_log(real("sglang_torch_compile_graph_capture") + real("sglang_graph_capture_gloo")).cause == "peer_lost"
    assert read_log(real("sglang_graph_capture_current_seed") + real("sglang_cuda_graph_oom")).cause == (
        "graph_capture_oom")
    # a warning no cause may be told in stays harmless: vLLM survives its extension failing to load
    # (vllm-project/vllm#5501)
    assert read_log(["UserWarning: CUDA error: an illegal memory access was encountered"]).cause is None
    assert read_log(["WARNING 06-13 11:42:20 _custom_ops.py:11] Failed to import from vllm._C with ImportError('/usr/"
                     "local/lib/python3.8/dist-packages/vllm/_C.abi3.so: undefined symbol: _ZN5torch7LibraryC1ENS0_4"
                     "KindESsSt8optionalIN3c1011DispatchKeyEEPKcj')"]).cause is None
    # the GPU's illegal instruction is a kernel's fault, the CPU's (SIGILL, capitalised by the shell) a missing ISA
    assert read_log(["RuntimeError: CUDA error: an illegal instruction was encountered"]).cause == "gpu_fault"


def test_an_unknown_error_is_found_behind_a_log_collectors_prefix_and_under_any_qualified_name():
    assert server_error(["kserve-container (EngineCore_0 pid=58) KeyError: 'rope_scaling'"]) == (
        "KeyError: 'rope_scaling'", None)
    assert server_error(["huggingface_hub.errors.CacheNotFound: Cache directory not found: /data/.cache"]) == (
        "huggingface_hub.errors.CacheNotFound: Cache directory not found: /data/.cache", None)
    assert server_error(["INFO: Started server process [4255]", "Note: SM_121 uses native Triton"]) == (None, None)
    # a log collector's timestamp and torch's rank are no part of what the server said
    assert server_error(["2026-11-27T12:00:00.123456789Z [rank0]: OSError: [Errno 5] Input/output error"]) == (
        "OSError: [Errno 5] Input/output error", None)
    # nor docker compose's service, nor a supervisor's Python logger, whose level is its own, not the server's
    assert server_error(["vllm_server  | ERROR 04-15 02:01:15 [core.py:387] KeyError: 'rope_scaling'"]) == (
        "KeyError: 'rope_scaling'", None)
    assert server_error(["2025-08-13 04:39:39,839 - __main__ - WARNING - ERROR 08-13 04:39:39 engine.py:400] "
                         "KeyError: 'rope_scaling'"]) == ("KeyError: 'rope_scaling'", None)
    assert read_log(real("worker_vllm_llama31_rope_scaling")).line.startswith("ValueError: `rope_scaling` must be")
    # an error raised without a message is its name alone; an interrupt is no error but a stop asked (Ctrl-C)
    assert server_error(["    raise StopEngineError", "StopEngineError"]) == ("StopEngineError", None)
    assert read_log(["    time.sleep(1)", "KeyboardInterrupt"]) == Reading("KeyboardInterrupt", "stopped", None)


def test_a_childs_own_crash_lets_a_known_cause_speak_but_a_kill_from_outside_does_not():
    died = "RuntimeError: Rank 0 scheduler died during initialization (exit code: {})"
    disk = ".../joblib/_multiprocessing_helpers.py:44: UserWarning: [Errno 28] No space left on device."
    # SIGBUS on a file mapped on a full disk: the disk, not the signal
    assert read_log([died.format(-7), disk]).cause == "disk_full"
    # alone, the crash is what the log says, before the errors that follow it
    alone = read_log([died.format(-7), "RuntimeError: the engine is dead"])
    assert alone == Reading(died.format(-7), "killed", None)
    assert likely_cause({"exit": "exited with status 1", "server_error": alone.line}, attached=False) == (
        f'its Rank 0 scheduler crashed (SIGBUS); the server said: "{died.format(-7)}"')
    # SIGKILL came from outside: no line of the log explains it, a full disk included
    assert read_log([disk, died.format(-9)]) == Reading(died.format(-9), "killed", None)


SIGTERMED = "[shutdown] EngineCore: trigger received signal=SIGTERM"


def test_a_kill_from_outside_told_in_the_log_is_read_unless_a_line_before_it_says_why():
    assert read_log(real("vllm_enginecore_external_sigterm")) == Reading(SIGTERMED, "killed", None)
    # Ray's memory monitor kills a worker for the node's memory: what fails after it is its consequence
    ray = read_log(real("vllm_ray_memory_monitor_kill") + ["RuntimeError: the engine is dead"])
    assert ray.cause == "killed" and "Ray killed this worker" in ray.line
    # an error before the signal is why the server was ended (vLLM's API server SIGTERMs its engine after a failure),
    # and so is a hang a supervisor's health check ended (SGLang's "SIGTERM received" after its detokenizer froze)
    assert read_log(["KeyError: 'rope_scaling'", SIGTERMED]) == Reading("KeyError: 'rope_scaling'", None, None)
    assert read_log(real("sglang_detokenizer_heartbeat_hang")).cause == "hang"
    assert read_log(["INFO starting", "[2026-04-27 03:20:18] SIGTERM received. signum=None frame=None."]).cause == (
        "killed")


def test_a_stop_asked_of_the_server_is_no_fault_and_a_signal_its_child_alone_logs_a_kill():
    ctrl_c = read_log(real("vllm_shutdown_ctrl_c_tp4"))  # the signal the log tells, not the shutdown after it
    assert ctrl_c == Reading("[shutdown] EngineCore: trigger received signal=SIGINT", "stopped", None)
    # the engine core's SIGTERM is its API server's own, sent while it shuts down: no kill
    assert read_log(real("vllm_test_harness_sigterm")).line == "[shutdown] API server: shutdown triggered"
    # the same signal with no shutdown of the server's: its engine killed under it
    assert read_log(real("vllm_enginecore_external_sigterm")).cause == "killed"
    # errors after the stop are its teardown's (vLLM's EngineDeadError as the engine goes)...
    assert read_log(real("vllm_test_harness_sigterm") + real("vllm_enginecore_external_sigterm")).cause == "stopped"
    # ...an error, a known cause or a death before it is why the server was ended, a death told in a warning too
    assert read_log(real("vllm_offloading_prefix_cache_assert") + real("vllm_shutdown_ctrl_c_tp4")).cause == (
        "server_bug")
    assert read_log(real("sglang_detokenizer_heartbeat_hang")).cause == "hang"
    assert read_log(real("sglang_detokenizer_heartbeat_hang")[-1:]).cause == "stopped"  # SGLang draining on SIGTERM
    assert read_log(server_log("vllm_enginecore_killed")).cause == "died"
    reading = read_log(real("vllm_test_harness_sigterm"))
    stopped = {"exit": "exited with status 0", "server_error": reading.line, "server_cause": reading.cause}
    assert likely_cause(stopped, attached=False) == (
        "it was stopped on request, no fault of its own: something outside grpo asked it to stop (a user's Ctrl-C, a "
        "scheduler's or container supervisor's SIGTERM); the server said: "
        "\"[shutdown] API server: shutdown triggered\"")


# Real lines as collectors printed them (the threads are named in tests/data/server_logs/real/SOURCE's thirteenth and
# fourteenth rounds where their logs are kept; the others: vllm-project/vllm#12474 and
# community-scripts/ProxmoxVED#2047 (journald), vllm-project/vllm#43410 (a launcher's Python logger),
# vllm-project/vllm#28658 (a Ray job's nested workers), aws-samples/amazon-sagemaker-generativeai#111 (CloudWatch's CSV
# export of a SageMaker endpoint, rsyslog's escapes of vLLM's colours), Mini-o3/Mini-o3#16 and
# stepfun-ai/Step3-VL-10B#11 (a launcher's time and command)).
@pytest.mark.parametrize("line, said", [
    (real("arbor_sglang_router_open_files")[2],
     "called `Result::unwrap()` on an `Err` value: Os { code: 24, kind: Uncategorized, message: "
     '"Too many open files" }'),
    ('1756144012376,"#033[1;36m(EngineCore_0 pid=75)#033[0;0m ERROR 08-25 10:46:52 [core.py:700]   File '
     '""/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py"", line 492, in __init__#015"',
     'File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 492, in __init__'),
    ("1756144012376,#033[1;36m(EngineCore_0 pid=75)#033[0;0m ERROR 08-25 10:46:52 [core.py:700]     "
     "self.model_executor = executor_class(vllm_config)#015", "self.model_executor = executor_class(vllm_config)"),
    ("[2025-09-25 20:03:20] [/bin/sh]: Process EngineCore_0:", "Process EngineCore_0:"),
    ("[2026-01-22 20:05:33] [/bin/sh]: [EngineCore_DP0][pid=1242] ERROR 01-22 12:05:33.129 [core.py:1302] EngineCore "
     "failed to start.", "EngineCore failed to start."),
    ("[2026-01-22 20:05:33] [/bin/sh]: ", ""),
    ("Jan 28 10:40:07 localhost bash[367371]: RuntimeError: Engine process failed to start. See stack trace for the "
     "root cause.", "RuntimeError: Engine process failed to start. See stack trace for the root cause."),
    ("Jan 28 10:40:08 localhost systemd[1]: vllm3.service: Main process exited, code=exited, status=1/FAILURE",
     "vllm3.service: Main process exited, code=exited, status=1/FAILURE"),
    ("Aug 19 18:34:30 vllm vllm[8707]: (APIServer pid=8707)     return cls(", "return cls("),
    ("2026-05-29 09:14:45,594 - INFO - [container] (APIServer pid=557)     return cls(", "return cls("),
    ("(EngineCore_DP0 pid=1769) (RayWorkerWrapper pid=274, ip=10.2.1.15) [Gloo] Rank 0 is connected to 0 peer ranks. "
     "Expected number of connected peer ranks is : 0 [repeated 8x across cluster] (Ray deduplicates logs by default. "
     "Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master/ray-observability/"
     "user-guides/configure-logging.html#log-deduplication for more options.)",
     "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0"),
    (real("vllm_shutdown_ctrl_c_tp4")[0], "[shutdown] EngineCore: trigger received signal=SIGINT"),
])
def test_what_collectors_and_launchers_add_around_a_line_is_no_part_of_it(line, said):
    assert message(line) == said


@pytest.mark.parametrize("lines, read", [
    # Rust 1.73 on: the message on the line after; the lines before are the router's own INFO
    (["[Router (Rust)] 2025-05-05 12:43:53 - INFO - starting service", "thread 'main' panicked at src/server.rs:12:5:",
      "called `Result::unwrap()` on an `Err` value: AddrInUse", "note: run with `RUST_BACKTRACE=1`"],
     "called `Result::unwrap()` on an `Err` value: AddrInUse (thread panicked at src/server.rs:12:5)"),
    (["thread 'tokio-runtime-worker' panicked at 'no healthy workers', src/router.rs:88:9"],
     "thread 'tokio-runtime-worker' panicked at 'no healthy workers', src/router.rs:88:9"),
])
def test_a_rust_panic_is_read_with_its_message(lines, read):
    """SGLang's and vLLM's routers are Rust: a panic has no Python traceback and no level, its message on
    the line after the panic's own since Rust 1.73 (Arbor's log, tests/data/server_logs/real, has one)."""
    assert read_log(lines).line == read


def test_a_launchers_level_is_not_the_servers():
    """Lemonade prints the engine's INFO lines as [Error] where it reads them from stderr: the OOM is what is read."""
    lines = real("lemonade_vllm_rocm_hip_oom")
    assert message(lines[0]) == message(lines[2])  # the error raw on stderr, and logged by the engine's logger
    assert read_log(lines).line.startswith("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 12.95 GiB.")


def test_a_process_printing_anothers_lines_adds_its_prefix_to_theirs():
    nested = "(APIServer pid=716) (EngineCore_DP0 pid=1101) ERROR 01-29 10:27:47 [core.py:710] "
    assert server_error([nested + "KeyError: 'rope_scaling'"]) == ("KeyError: 'rope_scaling'", None)
    assert read_log(real("mooncake_vllm_pd_rpc_timeout")).cause == "hang"


SERVER_FRAME = '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1570, in get_next_batch'
TORCH_FRAME = '  File "/usr/local/lib/python3.12/dist-packages/torch/functional.py", line 402, in einsum'


@pytest.mark.parametrize("lines, kind", [
    # what the server says it does not have
    (["NotImplementedError: Pipeline parallelism is not supported for this model."], UNSUPPORTED_FEATURE),
    (["    raise NotImplementedError", "NotImplementedError"], UNSUPPORTED_FEATURE),
    # its own invariants and Nones, with or without a traceback
    (["AssertionError"], SERVER_BUG),
    (["TypeError: object of type 'NoneType' has no len()"], SERVER_BUG),
    # any error raised in its frames (or one or two calls below them)...
    ([SERVER_FRAME, "    self.hidden_states = torch.cat(", "RuntimeError: Sizes of tensors must match"], SERVER_BUG),
    ([SERVER_FRAME, "    x = torch.einsum(...)", TORCH_FRAME, "    return _VF.einsum(", "RuntimeError: bad"],
     SERVER_BUG),
    # ...or below its repr, where vLLM's engine logs the repr first
    (["KeyError('chatcmpl-2f')", SERVER_FRAME, "    seq = self.req_id_to_seq_id[req_id]", "KeyError: 'chatcmpl-2f'"],
     SERVER_BUG),
    # but for errors of the machine or of what the server was given, and errors raised elsewhere
    ([SERVER_FRAME, "    raise ValueError(", "ValueError: max_model_len must be positive"], None),
    ([SERVER_FRAME, "    os.makedirs(path)", "PermissionError: [Errno 13] Permission denied: '/models'"], None),
    ([TORCH_FRAME, "    return _VF.einsum(", "RuntimeError: einsum(): operands do not broadcast"], None),
    (["KeyError: 'rope_scaling'"], None),
])
def test_an_error_no_cause_names_is_read_in_its_kind_where_the_log_says_enough(lines, kind):
    reading = read_log(lines)
    assert (reading.cause, reading.knob) == ((kind.name, kind.knob) if kind else (None, None))
