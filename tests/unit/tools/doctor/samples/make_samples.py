"""Writes the sample runs of other frameworks the doctor's tests read (run it to regenerate them;
the output is committed). Each is a story with a known answer:

  areal/  GSM8K GRPO on one GPU: healthy to step 41, the SGLang server dies of CUDA OOM during
          step 42, every later step logs task_reward 0; a trainer restart early on, warnings and
          tracebacks in between, and the last line torn. Checkpoints after steps 10, 20, ..., 60.
          Expected: server_failure from step 42, last checkpoint before it globalstep39 (step 40).
  verl/   a collapse on healthy infrastructure: entropy falls and responses run to the length limit
          from step 44, a gradient spike at 46, the score collapses at 47. Saves every 20.
          Expected: policy_collapse from step 44, last checkpoint global_step_40.
  trl/    from step 34 every group's rewards are identical: reward 1.0, reward_std 0,
          frac_reward_zero_std 1, loss 0, grad_norm 0. Saves every 10; checkpoint-60's
          trainer_state.json is torn (killed mid-write). Expected: no_learning_signal from step 34,
          last checkpoint checkpoint-30.
"""

from __future__ import annotations

import json
import math
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent


def areal() -> None:
    rng = random.Random(188)
    root = HERE / "areal"
    t = datetime(2025, 11, 12, 4, 30, 0)
    log: list[str] = []
    server: list[str] = []

    def stamp(when: datetime) -> str:
        return when.strftime("%Y%m%d-%H:%M:%S.") + f"{when.microsecond // 1000:03d}"

    def say(who: str, level: str, text: str) -> None:
        log.append(f"{stamp(t)} {who} {level}: {text}")

    def server_say(text: str, tp: bool = True) -> None:
        server.append(t.strftime("[%Y-%m-%d %H:%M:%S") + (" TP0] " if tp else "] ") + text)

    def table(stats: dict[str, float]) -> list[str]:
        items = list(stats.items())
        rows = (len(items) + 3) // 4
        grid = [[c for j in range(4) if i + j * rows < len(items) for c in (items[i + j * rows][0],
                 f"{items[i + j * rows][1]:.4e}")] for i in range(rows)]
        widths = [max(len(r[c]) for r in grid if c < len(r)) for c in range(8)]
        top = "╒" + "╤".join("═" * (w + 2) for w in widths) + "╕"
        mid = "├" + "┼".join("─" * (w + 2) for w in widths) + "┤"
        bottom = "╘" + "╧".join("═" * (w + 2) for w in widths) + "╛"
        out = [top]
        for n, row in enumerate(grid):
            row = row + [""] * (8 - len(row))
            out.append("│ " + " │ ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " │")
            out.append(mid if n < len(grid) - 1 else bottom)
        return out

    say("Launcher", "INFO", "Launching sglang server: python3 -m areal.launcher.sglang_server --port 23239")
    server_say("server_args=ServerArgs(model_path='Qwen/Qwen2.5-0.5B-Instruct', mem_fraction_static=0.8, port=23239)",
               tp=False)
    server_say("Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=38.12 GB")
    server_say("KV Cache is allocated. #tokens: 1402230, K size: 8.02 GB, V size: 8.02 GB")
    server_say("The server is fired up and ready to roll!", tp=False)
    say("RemoteSGLangEngine", "INFO", "Get server addresses from name_resolve: ['172.21.0.2:23239']")
    reward_level = 0.34
    step = 0
    restarted = False
    while step < 60:
        step += 1
        t += timedelta(seconds=38 + rng.random() * 6)
        if step == 13 and not restarted:
            # a crash and a recovery, long before the real trouble
            say("FSDPEngine", "WARNING", "NCCL watchdog: collective operation timed out after 600000 ms")
            log.append("Traceback (most recent call last):")
            log.append('  File "/workspace/AReaL/examples/gsm8k_grpo.py", line 212, in main')
            log.append("    stats = actor.ppo_update(batch)")
            log.append("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1935, unhandled "
                       "system error")
            t += timedelta(minutes=4)
            say("Launcher", "INFO", "Relaunching the trainer (attempt 2)")
            say("RecoverHandler", "INFO", "Loaded recover info: recover_start=epoch0epochstep9globalstep9; "
                "resuming from step 11")
            restarted = True
            step = 10
            continue
        if step <= 41:
            reward_level = min(0.8, reward_level + 0.009)
            reward = min(1.0, max(0.0, reward_level + rng.uniform(-0.12, 0.12)))
            server_say(f"Decode batch. #running-req: 32, #token: {rng.randint(40000, 90000)}, token usage: "
                       f"{rng.uniform(0.80, 0.97):.2f}, gen throughput (token/s): {rng.uniform(1900, 2600):.2f}, "
                       "#queue-req: 0")
            server_say('INFO:     172.21.0.2:51234 - "POST /generate HTTP/1.1" 200 OK', tp=False)
        else:
            reward = 0.0
        if step == 42:
            t_fail = t - timedelta(seconds=20)
            server.append(t_fail.strftime("[%Y-%m-%d %H:%M:%S TP0] ") + "Scheduler hit an exception: Traceback "
                          "(most recent call last):")
            server.append('  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", '
                          "line 2355, in run_scheduler_process")
            server.append("    scheduler.event_loop_overlap()")
            server.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total "
                          "capacity of 139.80 GiB of which 1.12 GiB is free.")
            server.append(t_fail.strftime("[%Y-%m-%d %H:%M:%S] ") + "Received sigquit from a child process. It "
                          "usually means the child failed.")
            server.append("Killed")
            for n in range(3):
                t_err = t - timedelta(seconds=15 - n * 5)
                log.append(f"{stamp(t_err)} RemoteSGLangEngine WARNING: Request to 172.21.0.2:23239/generate "
                           f"failed (attempt {n + 1}/3): Cannot connect to host 172.21.0.2:23239 ssl:default "
                           "[Connect call failed ('172.21.0.2', 23239)]")
            log.append("Traceback (most recent call last):")
            log.append('  File "/usr/local/lib/python3.10/dist-packages/aiohttp/connector.py", line 1116, in '
                       "_wrap_create_connection")
            log.append("ConnectionRefusedError: [Errno 111] Connect call failed ('172.21.0.2', 23239)")
        elif step > 42 and step % 4 == 0:
            log.append(f"{stamp(t - timedelta(seconds=9))} RemoteSGLangEngine WARNING: Request to "
                       "172.21.0.2:23239/generate failed (attempt 3/3): Cannot connect to host 172.21.0.2:23239")
        if step % 7 == 0:
            say("root", "WARNING", "`torch_dtype` is deprecated! Use `dtype` instead!")
        say("FSDPEngine", "INFO", f"Memory-Usage after train step: memory allocated (GB): {64 + rng.random():.2f}, "
            f"memory reserved (GB): {133.3 + rng.random() * 0.25:.2f}, device memory used/total (GB): "
            f"{133.3 + rng.random() * 0.25:.2f}/139.80")
        if step % 10 == 0:
            g = step - 1
            say("Saver", "INFO", f"Saving model to /workspace/outputs/grpo/checkpoints/root/gsm8k-grpo/trial0/default/"
                f"epoch0epochstep{g}globalstep{g}")
        say("StatsLogger", "INFO", f"Epoch 1/5 Step {step}/935 Train step {step}/4675 done.")
        say("StatsLogger", "INFO", "Stats (1/1):")
        say("StatsLogger", "INFO", "")
        stats = {
            "grpo_actor/task_reward/avg": reward, "grpo_actor/task_reward/max": 1.0 if reward else 0.0,
            "grpo_actor/task_reward/min": 0.0, "grpo_actor/actor_loss/avg": rng.uniform(-0.05, 0.05) if reward else 0.0,
            "grpo_actor/entropy/avg": rng.uniform(0.55, 0.7), "grpo_actor/grad_norm": rng.uniform(2, 4) if reward else 0.0,
            "grpo_actor/importance_weight/avg": 1.0, "grpo_actor/clip_ratio/avg": rng.uniform(0, 0.002),
            "grpo_actor/no_eos_ratios/avg": rng.uniform(0.0, 0.05), "grpo_actor/seq_len/avg": rng.uniform(280, 320),
            "grpo_actor/update_successful": 1.0, "rollout/reward": reward,
            "timeperf/rollout": rng.uniform(20, 25), "timeperf/train_step": rng.uniform(12, 14),
            "timeperf/update_weights": rng.uniform(2, 3),
        }
        log.extend(table(stats))
    log[-1] = log[-1][: len(log[-1]) // 2]  # the last line, torn by the kill
    root.mkdir(exist_ok=True)
    (root / "trainer.log").write_text("\n".join(log))
    (root / "llm_server.log").write_text("\n".join(server) + "\n")
    for g in (9, 19, 29, 39, 49, 59):
        ckpt = root / "checkpoints" / "root" / "gsm8k-grpo" / "trial0" / "default" / f"epoch0epochstep{g}globalstep{g}"
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}\n')


def verl() -> None:
    rng = random.Random(940)
    root = HERE / "verl"
    lines = ["2025-11-14 09:00:01,112\tINFO worker.py:1832 -- Started a local Ray instance.",
             "(TaskRunner pid=2231) Training from scratch",
             "(WorkerDict pid=3321) [W1114 09:01:12.000000000 ProcessGroupNCCL.cpp:4561] Warning: using NCCL ..."]
    for step in range(1, 81):
        if step < 44:
            score = 0.2 + step * 0.008 + rng.uniform(-0.04, 0.04)
            entropy = 0.62 + rng.uniform(-0.05, 0.05)
            clip = rng.uniform(0.0, 0.06)
            grad = rng.uniform(0.3, 0.6)
        else:
            fall = step - 44
            entropy = max(0.02, 0.12 * math.exp(-fall / 6))
            clip = min(0.95, 0.55 + fall * 0.02)
            grad = 14.0 if step == 46 else rng.uniform(0.5, 1.5)
            score = 0.55 if step < 47 else max(0.01, 0.08 * math.exp(-(step - 47) / 5))
        pairs = {
            "global_seqlen/mean": rng.uniform(80000, 90000), "actor/entropy": entropy, "actor/pg_loss": rng.uniform(-0.02, 0.02),
            "actor/kl_loss": rng.uniform(0.001, 0.003), "actor/pg_clipfrac": rng.uniform(0, 0.01),
            "actor/grad_norm": grad, "actor/lr": 1e-6, "critic/score/mean": score, "critic/score/max": 1.0,
            "critic/score/min": 0.0, "critic/rewards/mean": score, "response_length/mean": 400 + clip * 600,
            "response_length/max": 1024.0, "response_length/clip_ratio": clip, "prompt_length/mean": 120.0,
            "timing_s/gen": rng.uniform(30, 34), "timing_s/reward": rng.uniform(0.5, 1.0),
            "timing_s/old_log_prob": rng.uniform(4, 5), "timing_s/ref": rng.uniform(4, 5),
            "timing_s/update_actor": rng.uniform(14, 16), "timing_s/step": rng.uniform(56, 60),
            "perf/max_memory_allocated_gb": 61.3 + rng.random() * 0.2, "training/global_step": step, "training/epoch": 0,
        }
        text = " - ".join(f"{k}:np.float64({v})" if isinstance(v, float) and step % 3 == 0 else f"{k}:{v:.3f}"
                          if isinstance(v, float) else f"{k}:{v}" for k, v in pairs.items())
        if step % 10 == 0:
            text += f" - val-core/openai/gsm8k/reward/mean@1:np.float64({max(0.0, score - 0.05):.4f})"
        lines.append(f"(TaskRunner pid=2231) step:{step} - {text}")
        if step % 9 == 0:
            lines.append("(WorkerDict pid=3321) /usr/local/lib/python3.10/dist-packages/torch/distributed/fsdp/"
                         "_state_dict_utils.py:773: UserWarning: FSDP.state_dict_type() is being deprecated")
        if step % 20 == 0:
            lines.append(f"(TaskRunner pid=2231) local_global_step_folder: checkpoints/gsm8k/qwen-grpo/"
                         f"global_step_{step}")
            lines.append(f"(WorkerDict pid=3321) [rank-0]: Saved model to /workspace/checkpoints/gsm8k/qwen-grpo/"
                         f"global_step_{step}/actor/model_world_size_1_rank_0.pt")
    lines.append("(TaskRunner pid=2231) step:81 - global_seqlen/mean:8123")  # torn
    root.mkdir(exist_ok=True)
    (root / "train.log").write_text("\n".join(lines))


def trl() -> None:
    rng = random.Random(34)
    root = HERE / "trl"
    history = []
    for step in range(1, 61):
        if step < 34:
            reward = rng.uniform(0.25, 0.6)
            entry = {"loss": rng.uniform(-0.02, 0.03), "grad_norm": rng.uniform(0.1, 0.4), "reward": reward,
                     "reward_std": rng.uniform(0.2, 0.45), "frac_reward_zero_std": rng.choice([0.0, 0.125, 0.25])}
        else:
            entry = {"loss": 0.0, "grad_norm": 0.0, "reward": 1.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0}
        entry.update({"learning_rate": 1e-6 * (1 - step / 60), "num_tokens": 2048.0 * step,
                      "completions/mean_length": rng.uniform(180, 220), "completions/clipped_ratio": 0.0,
                      "rewards/accuracy_reward/mean": entry["reward"], "rewards/accuracy_reward/std": entry["reward_std"],
                      "kl": rng.uniform(0.0, 0.002), "entropy": rng.uniform(0.4, 0.6), "epoch": step / 60,
                      "step": step})
        history.append(entry)
    for n in range(10, 61, 10):
        ckpt = root / "output" / f"checkpoint-{n}"
        ckpt.mkdir(parents=True, exist_ok=True)
        state = {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None, "epoch": n / 60,
                 "eval_steps": 500, "global_step": n, "is_hyper_param_search": False, "is_local_process_zero": True,
                 "is_world_process_zero": True, "log_history": history[:n], "logging_steps": 1, "max_steps": 60,
                 "num_input_tokens_seen": 0, "num_train_epochs": 1, "save_steps": 10, "total_flos": 0.0,
                 "train_batch_size": 8, "trial_name": None, "trial_params": None}
        text = json.dumps(state, indent=2, sort_keys=True) + "\n"
        if n == 60:
            text = text[: len(text) * 2 // 3]  # killed mid-write
        (ckpt / "trainer_state.json").write_text(text)
        (ckpt / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}\n')


if __name__ == "__main__":
    areal()
    verl()
    trl()
