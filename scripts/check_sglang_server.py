"""Start a real SGLang server on a small local model, check one /generate against Hugging Face, stop it.

    ENV_DIR/bin/python scripts/check_sglang_server.py [--model DIR] [--timeout SECONDS]

Run with the SGLang environment's interpreter (scripts/setup_sglang_env.sh does, as its last step).
Without --model it serves grpo's tiny test model (char tokenizer, 2-layer Llama, random weights) built
into a temporary directory with `grpo.policy.models`, as the integration tests do.

Checked: the server gets ready (`/health_generate` answers 200); a greedy `/generate` with
`return_logprob` and `logprob_start_len: 0` returns a log-prob for every prompt token but the first and
for every output token, each within TOLERANCE of the same model's log-probs under transformers (which
exercises the prefill, the decode steps and the KV-cache slot table that the sgl_kernel shim fills), and
each greedy token is the argmax up to that tolerance; once stopped (SIGTERM, then SIGKILL to its
process group after STOP_GRACE_S) no process of the server is left. The server runs in a process group
of its own, with its IPC sockets in a temporary TMPDIR and its load-report file in /dev/shm removed
after it stops (SGLang does not unlink it): a stop leaves nothing behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

REPO_ROOT = Path(__file__).resolve().parent.parent
PROMPT = "12+34="
NEW_TOKENS = 8
TOLERANCE = 1e-3  # fp32 on both sides; 2.4e-7 measured for the tiny model
STOP_GRACE_S = 30.0
POLL_S = 0.2
SHM_DIR = Path("/dev/shm")
SHM_PREFIXES = ("sglang_loads_", "sem.mp-")


class CheckFailed(Exception):
    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a local Hugging Face model directory (default: grpo's tiny model)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the server to be ready")
    args = parser.parse_args()
    # The server is in a session of its own, out of reach of signals to ours: SIGTERM (as Ctrl-C already
    # does) unwinds through check()'s `finally`, which stops it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    transformers_logging.disable_progress_bar()  # the tiny model's save and the reference load: noise here
    with tempfile.TemporaryDirectory(prefix="sglang-check-") as tmp:
        work = Path(tmp)
        model = args.model.resolve() if args.model else build_tiny_model(work / "model")
        if not (model / "config.json").is_file():
            print(f"check_sglang_server: {model} has no config.json; point --model at a model directory",
                  file=sys.stderr)
            return 2
        try:
            check(model, work, args.timeout)
        except CheckFailed as exc:
            print(f"check_sglang_server: FAILED: {exc}", file=sys.stderr)
            return 1
    return 0


def build_tiny_model(target: Path) -> Path:
    sys.path.insert(0, str(REPO_ROOT / "src"))
    from grpo.config import TinyModelConfig
    from grpo.policy.models import build_char_tokenizer
    from grpo.policy.models import build_tiny_model as build

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    build(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def check(model: Path, work: Path, timeout: float) -> None:
    log_path = work / "server.log"
    ipc_dir = work / "ipc"
    ipc_dir.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # HF_HUB_OFFLINE: SGLang takes a path it cannot find for a hub name and would try to download it.
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TMPDIR": str(ipc_dir)}
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--device", "cpu",
               "--attention-backend", "torch_native", "--dtype", "float32", "--host", "127.0.0.1",
               "--port", str(port),
               # Without a cap SGLang sizes the KV cache to most of the free memory (12 GB, 40 s here).
               "--max-total-tokens", "4096"]
    print(f"[check_sglang_server] starting SGLang on {model} at {url} (log: {log_path} while it runs)", flush=True)
    started = time.monotonic()
    with log_path.open("w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(server, url, started + timeout, log_path)
        print(f"[check_sglang_server] ready in {time.monotonic() - started:.1f}s; process group: "
              f"{', '.join(process_names(server.pid))}", flush=True)
        check_generate(model, url)
    finally:
        in_use = shm_files(server.pid)
        stop(server)
        left_behind = sorted(path for path in in_use if path.exists())
        for path in left_behind:
            path.unlink()
    print(f"[check_sglang_server] stopped: no process of the server's group left; removed what it left in "
          f"/dev/shm: {', '.join(path.name for path in left_behind) or 'nothing'}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(server: subprocess.Popen, url: str, deadline: float, log_path: Path) -> None:
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CheckFailed(f"the server exited with {server.returncode} before it was ready; its log ends:\n"
                              + "\n".join(log_path.read_text().splitlines()[-30:]))
        try:
            with urllib.request.urlopen(f"{url}/health_generate", timeout=10) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # not listening yet, or 503 while it warms up
        time.sleep(POLL_S)
    raise CheckFailed("the server was not ready within the timeout; its log ends:\n"
                      + "\n".join(log_path.read_text().splitlines()[-30:]))


def check_generate(model_dir: Path, url: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    body = {"input_ids": prompt_ids, "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0.0},
            "return_logprob": True, "logprob_start_len": 0}
    request = urllib.request.Request(f"{url}/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        meta = json.load(response)["meta_info"]
    prompt_lps, output_lps = meta["input_token_logprobs"], meta["output_token_logprobs"]
    if len(prompt_lps) != len(prompt_ids) or prompt_lps[0][0] is not None:
        raise CheckFailed(f"input_token_logprobs: expected {len(prompt_ids)} entries, the first without a "
                          f"log-prob, got {prompt_lps}")
    if len(output_lps) != NEW_TOKENS:
        raise CheckFailed(f"output_token_logprobs: expected {NEW_TOKENS} entries, got {output_lps}")
    served = [(lp, token) for lp, token, _ in prompt_lps[1:] + output_lps]
    ids = prompt_ids + [token for _, token, _ in output_lps]

    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logprobs = torch.log_softmax(reference(torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
    expected = logprobs.gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
    worst = max(abs(lp - want) for (lp, _), want in zip(served, expected.tolist()))
    if worst > TOLERANCE:
        raise CheckFailed(f"SGLang's log-probs differ from transformers' by up to {worst:.2e} (> {TOLERANCE})")
    greedy_gap = (logprobs.max(dim=-1).values - expected)[len(prompt_ids) - 1:].max().item()
    if greedy_gap > TOLERANCE:
        raise CheckFailed(f"a greedy token is {greedy_gap:.2e} below the argmax log-prob under transformers")
    print(f"[check_sglang_server] /generate: {len(prompt_ids)} prompt + {NEW_TOKENS} greedy tokens, "
          f"max |log-prob - transformers| = {worst:.1e}", flush=True)


def process_names(pgid: int) -> list[str]:
    names = []
    for pid in group_pids(pgid):
        try:
            names.append(f"{pid} {Path(f'/proc/{pid}/comm').read_text().strip()}")
        except OSError:
            pass  # exited since listed
    return names


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # Field 5 of /proc/PID/stat is the process group; the name (field 2) may hold spaces.
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    pids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass  # exited since listed
    return pids


def shm_files(pgid: int) -> set[Path]:
    """The /dev/shm files the server's processes hold open or mapped, by inode (a POSIX semaphore is
    mapped under the temporary name it was created with): SGLang's load-report file, which it never
    unlinks, and multiprocessing's semaphore, which is left behind when the group is SIGKILLed."""
    inodes = set()
    for pid in group_pids(pgid):
        try:
            inodes.update(os.stat(fd).st_ino for fd in Path(f"/proc/{pid}/fd").iterdir()
                          if os.readlink(fd).startswith(f"{SHM_DIR}/"))
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith(f"{SHM_DIR}/"):
                    inodes.add(int(fields[4]))
        except OSError:
            pass  # exited since listed
    return {Path(entry.path) for entry in os.scandir(SHM_DIR)
            if entry.name.startswith(SHM_PREFIXES) and entry.inode() in inodes}


def stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server (its own handler shuts the scheduler and detokenizer down, and Python's
    resource tracker unlinks its semaphore), SIGKILL to the whole group for whatever is left after
    STOP_GRACE_S; fails if a process of the group outlives that."""
    for kill in (lambda: os.kill(server.pid, signal.SIGTERM), lambda: os.killpg(server.pid, signal.SIGKILL)):
        try:
            kill()
        except ProcessLookupError:
            pass  # the leader is gone; its children may not be
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            server.poll()  # reap the leader; its children are reparented and reaped by init
            if not group_pids(server.pid):
                return
            time.sleep(POLL_S)
    raise CheckFailed(f"processes of the server outlived SIGKILL: {', '.join(process_names(server.pid))}")


if __name__ == "__main__":
    sys.exit(main())
