"""The doctor on other frameworks' runs (the sample logs in samples/, written by make_samples.py):
the right cause, first bad step and last checkpoint before it, from messy logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from grpo.cli import main
from grpo.tools.doctor import examine

SAMPLES = Path(__file__).resolve().parent / "samples"


def doctor(path: Path, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["doctor", str(path), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_areal_reward_falls_to_zero_when_the_sglang_server_dies_of_oom(capsys):
    code, result = doctor(SAMPLES / "areal", capsys)
    assert code == 1 and result["source"] == "areal" and result["status"] == "problem"
    assert result["cause"] == "server_failure" and result["first_bad_step"] == 42
    assert result["last_good_checkpoint"].endswith("epoch0epochstep39globalstep39")  # after step 40, before 42
    server = [e for e in result["evidence"] if e["file"].endswith("llm_server.log")]
    assert server and "CUDA out of memory" in server[0]["text"]
    assert (SAMPLES / "areal" / "llm_server.log").read_text().splitlines()[server[0]["line"] - 1] == server[0]["text"]
    kinds = {(a["step"], a["kind"]) for a in result["timeline"]}
    assert {(42, "zero_reward"), (42, "server_failure"), (42, "server_unreachable"), (11, "restart")} <= kinds


def test_areal_given_its_trainer_log_reads_the_server_log_beside_it(capsys):
    code, result = doctor(SAMPLES / "areal" / "trainer.log", capsys)
    assert code == 1 and result["cause"] == "server_failure" and result["first_bad_step"] == 42


def test_areal_the_trainer_log_alone_still_names_the_server(tmp_path, capsys):
    shutil.copy(SAMPLES / "areal" / "trainer.log", tmp_path / "trainer.log")
    code, result = doctor(tmp_path, capsys)
    # The trainer's own "Cannot connect to host" lines name the server; the checkpoint is the path
    # the log says it saved to (not on this machine).
    assert code == 1 and result["cause"] == "server_failure" and result["first_bad_step"] == 42
    assert result["last_good_checkpoint"] == ("/workspace/outputs/grpo/checkpoints/root/gsm8k-grpo/trial0/default/"
                                              "epoch0epochstep39globalstep39")
    assert all(e["file"].endswith("trainer.log") for e in result["evidence"])


def test_verl_collapse_with_healthy_infrastructure(capsys):
    code, result = doctor(SAMPLES / "verl" / "train.log", capsys)
    assert code == 1 and result["source"] == "verl"
    assert result["cause"] == "policy_collapse" and result["first_bad_step"] == 44
    assert result["last_good_checkpoint"].endswith("global_step_40")
    kinds = {a["kind"]: a["step"] for a in result["timeline"]}
    assert kinds["entropy_collapse"] == 44 and kinds["reward_collapse"] == 47
    assert not any(k.startswith("server") for k in kinds)


def test_verl_before_the_collapse_is_healthy(tmp_path, capsys):
    lines = (SAMPLES / "verl" / "train.log").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if "step:43 " in line)
    (tmp_path / "train.log").write_text("\n".join(lines[:cut + 1]) + "\n")
    code, result = doctor(tmp_path / "train.log", capsys)
    assert code == 0 and result["cause"] == "healthy" and result["first_bad_step"] is None


def test_trl_loss_exactly_zero_every_group_identical(capsys):
    code, result = doctor(SAMPLES / "trl" / "output", capsys)
    assert code == 1 and result["source"] == "trl"
    assert result["cause"] == "no_learning_signal" and result["first_bad_step"] == 34
    assert result["last_good_checkpoint"].endswith("checkpoint-30")
    (evidence,) = result["evidence"][:1]
    assert evidence["file"].endswith("checkpoint-50/trainer_state.json")  # checkpoint-60's is torn
    text = (SAMPLES / "trl" / "output" / "checkpoint-50" / "trainer_state.json").read_text().splitlines()
    assert '"step": 34' in text[evidence["line"] - 1]


def test_trl_one_checkpoint_directory(capsys):
    code, result = doctor(SAMPLES / "trl" / "output" / "checkpoint-50", capsys)
    assert code == 1 and result["cause"] == "no_learning_signal" and result["first_bad_step"] == 34
    assert result["last_good_checkpoint"].endswith("checkpoint-30")


def test_the_printed_account_puts_the_diagnosis_first(capsys):
    assert main(["doctor", str(SAMPLES / "verl" / "train.log")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "DIAGNOSIS problem: policy_collapse from step 44"
    assert any(line.strip().startswith("last good checkpoint:") and line.endswith("global_step_40") for line in out)


def test_the_record_keeps_curves_for_the_report():
    _, record = examine(SAMPLES / "areal")
    assert len(record.series("reward")) == 60 and record.series("time/rollout") and record.series("memory_gib")


def test_areal_whose_server_died_before_the_first_step(tmp_path, capsys):
    (tmp_path / "trainer.log").write_text(
        "20251112-04:30:00.000 RemoteSGLangEngine INFO: Get server addresses from name_resolve: ['10.0.0.2:23239']\n"
        "20251112-04:31:10.000 RemoteSGLangEngine WARNING: Request to 10.0.0.2:23239/generate failed (attempt 3/3): "
        "Cannot connect to host 10.0.0.2:23239 ssl:default [Connect call failed ('10.0.0.2', 23239)]\n"
        "Traceback (most recent call last):\n"
        "RuntimeError: Failed after 3 retries")
    code, result = doctor(tmp_path, capsys)
    assert code == 1 and result["cause"] == "server_failure" and result["first_bad_step"] == 1
    assert result["evidence"][0]["line"] == 2


def test_a_log_of_another_kind_named_trainer_log_is_read_by_its_own_reader(tmp_path, capsys):
    shutil.copy(SAMPLES / "verl" / "train.log", tmp_path / "trainer.log")
    code, result = doctor(tmp_path, capsys)
    assert code == 1 and result["source"] == "verl" and result["cause"] == "policy_collapse"


def test_a_log_that_ends_on_an_exception_line_without_its_traceback_crashed(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text("loading GRPOTrainer\nImportError: cannot import name 'GRPOConfig' from 'trl'\n\n")
    code, result = doctor(log, capsys)
    assert code == 1 and (result["cause"], result["first_bad_step"]) == ("crashed", 1)
    log.write_text("loading GRPOTrainer\nImportError: cannot import name 'GRPOConfig' from 'trl'\nretrying with trl 0.14\n")
    assert doctor(log, capsys)[1]["cause"] != "crashed"  # the log went on after it: not what ended the run


def test_a_traceback_pasted_without_its_header_is_still_read(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text('File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1326, in convert\n'
                   "return t.to(\ntorch.OutOfMemoryError:\nCUDA out of memory. Tried to allocate 130.00 MiB.\n")
    code, result = doctor(log, capsys)
    assert code == 1 and (result["cause"], result["first_bad_step"]) == ("out_of_memory", 1)


def test_a_run_interrupted_by_hand_before_its_first_logged_step_is_unknown_not_stalled(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text("GRPOTrainer starting\nTraceback (most recent call last):\n"
                   '  File "grpo.py", line 660, in <module>\n    trainer.train()\nKeyboardInterrupt\n')
    assert doctor(log, capsys)[1]["status"] == "unknown"


# Six TRL console entries of a run learning: what a crash after them is judged against.
SIX_HEALTHY_STEPS = "".join(f"{{'loss': 0.01, 'grad_norm': 0.5, 'reward': 0.{4 + i % 3}, 'reward_std': 0.3}}\n"
                            for i in range(6))


def test_a_traceback_python_says_it_ignored_at_exit_ended_nothing(tmp_path, capsys):
    """The atexit noise that closes the AReaL SM120 log (areal_sglang_fa3_sm120): not a crash after a run
    whose steps finished."""
    log = tmp_path / "train.log"
    ignored = ("Exception ignored in atexit callback: <function move_cutlass_compiled_cache at 0x7004eda2d080>\n"
               "Traceback (most recent call last):\n"
               '  File "/usr/local/lib/python3.12/dist-packages/torch/_inductor/codegen/cuda/cutlass_utils.py", line 39, '
               "in move_cutlass_compiled_cache\n    if not os.path.exists(cutlass.CACHE_FILE):\n"
               "AttributeError: module 'cutlass' has no attribute 'CACHE_FILE'\n")
    log.write_text(SIX_HEALTHY_STEPS + ignored)
    assert doctor(log, capsys)[1]["status"] == "healthy"
    log.write_text(SIX_HEALTHY_STEPS + ignored.replace("Exception ignored in atexit callback: <function move_cutlass_compiled_cache"
                                           " at 0x7004eda2d080>\n", ""))
    assert doctor(log, capsys)[1]["cause"] == "crashed"  # the same traceback, not ignored, did end the run


def test_a_traceback_inside_a_log_record_was_caught_and_logged_not_what_ended_the_run(tmp_path, capsys):
    """An agent loop's `logger.exception` (as in verl_gui_cursor_mid_run_step2): `ERROR:<time>:Traceback ...`
    is a handled exception, whatever follows; the same traceback printed bare (uncaught) ended the run."""
    log = tmp_path / "train.log"
    logged = ("ERROR:2026-03-26 22:35:46,212:Traceback (most recent call last):\n"
              '  File "/work/cursor/env_and_state.py", line 470, in update_state\n'
              "    action, action_x, action_y = extractor(output_text)\n"
              "TypeError: cannot unpack non-iterable NoneType object\n"
              "ERROR:2026-03-26 22:35:46,212:Error extracting action for item 34674\n")
    log.write_text(SIX_HEALTHY_STEPS + logged)
    assert doctor(log, capsys)[1]["status"] == "healthy"
    log.write_text(SIX_HEALTHY_STEPS + logged.replace("ERROR:2026-03-26 22:35:46,212:Traceback", "Traceback"))
    assert doctor(log, capsys)[1]["cause"] == "crashed"


def test_a_console_log_with_no_step_and_no_error_is_unknown_not_stalled(tmp_path, capsys):
    """From the file alone, a log copied before its first logged step, one killed without a word before it and one
    that is no training log at all (an evaluation of a checkpoint, as areal_eval_checkpoint_stall_no_train) read the
    same: nothing to judge. A trainer's final line without any step's metrics (trl_hotpotqa_grpo_test_6_steps)
    is said so."""
    log = tmp_path / "train.log"
    log.write_text("loading GRPOTrainer\nStarting GRPO training...\n  0%|          | 0/6 [00:00<?, ?it/s]\n")
    code, result = doctor(log, capsys)
    assert (code, result["status"], result["first_bad_step"]) == (1, "unknown", None)
    assert "no training step and no error" in result["explanation"]
    log.write_text("loading GRPOTrainer\n{'train_runtime': 943.6, 'train_loss': 4.9e-05, 'reward': 0.74, "
                   "'epoch': 1.6}\n")
    code, result = doctor(log, capsys)
    assert result["status"] == "unknown" and "printed its final line" in result["explanation"]


def test_rays_memory_monitor_killing_a_task_is_out_of_memory_wherever_on_its_line(tmp_path, capsys):
    """Ray's own word for the host running out of memory ends the run like the kernel's OOM killer: pasted after
    other text (prime_issue59_ray_oom_step1), or raylet's report after a progress bar."""
    log = tmp_path / "train.log"
    log.write_text(SIX_HEALTHY_STEPS + "Error ....ray.exceptions.OutOfMemoryError: Task was killed due to the node "
                                       "running low on memory. \n")
    code, result = doctor(log, capsys)
    assert code == 1 and (result["cause"], result["first_bad_step"]) == ("out_of_memory", 7)
    log.write_text(SIX_HEALTHY_STEPS + "(raylet) node_manager.cc:3099: 1 Workers (tasks / actors) killed due to memory "
                                       "pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 87d7)\n")
    assert doctor(log, capsys)[1]["cause"] == "out_of_memory"


def test_torch_taking_the_process_down_over_nccl_is_a_gpu_failure_and_its_warnings_are_not(tmp_path, capsys):
    """A glog FATAL record of ProcessGroupNCCL (the heartbeat monitor ending a stuck watchdog, as in
    vlmr1_issue257_nccl_watchdog_stuck) and the watchdog's exception whose timeout is hard-wrapped in a paste
    (openr1_issue620_nccl_watchdog_wrapped) end the run; torch's W record at a clean exit does not."""
    log = tmp_path / "train.log"
    log.write_text(SIX_HEALTHY_STEPS + "[rank6]:[F429 14:03:49.385461578 ProcessGroupNCCL.cpp:1554] [PG ID 0 PG GUID "
                                       "0(default_pg) Rank 6] Terminating the process after attempting to dump debug "
                                       "info\n")
    code, result = doctor(log, capsys)
    assert code == 1 and (result["cause"], result["first_bad_step"]) == ("gpu_failure", 7)
    log.write_text("[PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: "
                   "[Rank 1] Watchdog caught collective opera\ntion timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST)\n")
    assert doctor(log, capsys)[1]["cause"] == "gpu_failure"
    log.write_text(SIX_HEALTHY_STEPS + "[rank0]:[W608 08:57:55.412114110 ProcessGroupNCCL.cpp:1250] Warning: WARNING: "
                                       "process group has NOT been destroyed before we destruct ProcessGroupNCCL.\n")
    assert doctor(log, capsys)[1]["status"] == "healthy"
