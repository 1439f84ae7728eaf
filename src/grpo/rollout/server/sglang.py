"""SGLang through its native HTTP API: `/generate` with token ids and `return_logprob`,
`/update_weights_from_disk`, `/flush_cache`.

Facts this rests on (SGLang 0.5.23, measured on CPU; scripts/setup_sglang_env.sh builds the environment):
- On CPU it runs as SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1, --device cpu) with its torch-native
  attention; its CUDA kernel package is replaced by a small pure-torch module (scripts/sglang_cpu_shim).
- Output log-probs are log_softmax(logits / T) over the whole vocabulary (not renormalised after
  top-p), as `[logprob, id, None]` per token; prompt log-probs (max_new_tokens 0, logprob_start_len 0)
  are raw log_softmax with None first. grpo recomputes old log-probs with the trainer by default.
- `sampling_seed` is honoured only under --enable-deterministic-inference (rollout.server.deterministic),
  which SGLang's CPU attention backends refuse: grpo's seed check (seed_check.py) says which holds.
- `/update_weights_from_disk` with a bad path answers HTTP 400 and the server keeps serving.
- `/flush_cache` answers HTTP 400 while any request is pending, SGLang's own warm-up request right after
  a start included; `/flush_cache?timeout=S` defers the flush until the server is idle, up to S seconds.
The fast test suite also runs this backend against a stand-in speaking the same API
(tests/standins/sglang_server.py), which can be hung or made to answer garbage on demand.
"""

from __future__ import annotations

import json
from pathlib import Path

from grpo.config import ServerConfig
from grpo.rollout.server.backend import Backend, Generation, LaunchSpec, ReloadMode, expect, kv_bytes_per_token
from grpo.rollout.server.client import HttpClient, ServerError
from grpo.rollout.types import SamplingParams

FLUSH_WAIT_S = 60.0  # how long a cache flush waits for the server to be idle (its warm-up: seconds)


class SGLangBackend(Backend):
    name = "sglang"
    # A request may fill the cache less one token, and its input five fewer (SGLang's max_req_input_len).
    cache_slack_tokens = 6

    def __init__(self, on_cpu: bool = True) -> None:
        self.on_cpu = on_cpu

    def launch(self, cfg: ServerConfig, python: str, model_dir: Path, host: str, port: int, dtype: str,
               seed: int) -> LaunchSpec:
        # --sleep-on-idle: SGLang's scheduler otherwise spins a core at 100% between requests, which on a
        # machine it shares with the trainer (always, on a CPU) is a core taken from every update.
        argv = [python, "-m", "sglang.launch_server", "--model-path", str(model_dir), "--host", host,
                "--port", str(port), "--dtype", dtype, "--random-seed", str(seed),
                "--max-running-requests", str(cfg.max_concurrent_requests), "--sleep-on-idle"]
        if cfg.memory_fraction is not None:
            argv += ["--mem-fraction-static", str(cfg.memory_fraction)]
        if cfg.kv_cache_gib is not None:
            tokens = self.kv_cache_tokens(cfg.kv_cache_gib, served_bytes_per_token(model_dir, dtype))
            argv += ["--max-total-tokens", str(tokens)]
        if cfg.deterministic:
            argv.append("--enable-deterministic-inference")
        # grpo gives it local paths only; online, a bad path would be looked up as a hub name.
        env = {"HF_HUB_OFFLINE": "1"}
        if not self.on_cpu:
            return LaunchSpec(argv, env)
        return LaunchSpec(argv + ["--device", "cpu", "--attention-backend", "torch_native"],
                          env | {"SGLANG_USE_CPU_ENGINE": "1"})

    def kv_cache_tokens(self, gib: float, bytes_per_token: int) -> int | None:
        # --max-total-tokens; SGLang lowers it, with a warning in its log only, to what its memory fraction leaves.
        return max(1, int(gib * 2**30 // bytes_per_token))

    def identify(self, client: HttpClient) -> None:
        answer = client.request("GET", "/get_model_info", retries=0)
        expect(isinstance(answer, dict) and "model_path" in answer,
               f"GET /get_model_info gave {str(answer)[:80]!r}, not model info")

    def generate(self, client: HttpClient, prompt_ids: list[int], params: SamplingParams, seed: int,
                 timeout_s: float | None = None) -> Generation:
        sampling = {"max_new_tokens": params.max_new_tokens, "temperature": params.temperature,
                    "top_p": params.top_p, "sampling_seed": seed, "skip_special_tokens": True}
        if params.stop:
            sampling["stop"] = list(params.stop)
        answer = client.request("POST", "/generate", {"input_ids": prompt_ids, "sampling_params": sampling,
                                                      "return_logprob": True}, timeout_s=timeout_s, retries=0)
        expect(isinstance(answer, dict) and isinstance(answer.get("meta_info"), dict), "no meta_info")
        meta = answer["meta_info"]
        finish = meta.get("finish_reason") or {}
        expect(isinstance(finish, dict), f"finish_reason {finish!r}")
        if finish.get("type") == "abort":
            raise ServerError("http", f"generation aborted: {finish.get('message')}")
        token_ids = answer.get("output_ids")
        triples = meta.get("output_token_logprobs")
        expect(isinstance(token_ids, list) and isinstance(triples, list), "output_ids or output_token_logprobs")
        expect(len(triples) == len(token_ids), f"{len(triples)} log-probs for {len(token_ids)} tokens")
        logprobs = []
        for (logprob, token_id, *_), expected in zip(triples, token_ids):
            expect(token_id == expected and isinstance(logprob, (int, float)), "log-prob triples out of step")
            logprobs.append(float(logprob))
        return Generation(token_ids, logprobs, "length" if finish.get("type") == "length" else "stop")

    def prompt_logprobs(self, client: HttpClient, token_ids: list[int]) -> list[float]:
        answer = client.request("POST", "/generate", {
            "input_ids": token_ids, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
            "logprob_start_len": 0,
        }, retries=0)
        triples = answer.get("meta_info", {}).get("input_token_logprobs") if isinstance(answer, dict) else None
        expect(isinstance(triples, list) and len(triples) == len(token_ids), "input_token_logprobs")
        values = [t[0] for t in triples[1:]]  # the first token has no log-prob
        expect(all(isinstance(v, (int, float)) for v in values), "a null prompt log-prob")
        return [float(v) for v in values]

    def reload_weights(self, client: HttpClient, model_dir: Path, mode: str) -> None:
        if mode == ReloadMode.SKIP:
            return
        # SGLang has one reload path; flush_cache=False leaves the cache reset to reset_cache().
        answer = client.request("POST", "/update_weights_from_disk",
                                {"model_path": str(model_dir), "flush_cache": False}, retries=0)
        if not (isinstance(answer, dict) and answer.get("success")):
            raise ServerError("http", f"update_weights_from_disk failed: {answer!r}"[:300])

    def reset_cache(self, client: HttpClient) -> None:
        # SGLang flushes only when no request is pending, and a server just started still has its own
        # warm-up request in flight: without a timeout it answers 400 ("pending requests") at once,
        # which is no failed sync; with one it flushes as soon as it is idle.
        client.request("POST", f"/flush_cache?timeout={FLUSH_WAIT_S:g}", timeout_s=FLUSH_WAIT_S + 10, retries=0)


def served_bytes_per_token(model_dir: Path, dtype: str) -> int:
    """The KV bytes of one token of the model in `model_dir`, from its config.json."""
    config = json.loads((model_dir / "config.json").read_text())
    heads = config["num_attention_heads"]
    return kv_bytes_per_token(config["num_hidden_layers"], config.get("num_key_value_heads") or heads,
                              config.get("head_dim") or config["hidden_size"] // heads, dtype)
