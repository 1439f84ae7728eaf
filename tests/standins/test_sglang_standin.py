"""The SGLang stand-in is a real server: its outputs match a Hugging Face forward of the same model,
its weight reload really reloads, its fault knobs really misbehave, and it dies on SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo.config import TinyModelConfig
from grpo.policy.models import build_char_tokenizer, build_tiny_model
from tests.waiting import wait_until

SERVER = Path(__file__).with_name("sglang_server.py")
PROMPTS = [[1, 40, 41, 42, 43], [1, 50, 51]]  # <|im_start|> and a few characters


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base: str, path: str, body: dict | None = None, timeout: float = 30.0):
    """(status, parsed JSON or text) for GET (no body) or POST."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return status, raw.decode()


def save_tiny(directory: Path, seed: int) -> None:
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    build_tiny_model(TinyModelConfig(), tokenizer, torch.float32).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def hf_logprobs(directory: Path, ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    """[len(ids), vocab] log-probs of the next token after each prefix, from a plain HF forward."""
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float() / temperature, dim=-1)


def probe(base: str, ids: list[int]) -> list:
    status, out = call(base, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 0},
                                          "return_logprob": True, "logprob_start_len": 0})
    assert status == 200, out
    assert out["output_ids"] == [] and out["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    return out["meta_info"]["input_token_logprobs"]


def assert_probe_matches(triples: list, ids: list[int], ref: torch.Tensor) -> None:
    assert [t[1] for t in triples] == ids and triples[0][0] is None
    for k in range(1, len(ids)):
        assert triples[k][0] == pytest.approx(ref[k - 1, ids[k]].item(), abs=1e-4)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang")
    model_dir = root / "model"
    save_tiny(model_dir, seed=0)
    base = f"http://127.0.0.1:{free_port()}"
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--model-path", str(model_dir), "--host", "127.0.0.1",
         "--port", base.rsplit(":", 1)[1], "--seed", "0", "--health-check-timeout", "0.5"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    def healthy_or_exited() -> bool:
        try:
            if call(base, "/health", timeout=2)[0] == 200:
                return True
        except OSError:  # not listening yet
            pass
        return proc.poll() is not None

    wait_until(healthy_or_exited, 60, "the stand-in healthy")
    if proc.poll() is not None:
        pytest.fail("stand-in exited while starting:\n" + (root / "server.log").read_text())
    yield {"base": base, "proc": proc, "model_dir": model_dir, "log": root / "server.log"}
    proc.kill()
    proc.wait()
    log.close()


def test_ready_line_and_info(server):
    assert "The server is fired up and ready to roll!" in server["log"].read_text()
    assert call(server["base"], "/health_generate")[0] == 200
    status, info = call(server["base"], "/get_model_info")
    assert status == 200 and info["model_path"] == str(server["model_dir"]) and info["weight_version"] == "default"
    assert call(server["base"], "/get_server_info")[1]["standin"] is True
    assert call(server["base"], "/flush_cache", {})[0] == 200


def test_greedy_batch_matches_hf_forward(server):
    status, outs = call(server["base"], "/generate", {
        "input_ids": PROMPTS, "return_logprob": True, "rid": "r",
        "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}})
    assert status == 200 and isinstance(outs, list) and len(outs) == 2
    for prompt, out in zip(PROMPTS, outs):
        meta = out["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": 6} and meta["completion_tokens"] == 6
        assert meta["prompt_tokens"] == len(prompt) and meta["input_token_logprobs"] == []
        ref = hf_logprobs(server["model_dir"], prompt + out["output_ids"])
        for j, (lp, tok, text) in enumerate(meta["output_token_logprobs"]):
            row = ref[len(prompt) - 1 + j]
            assert tok == out["output_ids"][j] == int(row.argmax()) and text is None
            assert lp == pytest.approx(row[tok].item(), abs=1e-4)
    assert [o["meta_info"]["id"] for o in outs] == ["r_0", "r_1"]


def test_sampled_logprobs_are_temperature_scaled(server):
    status, out = call(server["base"], "/generate", {
        "input_ids": PROMPTS[0], "return_logprob": True,
        "sampling_params": {"max_new_tokens": 5, "temperature": 0.7, "top_p": 0.9, "ignore_eos": True}})
    assert status == 200 and isinstance(out, dict)
    ref = hf_logprobs(server["model_dir"], PROMPTS[0] + out["output_ids"], temperature=0.7)
    for j, (lp, tok, _) in enumerate(out["meta_info"]["output_token_logprobs"]):
        assert lp == pytest.approx(ref[len(PROMPTS[0]) - 1 + j, tok].item(), abs=1e-4)


def test_probe_matches_hf_and_errors_are_sglang_shaped(server):
    ids = PROMPTS[0] + [60, 61, 62]
    assert_probe_matches(probe(server["base"], ids), ids, hf_logprobs(server["model_dir"], ids))
    status, err = call(server["base"], "/generate", {"input_ids": [], "sampling_params": {}})
    assert status == 400 and "message" in err["error"]


def test_update_weights_from_disk_really_reloads(server):
    base, model_dir, ids = server["base"], server["model_dir"], PROMPTS[0] + [60, 61]
    before = probe(base, ids)
    save_tiny(model_dir, seed=1)  # new weights in place, as a trainer would write them
    status, res = call(base, "/update_weights_from_disk", {"model_path": str(model_dir), "weight_version": "step-1"})
    assert status == 200 and res["success"] and res["message"].startswith("Succeeded to update model weights.")
    after = probe(base, ids)
    assert after != before
    assert_probe_matches(after, ids, hf_logprobs(model_dir, ids))
    assert call(base, "/get_model_info")[1]["weight_version"] == "step-1"
    status, res = call(base, "/update_weights_from_disk", {"model_path": str(model_dir / "missing")})
    assert status == 400 and res["success"] is False


def test_stale_head_fault_leaves_the_probe_different(server):
    base, model_dir, ids = server["base"], server["model_dir"], PROMPTS[0] + [60, 61]
    assert call(base, "/standin/fault", {"stale_head": True})[1]["stale_head"] is True
    save_tiny(model_dir, seed=2)
    status, res = call(base, "/update_weights_from_disk", {"model_path": str(model_dir)})
    assert status == 200 and res["success"]  # the buggy reload still claims success
    ref = hf_logprobs(model_dir, ids)
    stale = probe(base, ids)
    assert max(abs(stale[k][0] - ref[k - 1, ids[k]].item()) for k in range(1, len(ids))) > 1e-3
    call(base, "/standin/fault", {"stale_head": False})
    assert call(base, "/update_weights_from_disk", {"model_path": str(model_dir)})[1]["success"]
    assert_probe_matches(probe(base, ids), ids, ref)


def test_garbage_and_hang_faults(server):
    base = server["base"]
    body = {"input_ids": PROMPTS, "sampling_params": {"max_new_tokens": 2}, "return_logprob": True}
    call(base, "/standin/fault", {"garbage": "json"})
    assert isinstance(call(base, "/generate", body)[1], str)  # not parseable JSON
    call(base, "/standin/fault", {"garbage": "shape"})
    assert len(call(base, "/generate", body)[1]) == 1
    call(base, "/standin/fault", {"garbage": None, "hang_generate": True})
    with pytest.raises(OSError):  # socket timeout: generation is stuck
        call(base, "/generate", body, timeout=0.5)
    assert call(base, "/health")[0] == 200 and call(base, "/health_generate")[0] == 503
    call(base, "/standin/fault", {"hang_generate": False})
    assert call(base, "/generate", body)[0] == 200


def test_sigkill_kills_the_server(server):  # last: it ends the module's server
    proc = server["proc"]
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    with pytest.raises(OSError):
        call(server["base"], "/health", timeout=2)
