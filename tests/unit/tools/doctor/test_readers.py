"""The console-log readers on logs as they reach the doctor: behind launchers' prefixes and colours,
from buffered output, resumed, torn, with odd characters inside lines, huge, and ending in crashes."""

from __future__ import annotations

import ast
import pprint

import pytest

from grpo.cli import main
from grpo.tools.doctor import examine, textlog
from grpo.tools.doctor.areal import ArealReader
from grpo.tools.doctor.record import EVAL_ACCURACY, REWARD
from grpo.tools.doctor.trl import TrlLogReader
from grpo.tools.watch import Tail
from tests.foreign_logs import FORMATS, TRACEBACK, Step, healthy
from tests.real_runs import ROOT as REAL_RUNS

SOURCES = {"areal": "areal", "verl": "verl", "trl_log": "trl"}
CONSOLE = sorted(SOURCES)
TRL = FORMATS["trl_log"]


def render(name: str, steps=range(1, 7), total: int = 20, preamble: bool = True) -> list[str]:
    fmt = FORMATS[name]
    lines = fmt.preamble() if preamble else []
    for s in steps:
        lines += fmt.step(healthy(s), total)
    return lines


def write(tmp_path, text: str | bytes, name: str = "train.log"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def read(tmp_path, lines: list[str], name: str = "train.log"):
    _, record = examine(write(tmp_path, "\n".join(lines) + "\n", name))
    return record


def rewards(record) -> dict[int, float]:
    return dict(record.series(REWARD))


def expected_rewards(steps) -> dict[int, float]:
    return pytest.approx({s: healthy(s).reward for s in steps}, rel=1e-3)


def restarts(record) -> list[int]:
    return [m.step for m in record.marks if m.kind == "restart"]


STAMP = "2025-11-26T15:53:37.244105625"
PREFIXES = {
    "docker-logs-t": lambda line: f"{STAMP}Z {line}",
    "kubectl-timestamps": lambda line: f"{STAMP}+00:00 {line}",
    "kubectl-prefix": lambda line: f"[pod/trainer-0/main] {line}",
    "compose": lambda line: f"trainer-1  | {line}",
    "ray": lambda line: f"(TaskRunner pid=2231) {line}",
    "ray-ip": lambda line: f"(WorkerDict pid=1, ip=10.0.0.1) {line}",
    "torchrun": lambda line: f"[rank0]: {line}",
    "ansi": lambda line: f"\x1b[36m{line}\x1b[0m",
    "stacked": lambda line: f"{STAMP}Z \x1b[36m(TaskRunner pid=2231)\x1b[0m {line}",
}


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
@pytest.mark.parametrize("name", CONSOLE)
def test_prefixed_lines_read_as_the_plain_log(tmp_path, name, prefix):
    """AReaL's stats tables behind a prefix are the case that was lost: their rows must still be rows."""
    plain = read(tmp_path, render(name), "plain.log")
    assert plain.steps() == [1, 2, 3, 4, 5, 6] and rewards(plain) == expected_rewards(range(1, 7))
    record = read(tmp_path, [PREFIXES[prefix](line) for line in render(name)])
    assert record.source == SOURCES[name]
    assert record.steps() == plain.steps() and rewards(record) == rewards(plain)


def trl_parts(step: int, total: int) -> tuple[str, str]:
    """TRL's progress bar at `step` and the dict it logs there, apart."""
    _, bar, _, logged = TRL.step(healthy(step), total)[0].split("\r")
    return bar, logged


@pytest.mark.parametrize("bars, logged", [(8, range(1, 9)), (20, range(5, 21, 5))], ids=["every-step", "every-5"])
def test_trl_buffered_burst_of_dicts_spread_between_bar_steps(tmp_path, bars, logged):
    """stderr's bar is drawn up to `bars` before stdout's block of dicts is flushed at once, the first
    dict right after the bar drawn last, on its line."""
    drawn = "".join(f"\r{trl_parts(k, bars)[0]}\r{' ' * 45}\r\r{trl_parts(k, bars)[0]}" for k in range(1, bars + 1))
    dicts = [trl_parts(s, bars)[1] for s in logged]
    record = read(tmp_path, TRL.preamble() + [drawn + dicts[0]] + dicts[1:])
    assert record.source == "trl" and record.steps() == list(logged)
    assert rewards(record) == expected_rewards(logged)
    assert [n for n in record.notes if n.startswith("buffered output")]


def test_trl_unbuffered_dicts_make_no_buffering_note(tmp_path):
    record = read(tmp_path, render("trl_log"))
    assert record.steps() == [1, 2, 3, 4, 5, 6] and not [n for n in record.notes if "buffered" in n]


def test_trl_dicts_printed_over_several_lines_read_as_one_step_each(tmp_path):
    """`pprint` (and users pasting a long dict) breaks it before each key; each is still one step, placed
    once its closing line is in, and a dict cut off at the end of the file is read as far as it goes."""
    wrapped = [line for s in range(1, 4) for line in pprint.pformat(ast.literal_eval(trl_parts(s, 20)[1])).splitlines()]
    assert len(wrapped) > 9
    cut = pprint.pformat(ast.literal_eval(trl_parts(4, 20)[1])).splitlines()
    cut = cut[:next(i for i, line in enumerate(cut) if "'reward'" in line) + 1]
    record = read(tmp_path, wrapped + cut)
    assert record.steps() == [1, 2, 3, 4] and rewards(record) == expected_rewards(range(1, 5))
    reader = TrlLogReader(tmp_path / "live.log")
    for line in wrapped[:-1]:
        reader.feed(line)
    assert reader.result(final=False).steps() == [1, 2]
    reader.feed(wrapped[-1])
    assert reader.result(final=False).steps() == [1, 2, 3]


def test_verl_validation_before_training_is_no_step_and_no_restart(tmp_path):
    val = "(TaskRunner pid=2231) step:0 - val-core/openai/gsm8k/reward/mean@1:0.21 - val-aux/num_turns/min:1"
    record = read(tmp_path, FORMATS["verl"].preamble() + [val] + render("verl", range(1, 4), preamble=False))
    assert record.steps() == [1, 2, 3] and restarts(record) == []
    assert record.metrics[0] == {EVAL_ACCURACY: 0.21}


RESUMES = {"verl": "(TaskRunner pid=2231) Load from checkpoint folder: /ckpt/global_step_40",
           "trl_log": "[INFO|trainer.py:2453]   Continuing training from global step 40"}


@pytest.mark.parametrize("name", sorted(RESUMES))
def test_resume_from_a_checkpoint_restarts_at_the_step_after_it(tmp_path, name):
    """The first attempt logged 1..44 and crashed; the second loads step 40's checkpoint and logs 41..46."""
    first = render(name, range(1, 45), total=100) + TRACEBACK
    second = FORMATS[name].preamble() + [RESUMES[name]] + render(name, range(41, 47), total=100, preamble=False)
    record = read(tmp_path, first + second)
    assert record.steps() == list(range(1, 47)) and restarts(record) == [41]
    assert rewards(record) == expected_rewards(range(1, 47))


# Where a later step's evidence must point, and where a step rendered as 7 is cut to make the torn last line.
NEEDLES = {"verl": ("", "step:6 - "), "areal": ("Train step 6/", "task_reward/avg"), "trl_log": ("", " 6/20 [")}
CUTS = {"verl": "actor/pg_loss", "areal": "╧", "trl_log": "'reward_std'"}


@pytest.mark.parametrize("name", CONSOLE)
def test_lines_counted_as_editors_count_them_and_a_torn_last_line_read(tmp_path, name):
    """Only \\n ends a line: a form feed, NEL (U+0085) or \\r inside a line is part of it, as editors and
    `grep -n` count; the torn last line ends inside step 7's text, after its reward."""
    odd = ["config dump\x0cpage two", "caf\x85 next line", "Downloading: 10%\r Downloading: 100%"]
    fmt = FORMATS[name]
    torn = "\n".join(fmt.step(Step(7, 0.5, 0.25, 0.0, 0.3), 20))
    torn = torn[: torn.rindex(CUTS[name]) + 3]
    text = "\n".join(fmt.preamble() + odd + render(name, preamble=False)) + "\n" + torn
    record = examine(write(tmp_path, text))[1]
    assert record.steps() == [1, 2, 3, 4, 5, 6, 7] and rewards(record)[7] == 0.5
    after, needle = NEEDLES[name]
    assert record.evidence_by_step[6].line == text[: text.index(needle, text.index(after))].count("\n") + 1


def test_areal_table_judged_only_once_whole(tmp_path):
    """`grpo watch` polls between a table's rows: half a table gives its step no reward yet."""
    fmt, log = FORMATS["areal"], tmp_path / "trainer.log"
    step3 = fmt.step(healthy(3), 20)
    half = fmt.preamble() + render("areal", range(1, 3), preamble=False) + step3[:-3]
    log.write_text("\n".join(half) + "\n")
    reader, tail = ArealReader(log), Tail(log)
    reader.feed_all(tail.poll())
    record = reader.result()
    assert 3 in record.evidence_by_step and REWARD not in record.metrics.get(3, {})
    with log.open("a") as f:
        f.write("\n".join(step3[-3:]) + "\n")
    reader.feed_all(tail.poll())
    assert reader.result().metrics[3][REWARD] == pytest.approx(healthy(3).reward, rel=1e-3)


NOISE = ("/usr/lib/python3/site-packages/vllm/config.py:1: UserWarning: " + "w" * 1024)[:1023] + "\n"  # 1 KiB


@pytest.mark.parametrize("after", [0, textlog.TAIL + 1024], ids=["steps-in-tail", "steps-in-neither-end"])
def test_verl_read_after_5_mib_of_start_up_output(tmp_path, after):
    """Past the 4 MiB head the doctor reads to tell a format: found by its step lines in the tail, or by
    the verl launch lines in the head when more than the tail's worth of shutdown noise follows the steps."""
    noise = NOISE * (5 << 10)
    text = ("\n".join(FORMATS["verl"].preamble()) + "\n" + noise + "\n".join(render("verl", preamble=False)) + "\n"
            + NOISE * (after // len(NOISE)))
    _, record = examine(write(tmp_path, text))
    assert record.source == "verl" and record.steps() == [1, 2, 3, 4, 5, 6]


TB = "Traceback (most recent call last):"
OOM = [TB,
       '  File "/workspace/verl/verl/workers/fsdp_workers.py", line 512, in update_actor',
       "    metrics = self.actor.update_policy(data=data)",
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of "
       "79.10 GiB of which 1.06 GiB is free."]


def test_verl_log_with_only_launch_lines_and_an_oom_is_out_of_memory(tmp_path, capsys):
    config = ("(TaskRunner pid=1) {'actor_rollout_ref': {'model': {'path': 'Qwen/Qwen2.5-0.5B'}}, "
              "'reward_model': {'enable': False}, 'data': {'train_files': '~/data/gsm8k/train.parquet'}}")
    log = write(tmp_path, "\n".join([config] + OOM) + "\n")
    diagnosis, record = examine(log)
    assert record.source == "verl" and record.steps() == [] and diagnosis.cause == "out_of_memory"
    assert main(["doctor", str(log)]) == 1
    assert "out_of_memory" in capsys.readouterr().out


@pytest.mark.parametrize("name", CONSOLE)
def test_nul_bytes_left_by_copytruncate_are_dropped(tmp_path, name):
    text = "\n".join(render(name)) + "\n"
    record = examine(write(tmp_path, b"\0" * 70000 + text.encode()))[1]
    assert record.source == SOURCES[name] and rewards(record) == expected_rewards(range(1, 7))


@pytest.mark.parametrize("name", CONSOLE)
def test_a_10_mb_line_is_cut_to_its_head(tmp_path, name):
    """A dataset printed on one line (a list of dicts, ten megabytes): only MAX_LINE of it is read, and no
    pattern looking for the framework's lines is matched from each of its `{'` (that took hours)."""
    dump = "[" + "{'prompt': 'What is 2+2?', 'answer': '4'}, " * 250_000 + "]"
    log = write(tmp_path, dump + "\n" + "\n".join(render(name)) + "\n")
    record = examine(log)[1]
    assert record.source == SOURCES[name] and record.steps() == [1, 2, 3, 4, 5, 6]
    lines = list(textlog.iter_lines(log))
    assert lines[0] == dump[: textlog.MAX_LINE] and max(map(len, lines)) <= textlog.MAX_LINE


CRASHES = {
    "cuda-oom": (OOM, "out_of_memory", "torch.OutOfMemoryError"),
    "nccl-error": ([TB, '  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2501, '
                    "in all_reduce", "    work = group.allreduce([tensor], opts)",
                    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled "
                    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"],
                   "gpu_failure", "RuntimeError: NCCL error"),
    "nccl-watchdog": (["[rank1]:[E1126 15:53:37.244105 2231 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
                       "collective operation timeout: WorkNCCL(SeqNum=4211, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                       "Timeout(ms)=600000) ran for 600092 milliseconds before timing out."],
                      "gpu_failure", "[E1126"),
    "ray-actor-died": ([TB, '  File "/workspace/verl/verl/trainer/main_ppo.py", line 64, in run_ppo',
                        "    ray.get(runner.run.remote(config))",
                        '  File "/usr/lib/python3/dist-packages/ray/_private/worker.py", line 2772, in get',
                        "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
                        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."],
                       "worker_failure", "ray.exceptions.ActorDiedError"),
    "reward-function": ([TB, '  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 1047, in fit',
                         "    reward_tensor = self.reward_fn(batch)",
                         '  File "/workspace/verl/verl/utils/reward_score/__init__.py", line 45, in '
                         "default_compute_score",
                         "    res = gsm8k.compute_score(solution_str, ground_truth)",
                         '  File "/workspace/verl/verl/utils/reward_score/gsm8k.py", line 60, in compute_score',
                         "    answer = solution_str.split('####')[1]", "IndexError: list index out of range"],
                        "reward_broken", "IndexError"),
    "disk-full": ([TB, '  File "/workspace/verl/verl/utils/checkpoint/fsdp_checkpoint_manager.py", line 201, in '
                   "save_checkpoint", "    torch.save(model_state_dict, model_path)",
                   "OSError: [Errno 28] No space left on device"], "disk_full", "OSError: [Errno 28]"),
    # torch.save's zip writer when the write comes short (no errno in its message): uqcxu9's verl run, step 700.
    "torch-save-short-write": ([TB, ('  File "/venv/lib/python3.12/site-packages/torch/serialization.py", line 1216, '
                                     "in _save"), "    zip_file.write_record(name, storage, num_bytes)",
                                ("RuntimeError: [enforce fail at inline_container.cc:815] . PytorchStreamWriter failed "
                                 "writing file data/721: file write failed")], "disk_full", "RuntimeError: [enforce"),
    "config-error-under-torchrun": (
        [TB, '  File "/workspace/train.py", line 33, in main', "    run(config)",
         "omegaconf.errors.ConfigKeyError: Key 'rollout_n' is not in struct", "    full_key: trainer.rollout_n",
         "E1126 15:53:38.100000 2200 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)",
         TB, '  File "/usr/local/bin/torchrun", line 8, in <module>', "    sys.exit(main())",
         '  File "/usr/lib/python3/dist-packages/torch/distributed/run.py", line 892, in main', "    run(args)",
         "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED",
         "Root Cause (first observed failure):", "[0]:", "  exitcode  : 1 (pid: 2231)", "=" * 60, "Killed"],
        "crashed", "omegaconf.errors.ConfigKeyError"),
    "ray-remote-traceback-without-header": (
        ["(Runner pid=7) Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
         "ray::WorkerDict.actor_rollout_ref_update_actor() (pid=8, ip=10.0.0.1, actor_id=ee90, repr=<WorkerDict>)",
         '(Runner pid=7)   File "/workspaces/EasyR1/verl/workers/fsdp_workers.py", line 504, in update_actor',
         "(Runner pid=7)     metrics = self.actor.update_policy(data=data)",
         "(Runner pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.12 GiB."],
        "out_of_memory", "torch.OutOfMemoryError"),
    # lmm-r1#43: the frames pasted without their header, then the LLM actors' copy of the error.
    "engine-oom-without-header-and-its-copies": (
        ['(ActorModelRayActor pid=3)   File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker.py", line '
         "140, in wake_up", "(ActorModelRayActor pid=3)     allocator.wake_up()",
         '(ActorModelRayActor pid=3)   File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", '
         "line 75, in create_and_map", "(ActorModelRayActor pid=3)     python_create_and_map(*allocation_handle)",
         "(ActorModelRayActor pid=3) RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
         "(LLMRayActor pid=4) CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62 [repeated 3x across "
         "cluster]"],
        "server_failure", "RuntimeError: CUDA Error: out of memory"),
    # verl#5750: the driver's traceback torn after Ray's line for the remote failure, before the inner one's.
    "ray-chained-line-then-torn": (
        [TB, '  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 1026, in get_objects',
         "    raise value.as_instanceof_cause()",
         "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=4030, ip=10.0.2.100, "
         "actor_id=3c87465a346071ce4fca78a401000000, repr=<main_ppo.TaskRunner object at 0x7123673b92b0>)",
         "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
         '  File "/workspace/verl/verl/trainer/main_ppo.py", line 359, in run', "    trainer.fit()"],
        "worker_failure", "ray.exceptions.RayTaskError(ActorDiedError)"),
    "ray-chained-line-then-its-inner-error": (
        [TB, '  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 1026, in get_objects',
         "    raise value.as_instanceof_cause()",
         "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor() (pid=8, "
         "ip=10.0.0.1, actor_id=ee90, repr=<WorkerDict>)",
         '  File "/workspaces/EasyR1/verl/workers/fsdp_workers.py", line 504, in update_actor',
         "    metrics = self.actor.update_policy(data=data)",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.12 GiB."],
        "out_of_memory", "torch.OutOfMemoryError"),
    # ms-swift#8378: sampling the next rollout from NaN probabilities (a policy gone non-finite), on the GPU a
    # device-side assertion printed after the progress bar's redraw, then the CUDA error that only repeats it.
    "nan-probabilities-device-assert": (
        ["Train:   7%|▋         | 82/1218 [18:06:05<227:39:40, 721.46s/it]/pytorch/aten/src/ATen/native/cuda/"
         "TensorCompare.cu:112: _assert_async_cuda_kernel: block: [0,0,0], thread: [0,0,0] Assertion `probability "
         "tensor contains either `inf`, `nan` or element < 0` failed.",
         "[rank5]: " + TB, '[rank5]:   File "/env/ms-swift/swift/llm/train/sft.py", line 258, in train',
         "[rank5]: RuntimeError: CUDA error: device-side assert triggered"],
        "nonfinite", "/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:112"),
    "nan-probabilities-on-the-cpu": (
        [TB, '  File "/usr/lib/python3.11/site-packages/transformers/generation/utils.py", line 2982, in _sample',
         "    next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)",
         "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0"],
        "nonfinite", "RuntimeError: probability tensor"),
    # OpenRLHF#1050: the driver's traceback, then the vLLM engine's own lines, each under its logger's record
    # header, down to the out-of-memory of its wake-up from sleep.
    "engine-frames-under-its-loggers-record-headers": (
        [TB, '  File "/root/miniconda3/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
         "(LLMRayActor pid=4) ERROR 06-10 10:55:03 [core.py:459]     allocator.wake_up(tags)",
         '(LLMRayActor pid=4) ERROR 06-10 10:55:03 [core.py:459]   File "/usr/lib/python3.10/site-packages/vllm/'
         'device_allocator/cumem.py", line 77, in create_and_map [repeated 3x across cluster]',
         "(LLMRayActor pid=4) ERROR 06-10 10:55:03 [core.py:459] RuntimeError: CUDA Error: out of memory at "
         "/workspace/csrc/cumem_allocator.cpp:62 [repeated 3x across cluster]"],
        "server_failure", "RuntimeError: CUDA Error: out of memory"),
    # ORZ#21: Ray's line for a remote failure in the engine's actor (the trainer's frames only call it), torn.
    "ray-chained-oom-in-the-engines-actor": (
        [TB, '  File "/orz/ppo/trainer.py", line 1289, in _backload_vllm_engines',
         "    await asyncio.gather(*backload_tasks)",
         "ray.exceptions.RayTaskError(OutOfMemoryError): ray::LLMActor.backload_to_gpu() (pid=11992, "
         "ip=10.148.9.90, actor_id=94eaf50266961525"],
        "server_failure", "ray.exceptions.RayTaskError(OutOfMemoryError)"),
    # OpenRLHF#398: the exception's own line, then DeepSpeed's launcher killing the other processes.
    "oom-then-the-launchers-teardown": (
        ["[rank7]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 7 has a total "
         "capacity of 39.39 GiB of which 14.00 MiB is free.",
         "[2024-08-02 01:24:59,694] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 33131",
         "[2024-08-02 01:25:00,501] [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', '-m', "
         "'openrlhf.cli.train_ppo'] exits with return code = 1"],
        "out_of_memory", "torch.cuda.OutOfMemoryError"),
    # ms-swift#3840: a reward called with what the trainer passes, missing the dataset column it needs; pasted from
    # inside its frame's path.
    "reward-that-cannot-take-the-trainers-arguments": (
        ['py", line 855, in _generate_and_score_completions',
         "[rank5]:     output_reward_func = reward_func(completions, **reward_kwargs)",
         "[rank5]: TypeError: CosineReward.__call__() missing 1 required positional argument: 'solution'"],
        "reward_broken", "TypeError: CosineReward"),
    # agent-lightning#218: the frames pasted without their header and without the exception's own line, then another
    # process's lines: the exception went up through those frames all the same.
    "traceback-pasted-without-its-exception-line": (
        ['File "/usr/lib/python3.11/site-packages/agentlightning/verl/trainer.py", line 95, in _train_step',
         "    batch, agent_metrics = self.agent_mode_daemon.get_train_data_batch(",
         "                           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
         '  File "/usr/lib/python3.11/site-packages/agentlightning/verl/daemon.py", line 379, in get_train_data_batch',
         "    original_sample = self._task_id_to_original_sample[rollout_id]",
         "                      ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^",
         "(Process-11615 agentlightning.server) Task rollout-85c3 timed out after 600.0s, requeued (attempt 1)"],
        "crashed", "a traceback without its exception line, last in get_train_data_batch (daemon.py): original_sample"),
    "rank0-prefixed": (["[rank0]: " + line for line in
                        [TB, '  File "/workspace/train.py", line 88, in <module>', "    loss.backward()",
                         "RuntimeError: CUDA error: an illegal memory access was encountered",
                         "CUDA kernel errors might be asynchronously reported at some other API call."]],
                       "gpu_failure", "RuntimeError: CUDA error"),
}


@pytest.mark.parametrize("case", sorted(CRASHES))
def test_crash_classified_by_its_text(tmp_path, case):
    """A log that logged no step, only its crash: named by the root of the chain, not its wrappers."""
    lines, kind, telling = CRASHES[case]
    diagnosis, record = examine(write(tmp_path, "\n".join(lines) + "\n"))
    assert record.steps() == [] and diagnosis.cause == kind
    assert diagnosis.evidence[0].text.startswith(telling)


@pytest.mark.parametrize("metrics, cause", [
    ("actor/kl_loss:nan - actor/pg_loss:nan - actor/grad_norm:nan - perf/max_memory_allocated_gb:27.050", "nonfinite"),
    ("critic/vf_loss:nan - critic/vpred_mean:nan - critic/grad_norm:nan - actor/pg_loss:-0.013 - actor/grad_norm:9.8",
     "nonfinite"),  # verl#498: the critic's loss and gradient, the actor's finite
    ("actor/pg_loss:0.01 - actor/grad_norm:0.3 - perf/max_memory_allocated_gb:nan", "unknown")])
def test_a_nan_loss_is_named_without_a_reward_other_nans_are_not(tmp_path, metrics, cause):
    """A step line torn before its reward keys: a NaN loss or gradient is trouble on its own; a NaN elsewhere
    (memory) is not, and without a reward the run stays unknown."""
    diagnosis = examine(write(tmp_path, f"step:59 - global_seqlen/mean:18257.750 - {metrics} -\n"))[0]
    assert diagnosis.cause == cause and diagnosis.first_bad_step == (59 if cause == "nonfinite" else None)


# A verl run's out-of-memory after its steps, from the two sides of its colocated workers. Training: EasyR1#9's
# actor update. Rollout: verl#302's generate_sequences waking vLLM, whose innermost frames and error are
# vllm#13941's (the same wake-up; the verl#302 copy is cut before them).
OOM_SIDES = {
    "training": (["(Runner pid=7) Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
                  "ray::WorkerDict.actor_rollout_ref_update_actor() (pid=8, ip=10.0.0.1, actor_id=ee90, "
                  "repr=<WorkerDict>)",
                  '(Runner pid=7)   File "/workspaces/EasyR1/verl/workers/fsdp_workers.py", line 504, in update_actor',
                  "(Runner pid=7)     metrics = self.actor.update_policy(data=data)",
                  '(Runner pid=7)   File "/usr/local/lib/python3.10/dist-packages/torch/_tensor.py", line 648, in '
                  "backward", "(Runner pid=7)     torch.autograd.backward(",
                  "(Runner pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.12 GiB. GPU 0 has a "
                  "total capacity of 79.19 GiB of which 2.11 GiB is free."], "out_of_memory"),
    "rollout": (["(main_task pid=1) Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
                 "ray::WorkerDict.actor_rollout_generate_sequences() (pid=2, ip=10.65.194.91, actor_id=d220, "
                 "repr=<verl.single_controller.ray.base.WorkerDict object at 0x152530529600>)",
                 '(main_task pid=1)   File "/verl/verl/workers/fsdp_workers.py", line 463, in generate_sequences',
                 "(main_task pid=1)     with self.rollout_sharding_manager:",
                 '(main_task pid=1)   File "/verl/verl/workers/sharding_manager/fsdp_vllm.py", line 79, in __enter__',
                 "(main_task pid=1)     self.inference_engine.wake_up()",
                 '(main_task pid=1)   File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", '
                 "line 75, in create_and_map",
                 "(main_task pid=1)     python_create_and_map(*allocation_handle)",
                 "(main_task pid=1) RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"],
                "server_failure"),
}


@pytest.mark.parametrize("side", sorted(OOM_SIDES))
def test_a_verl_oom_is_the_servers_only_when_the_rollout_ran_out_of_memory(tmp_path, side):
    """The actor update's OOM is training's (no server failure marked); the rollout engine's is the server's."""
    lines, cause = OOM_SIDES[side]
    diagnosis, record = examine(write(tmp_path, "\n".join(render("verl") + lines) + "\n"))
    assert record.steps() == [1, 2, 3, 4, 5, 6]
    assert (diagnosis.cause, diagnosis.first_bad_step) == (cause, 7)
    assert [m.step for m in record.marks if m.kind == "server_failure"] == ([7] if side == "rollout" else [])


def test_open_reasoner_zero_steps_are_numbered_by_the_episode_bar_where_the_log_begins_mid_run():
    """The status dict ends a step, counted from 1; the episode bar after it says which step it was (a copy
    from mid-run starts at 89), its count times the episodes is the run's length, and an evaluation belongs to
    the step before it."""
    record = examine(REAL_RUNS / "orz_32b_mid_run_step91" / "train.log")[1]
    assert record.source == "open-reasoner-zero" and record.steps() == [89, 90]
    assert rewards(record) == pytest.approx({89: 0.4, 90: 0.41667}, rel=1e-4)
    assert record.metrics[90]["loss"] == pytest.approx(1.1733e-05, rel=1e-3)
    assert record.total_steps == 20 * 7110 and record.metrics[90][EVAL_ACCURACY] == pytest.approx(0.2293)


def test_open_reasoner_zero_crash_before_the_status_dict_ends_the_step_in_progress():
    """Step 2's rewards were printed, then its policy update ran out of memory: the crash is step 2's, and its
    rewards are not a step that trained."""
    diagnosis, record = examine(REAL_RUNS / "orz_32b_oom_policy_train_step2" / "train.log")
    assert record.steps() == [1] and (diagnosis.cause, diagnosis.first_bad_step) == ("out_of_memory", 2)


@pytest.mark.parametrize("log, read", [
    ("primerl_issue1117_zero_loss_zero_grad/trainer.log", {9: {"loss": 0.0, "grad_norm": 0.0, "entropy": 0.3571},
                                                           10: {"loss": 0.0, "grad_norm": 0.0, "entropy": 0.3794}}),
    ("primerl_pr1318_orchestrator_healthy/orchestrator.log", {28: {"reward": 0.3887, "length": 345.6},
                                                               32: {"reward": 0.3715, "step_s": 94.61}})])
def test_prime_rl_trainer_and_orchestrator_step_lines(log, read):
    """Each of prime-rl's two logs read on its own: the trainer's update, the orchestrator's rollouts (its last
    line torn after the reward still counts)."""
    record = examine(REAL_RUNS / log)[1]
    assert record.source == "prime-rl"
    for step, values in read.items():
        assert {k: record.metrics[step][k] for k in values} == pytest.approx(values)


def test_prime_rl_step_count_going_back_starts_a_new_attempt(tmp_path):
    lines = (REAL_RUNS / "primerl_pr1318_orchestrator_healthy" / "orchestrator.log").read_text().splitlines()
    record = read(tmp_path, lines[:5] + lines[1:5])
    assert restarts(record) == [28] and record.steps() == [28, 29]


def test_ray_workers_that_never_started_for_want_of_a_gpu_are_a_gpu_failure_not_a_dead_server():
    """simpleRL-reason (verl): every worker died in its creation task on "No CUDA GPUs are available". An actor
    that never started is no inference server dying (its lines mark no server failure); the advice keeps its
    names' case."""
    diagnosis, record = examine(REAL_RUNS / "simplerl_no_cuda_gpus_startup" / "errors.txt")
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("gpu_failure", 1)
    assert not [m for m in record.marks if m.kind == "server_failure" and "creation task" in m.detail]
    assert "nvidia-smi" in diagnosis.explanation and "NCCL_DEBUG=INFO" in diagnosis.explanation


def test_hydras_closing_line_is_quoted_with_the_message_it_closes(tmp_path):
    # Hydra's shape for a config that would not compose: the message, where it searched, then its closing line
    log = tmp_path / "train.log"
    log.write_text("In 'grpo_small': Could not find 'algorithm/rollout_correction'\n\nConfig search path:\n"
                   "\tprovider=hydra, path=pkg://hydra.conf\n\tprovider=schema, path=structured://\n\n"
                   "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
    diagnosis, _ = examine(log)
    assert diagnosis.cause == "crashed" and diagnosis.first_bad_step == 1
    assert "Could not find 'algorithm/rollout_correction' (Set the environment variable HYDRA_FULL_ERROR=1" \
        in diagnosis.explanation


def test_trl_bars_printed_without_their_glyphs_give_the_steps(tmp_path):
    """Notebooks (Colab) print tqdm's bar as text without its glyphs (`  5% 5/20 [00:05<00:15, 1.00s/it]`):
    the step is still the bar's, not the count of dicts."""
    lines = TRL.preamble()
    for s in (5, 10, 15):
        lines += [f" {s * 5}% {s}/20 [00:{s:02d}<00:15, 1.00s/it]Both `max_new_tokens` (=384) and `max_length` seem "
                  "to have been set.", trl_parts(s, 20)[1]]
    record = read(tmp_path, lines)
    assert record.steps() == [5, 10, 15] and record.total_steps == 20
    assert rewards(record) == expected_rewards((5, 10, 15))


def test_a_trainer_that_never_reached_its_vllm_server_is_a_server_failure_before_step_1(tmp_path):
    """TRL's server mode: the trainer's client retries until the server (`trl vllm-serve`) answers; a log that
    ends in those retries, with no step, never generated a completion. Its timeout's exception says the same."""
    wait = "2025-03-26 05:53:13 - INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds..."
    diagnosis, _ = examine(write(tmp_path, "[INFO|trainer.py:746] >> Using auto half precision backend\n"
                                 + f"{wait}\n" * 3))
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("server_failure", 1)
    assert "got no completion from its inference server" in diagnosis.explanation
    gave_up = ("Traceback (most recent call last):\n  File \"/x/trl/extras/vllm_client.py\", line 128, in "
               "check_server\n    raise ConnectionError(\nConnectionError: The vLLM server can't be reached at "
               "0.0.0.0:8000 after 240 seconds. Make sure the server is running by running `trl vllm-serve`.\n")
    diagnosis, _ = examine(write(tmp_path, f"{wait}\n" + gave_up, "gave_up.log"))
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("server_failure", 1)


def test_a_traceback_left_without_its_exception_line_ends_nothing_when_steps_follow(tmp_path):
    """The frames of a caught exception a program printed (or a paste that stops early) followed by more steps: the
    run went on, so they are no crash of the run's."""
    frames = ['  File "/x/agent/daemon.py", line 379, in get_train_data_batch', "    sample = samples[rollout_id]"]
    steps = render("trl_log", range(1, 21))
    diagnosis, _ = examine(write(tmp_path, "\n".join(steps[:5] + frames + steps[5:]) + "\n"))
    assert diagnosis.cause == "healthy"


@pytest.mark.parametrize("refused", [
    "(RolloutManager pid=1790326) [2026-02-03 22:13:47] http_utils.py:186 - Error: Client error '403 Forbidden' for "
    "url 'http://10.0.0.1:30000/generate'",
    "httpx.HTTPStatusError: Server error '503 Service Unavailable' for url 'http://26.104.43.34:3938/generate'"])
def test_a_trainer_whose_inference_server_refuses_every_request_is_a_server_failure(tmp_path, refused):
    """slime's rollout manager retrying SGLang's /generate (slime#1542, #1391): an HTTP client's error status on the
    server's generation endpoint is the server not answering, as TRL's wait is; with no step, before step 1."""
    diagnosis, _ = examine(write(tmp_path, f"{refused}\n" * 3))
    assert (diagnosis.cause, diagnosis.first_bad_step) == ("server_failure", 1)
    assert "got no completion from its inference server" in diagnosis.explanation


def test_retries_of_a_vllm_server_that_then_answered_change_nothing(tmp_path):
    wait = "INFO - trl.extras.vllm_client - Server is not up yet. Retrying in 2.0 seconds..."
    steps = render("trl_log", range(1, 21))
    waited, _ = examine(write(tmp_path, "\n".join([wait] * 3 + steps) + "\n"))
    plain, _ = examine(write(tmp_path, "\n".join(steps) + "\n", "plain.log"))
    assert waited.cause == plain.cause == "healthy"
