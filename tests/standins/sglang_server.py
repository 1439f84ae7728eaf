"""A stand-in SGLang server for tests. It is NOT SGLang.

It speaks the subset of SGLang's native HTTP API (checked against sglang 0.5.23) that grpo's
SGLang rollout engine uses, and really generates with a Hugging Face model on the CPU, so tests
can exercise the client against a real process: kill it (SIGKILL), freeze it (SIGSTOP), and make
it misbehave with fault knobs.

    python tests/standins/sglang_server.py --model-path DIR --host 127.0.0.1 --port N \
        [--dtype float32|bfloat16] [--seed S] [--weight-version V] \
        [--stale-head] [--skip-reload] [--garbage json|shape] [--hang-generate] [--warmup-s S]

Endpoints: POST /generate, GET /health, GET /health_generate, GET /ready,
POST /update_weights_from_disk, POST /update_weight_version, GET|POST /flush_cache,
GET /get_model_info, GET /model_info, GET /get_server_info, GET /server_info,
POST /pause_generation, POST /continue_generation, POST /abort_request (accepted, no effect),
and the test-only GET|POST /standin/fault, which reads or sets the fault knobs at run time:
    stale_head     update_weights_from_disk loads every tensor except lm_head and the (tied)
                   input embedding, and still answers success, like a buggy reload
    skip_reload    update_weights_from_disk answers success and loads nothing
    garbage        "json": /generate answers 200 with truncated JSON;
                   "shape": valid JSON with wrong shapes (a batch loses its last item,
                   output_token_logprobs is one short); null: off
    hang_generate  /generate blocks until the knob is cleared; /health still answers 200 and
                   /health_generate answers 503 after --health-check-timeout seconds

Semantics copied from SGLang: a single `input_ids` list gets one object back, a list of lists
gets a list (grouped by prompt when n > 1); `output_ids` include a matched EOS / stop token while
`text` drops it; output log-probs are log_softmax(logits / T) over the full vocabulary (raw
log_softmax for greedy, or for every request when SGLANG_RETURN_ORIGINAL_LOGPROB=1), before top-p
/ top-k; input log-probs are raw log_softmax, one entry per prompt token from logprob_start_len on,
the first entry's log-prob being null; max_new_tokens=0 returns no output ids and no output
log-probs. Differences: /health does not generate; no streaming, min_new_tokens, penalties or
grammars; requests are served one batch at a time.

--warmup-s S: as SGLang's own warm-up request does after its HTTP server is up, a request stays
pending for S seconds after the server reports ready: /flush_cache answers 400 meanwhile ("pending
requests"), and /flush_cache?timeout=T waits up to T seconds for it to finish (SGLang's deferred flush).
"""

from __future__ import annotations

import argparse
import glob
import inspect
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_utils import load_state_dict
from transformers.utils import logging as hf_logging

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
FAULTS = ("stale_head", "skip_reload", "garbage", "hang_generate")
LOGPROB_MIN = torch.finfo(torch.float32).min
RAW_OUTPUT_LOGPROBS = os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in ("1", "true", "yes")


def log(msg: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BadRequest(ValueError):
    """Answered as SGLang answers a ValueError: 400 {"error": {"message": ...}}."""


class Engine:
    """The model, its tokenizer, and batched generation with a KV cache."""

    def __init__(self, model_path: str, dtype: torch.dtype, seed: int):
        self.model_path = model_path
        self.dtype = dtype
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation="eager").eval()
        # The KV cache's argument: `cache` from transformers 5.2x (`past_key_values` is dropped in 5.40).
        self.cache_keyword = ("cache" if "cache" in inspect.signature(type(self.model).forward).parameters
                              else "past_key_values")
        for p in self.model.parameters():  # own the memory: tests overwrite the files we loaded from
            p.data = p.data.clone()
        self.generator = torch.Generator().manual_seed(seed)
        eos = {self.tokenizer.eos_token_id}
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.eos_ids = {e for e in eos if e is not None}
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self.context_len = getattr(self.model.config, "max_position_embeddings", 1 << 30)

    # ---- weights -------------------------------------------------------------------------
    def reload(self, model_path: str, stale_head: bool) -> tuple[bool, str]:
        files = sorted(glob.glob(os.path.join(model_path, "*.safetensors"))) or sorted(
            glob.glob(os.path.join(model_path, "pytorch_model*.bin"))
        )
        if not files:
            return False, f"Failed to get weights iterator: no weight files in {model_path}."
        params = dict(self.model.named_parameters(remove_duplicate=False))
        skip = set()
        if stale_head:
            head = self.model.get_output_embeddings().weight
            skip = {n for n, p in params.items() if p is head or p is self.model.get_input_embeddings().weight}
        try:
            loaded = {}
            for f in files:
                loaded.update(load_state_dict(f))
            for name, tensor in loaded.items():
                if name not in params:
                    raise KeyError(f"unexpected tensor {name}")
                if tuple(tensor.shape) != tuple(params[name].shape):
                    raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {tuple(params[name].shape)}")
        except Exception as e:  # validated before any copy, so nothing needs rolling back
            return False, f"Failed to update weights: {e}.\nRolling back to original weights."
        with torch.no_grad():
            for name, tensor in loaded.items():
                if name not in skip:
                    params[name].copy_(tensor)
        self.model_path = model_path
        return True, "Succeeded to update model weights."

    # ---- generation ----------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, reqs: list[dict]) -> list[dict]:
        """Each req: ids, sp (sampling params), return_logprob, logprob_start_len, top_logprobs_num,
        text_in_logprobs, rid. Returns SGLang's per-request output dicts, in order."""
        bsz, plen = len(reqs), max(len(r["ids"]) for r in reqs)
        ids = torch.full((bsz, plen), self.pad_id, dtype=torch.long)
        mask = torch.zeros((bsz, plen), dtype=torch.long)
        for i, r in enumerate(reqs):  # left padding
            ids[i, plen - len(r["ids"]) :] = torch.tensor(r["ids"])
            mask[i, plen - len(r["ids"]) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        logits, past = out.logits.float(), out.past_key_values

        states = []
        for i, r in enumerate(reqs):
            st = {"out": [], "lp": [], "top": [], "finish": None, "gen": self.generator}
            if r["sp"].get("sampling_seed") is not None:
                st["gen"] = torch.Generator().manual_seed(int(r["sp"]["sampling_seed"]))
            if r["return_logprob"]:
                st["in_lp"], st["in_top"] = self._input_logprobs(r, logits[i, plen - len(r["ids"]) :])
            if r["sp"]["max_new_tokens"] == 0:
                st["finish"] = {"type": "length", "length": 0}
            states.append(st)

        last, pos = logits[:, -1], positions[:, -1]
        while not all(st["finish"] for st in states):
            next_ids = torch.full((bsz,), self.pad_id, dtype=torch.long)
            for i, (r, st) in enumerate(zip(reqs, states)):
                if st["finish"] is None:
                    next_ids[i] = self._step(r, st, last[i])
            if all(st["finish"] for st in states):
                break
            mask = torch.cat([mask, torch.ones((bsz, 1), dtype=torch.long)], dim=1)
            pos = pos + 1
            out = self.model(
                input_ids=next_ids[:, None], attention_mask=mask, position_ids=pos[:, None],
                **{self.cache_keyword: past}, use_cache=True,
            )
            last, past = out.logits[:, -1].float(), out.past_key_values
        return [self._response(r, st) for r, st in zip(reqs, states)]

    def _input_logprobs(self, r: dict, logits: torch.Tensor):
        """SGLang's input_token_logprobs: tokens from logprob_start_len on, the first with a null log-prob."""
        start = r["logprob_start_len"]
        if start < 0:
            return [], []
        lps = torch.log_softmax(logits, dim=-1)
        vals, tops = [], []
        for k in range(start, len(r["ids"])):
            if k == start:
                vals.append(None)
                tops.append(None)
            else:
                vals.append(max(lps[k - 1, r["ids"][k]].item(), LOGPROB_MIN))
                tops.append(self._top(lps[k - 1], r["top_logprobs_num"]))
        return vals, tops

    def _top(self, lps: torch.Tensor, k: int) -> list:
        if k <= 0:
            return []
        v, i = lps.topk(k)
        return list(zip(v.clamp(min=LOGPROB_MIN).tolist(), i.tolist()))

    def _step(self, r: dict, st: dict, logits: torch.Tensor) -> int:
        sp = r["sp"]
        temp = float(sp["temperature"])
        if temp < 1e-6:  # greedy: SGLang sets temperature=1, top_k=1
            token = int(logits.argmax())
            lps = torch.log_softmax(logits, dim=-1)
        else:
            lps = torch.log_softmax(logits / temp, dim=-1)
            probs = lps.exp()
            top_k = int(sp["top_k"])
            if 0 < top_k < probs.numel():
                probs[probs < probs.topk(top_k).values[-1]] = 0
            top_p = float(sp["top_p"])
            if top_p < 1.0:
                sorted_p, order = probs.sort(descending=True)
                drop = sorted_p.cumsum(0) - sorted_p > top_p
                probs[order[drop]] = 0
            token = int(torch.multinomial(probs / probs.sum(), 1, generator=st["gen"]))
            if RAW_OUTPUT_LOGPROBS:
                lps = torch.log_softmax(logits, dim=-1)
        st["out"].append(token)
        st["lp"].append(max(lps[token].item(), LOGPROB_MIN))
        st["top"].append(self._top(lps, r["top_logprobs_num"]))
        st["finish"] = self._finished(sp, st["out"])
        return token

    def _finished(self, sp: dict, out: list[int]):
        """SGLang's order: stop strings, then EOS / stop_token_ids, then the length cap."""
        if sp["stop"]:
            text = self.tokenizer.decode(out, skip_special_tokens=sp["skip_special_tokens"])
            for s in sp["stop"]:
                if s in text:
                    return {"type": "stop", "matched": s}
        if not sp["ignore_eos"] and (out[-1] in self.eos_ids or out[-1] in sp["stop_token_ids"]):
            return {"type": "stop", "matched": out[-1]}
        if len(out) >= sp["max_new_tokens"]:
            return {"type": "length", "length": sp["max_new_tokens"]}
        return None

    def _triples(self, r: dict, pairs) -> list:
        """SGLang's [logprob, token_id, text or null] entries."""
        text = (lambda t: self.tokenizer.decode([t])) if r["text_in_logprobs"] else (lambda t: None)
        return [[lp, t, text(t)] for lp, t in pairs]

    def _response(self, r: dict, st: dict) -> dict:
        sp, out, finish = r["sp"], st["out"], st["finish"]
        matched = finish.get("matched")
        text_ids = out[:-1] if isinstance(matched, int) and not sp["no_stop_trim"] else out
        text = self.tokenizer.decode(text_ids, skip_special_tokens=sp["skip_special_tokens"])
        if isinstance(matched, str) and matched in text:
            cut = text.find(matched)
            text = text[: cut + len(matched)] if sp["no_stop_trim"] else text[:cut]
        meta = {
            "id": r["rid"],
            "finish_reason": finish,
            "prompt_tokens": len(r["ids"]),
            "weight_version": r["weight_version"],
            "num_retractions": 0,
            "completion_tokens": len(out),
            "cached_tokens": 0,
            "reasoning_tokens": 0,
        }
        if r["return_logprob"]:
            start = r["logprob_start_len"]
            meta["input_token_logprobs"] = self._triples(r, zip(st["in_lp"], r["ids"][start:] if start >= 0 else []))
            meta["output_token_logprobs"] = self._triples(r, zip(st["lp"], out))
            meta["output_token_logprobs_length"] = len(out)
            if r["top_logprobs_num"] > 0:
                meta["input_top_logprobs"] = [row and self._triples(r, row) for row in st["in_top"]]
                meta["output_top_logprobs"] = [self._triples(r, row) for row in st["top"]]
        meta["e2e_latency"] = time.monotonic() - r["t0"]
        return {"text": text, "output_ids": list(out), "meta_info": meta}


SAMPLING_DEFAULTS = {
    "max_new_tokens": 128, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "stop": None,
    "stop_token_ids": None, "ignore_eos": False, "skip_special_tokens": True, "no_stop_trim": False,
    "n": 1, "sampling_seed": None,
}


def normalise_sampling(sp: dict | None) -> dict:
    """SGLang's SamplingParams defaults (null means default) and checks."""
    sp = dict(sp or {})
    for k, v in SAMPLING_DEFAULTS.items():
        if sp.get(k) is None:
            sp[k] = v
    sp["stop"] = [sp["stop"]] if isinstance(sp["stop"], str) else list(sp["stop"] or [])
    sp["stop_token_ids"] = set(sp["stop_token_ids"] or [])
    if not sp["temperature"] >= 0:
        raise BadRequest(f"temperature must be a non-negative finite number, got {sp['temperature']}.")
    if not 0.0 < sp["top_p"] <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {sp['top_p']}.")
    if sp["top_k"] < 1 and sp["top_k"] != -1:
        raise BadRequest(f"top_k must be -1 (disable) or at least 1, got {sp['top_k']}.")
    if sp["max_new_tokens"] < 0:
        raise BadRequest(f"max_new_tokens must be at least 0, got {sp['max_new_tokens']}.")
    return sp


class Server:
    def __init__(self, args):
        self.args = args
        self.engine = Engine(args.model_path, DTYPES[args.dtype], args.seed)
        self.lock = threading.Lock()  # one batch (or one reload) on the model at a time
        self.weight_version = args.weight_version
        self.faults = {"stale_head": args.stale_head, "skip_reload": args.skip_reload,
                       "garbage": args.garbage, "hang_generate": args.hang_generate}
        self.unhang = threading.Event()
        self.unhang.set() if not args.hang_generate else self.unhang.clear()
        self.unpaused = threading.Event()
        self.unpaused.set()
        self.up = False
        self.warm_at = 0.0  # time.monotonic() when the warm-up request after the start is done

    def flush_cache(self, timeout_s: float) -> bool:
        """SGLang flushes only when idle; with a timeout it waits that long for idleness."""
        wait_s = self.warm_at - time.monotonic()
        if wait_s > 0 and wait_s <= timeout_s:
            time.sleep(wait_s)  # the pending warm-up finishes meanwhile
        return time.monotonic() >= self.warm_at

    def set_faults(self, body: dict) -> dict:
        unknown = set(body) - set(FAULTS)
        if unknown:
            raise BadRequest(f"unknown fault knobs {sorted(unknown)}; known: {list(FAULTS)}")
        if body.get("garbage") not in (None, "json", "shape"):
            raise BadRequest("garbage must be null, 'json' or 'shape'")
        self.faults.update(body)
        self.unhang.clear() if self.faults["hang_generate"] else self.unhang.set()
        log(f"faults: {self.faults}")
        return dict(self.faults)

    def build_requests(self, body: dict) -> tuple[list[dict], bool]:
        """One engine request per prompt and sample, and whether SGLang would answer with one object."""
        ids = body.get("input_ids")
        if ids is None and body.get("text") is not None:
            texts = body["text"]
            encode = self.engine.tokenizer.encode
            ids = encode(texts) if isinstance(texts, str) else [encode(t) for t in texts]
        if not ids:
            raise BadRequest("input_ids cannot be empty." if ids == [] else "Either text or input_ids should be provided.")
        if body.get("stream"):
            raise BadRequest("stream=true is not supported by the SGLang stand-in")
        single = isinstance(ids[0], int)
        prompts = [ids] if single else ids

        def per_prompt(key, default):  # a scalar applies to every prompt, a list has one entry per prompt
            value = body.get(key)
            return value if isinstance(value, list) else [default if value is None else value] * len(prompts)

        rid = body.get("rid")
        rids = per_prompt("rid", None) if single or not isinstance(rid, str) else [f"{rid}_{i}" for i in range(len(prompts))]
        sps = [normalise_sampling(sp) for sp in per_prompt("sampling_params", None)]
        want_lp, starts = per_prompt("return_logprob", False), per_prompt("logprob_start_len", -1)
        tops = per_prompt("top_logprobs_num", 0)
        if any(len(f) != len(prompts) for f in (rids, sps, want_lp, starts, tops)):
            raise BadRequest("The length of a per-prompt field does not match the batch size.")
        n, vocab, ctx = sps[0]["n"], self.engine.vocab_size, self.engine.context_len
        reqs, t0 = [], time.monotonic()
        for i, p in enumerate(prompts):
            if not p or any(not isinstance(t, int) or not 0 <= t < vocab for t in p):
                raise BadRequest(f"input_ids[{i}] must be a non-empty list of token ids in [0, {vocab}).")
            if len(p) + sps[i]["max_new_tokens"] > ctx:
                raise BadRequest(f"Requested token count ({len(p)} input + {sps[i]['max_new_tokens']} new) "
                                 f"exceeds the model's context length ({ctx} tokens).")
            start = int(starts[i]) if want_lp[i] else -1
            if start > len(p):
                raise BadRequest(f"logprob_start_len={start} is higher than the number of input tokens {len(p)}.")
            for _ in range(n):  # grouped by prompt, each sample with a fresh rid, as SGLang does
                reqs.append({"ids": list(p), "sp": sps[i], "return_logprob": bool(want_lp[i]),
                             "logprob_start_len": start, "top_logprobs_num": int(tops[i]),
                             "text_in_logprobs": bool(body.get("return_text_in_logprobs")),
                             "rid": rids[i] if n == 1 and rids[i] is not None else uuid.uuid4().hex,
                             "t0": t0})
        return reqs, single and n == 1

    def generate(self, body: dict, hang_timeout: float | None = None):
        reqs, single = self.build_requests(body)
        if not self.unhang.wait(hang_timeout):
            return None
        self.unpaused.wait()
        with self.lock:
            for r in reqs:  # the version of the weights that actually serve it
                r["weight_version"] = self.weight_version
            outs = self.engine.generate(reqs)
        return outs[0] if single else outs

    def update_weights(self, body: dict) -> tuple[int, dict]:
        if not isinstance(body.get("model_path"), str):
            raise BadRequest("model_path (a string) is required")
        with self.lock:
            if self.faults["skip_reload"]:
                ok, msg = True, "Succeeded to update model weights."
                self.engine.model_path = body["model_path"]
            else:
                ok, msg = self.engine.reload(body["model_path"], stale_head=self.faults["stale_head"])
            if ok and body.get("weight_version") is not None:
                self.weight_version = str(body["weight_version"])
                msg += f" Weight version updated to {self.weight_version}."
        log(f"update_weights_from_disk {body['model_path']}: {msg!r}")
        return (200 if ok else 400), {"success": ok, "message": msg, "num_paused_requests": 0}

    def model_info(self) -> dict:
        cfg = self.engine.model.config
        return {"model_path": self.engine.model_path, "served_model_name": self.engine.model_path,
                "tokenizer_path": self.args.model_path, "is_generation": True, "preferred_sampling_params": None,
                "weight_version": self.weight_version, "load_format": "auto", "reasoning_parser": None,
                "tool_call_parser": None, "disaggregation_mode": "null", "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": getattr(cfg, "model_type", None),
                "architectures": getattr(cfg, "architectures", None)}

    def server_info(self) -> dict:
        a = self.args
        return {"model_path": a.model_path, "tokenizer_path": a.model_path, "host": a.host, "port": a.port,
                "dtype": a.dtype, "random_seed": a.seed, "context_length": self.engine.context_len,
                "weight_version": self.weight_version, "internal_states": [{}], "version": "standin",
                "frontend": "python", "standin": True, "faults": dict(self.faults)}


def make_handler(server: Server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # replaced by one line per request in _dispatch
            pass

        def _send(self, status: int, payload=None, raw: bytes | None = None, ctype="application/json"):
            data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return status

        def _body(self) -> dict:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                body = json.loads(raw) if raw else {}
            except json.JSONDecodeError as e:
                raise BadRequest(f"request body is not JSON: {e}") from None
            if not isinstance(body, dict):
                raise BadRequest("request body must be a JSON object")
            return body

        def do_GET(self):
            self._dispatch("GET")

        def do_POST(self):
            self._dispatch("POST")

        def do_PUT(self):
            self._dispatch("PUT")

        def _dispatch(self, method: str):
            t0, path = time.monotonic(), self.path.split("?", 1)[0]
            try:
                status = self._route(method, path)
            except ConnectionError:  # the client gave up (a timeout, or a test's SIGKILL of it)
                status = "client disconnected"
            except BadRequest as e:
                status = self._send(400, {"error": {"message": str(e)}})
            except Exception as e:  # noqa: BLE001 - a stand-in answers, it does not crash
                log(f"error on {method} {path}: {e!r}")
                error = {"object": "error", "message": repr(e), "type": "500", "param": None, "code": 500}
                status = self._send(500, error)
            log(f"{method} {path} {status} {time.monotonic() - t0:.3f}s")

        def _route(self, method: str, path: str) -> int:
            s = server
            if path in ("/health", "/ready"):
                return self._send(200 if s.up else 503)
            if path == "/health_generate":
                if not s.up:
                    return self._send(503)
                out = s.generate({"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
                                 hang_timeout=s.args.health_check_timeout)
                return self._send(200 if out is not None else 503)
            if path in ("/get_model_info", "/model_info"):
                return self._send(200, s.model_info())
            if path in ("/get_server_info", "/server_info"):
                return self._send(200, s.server_info())
            if path == "/flush_cache":
                query = dict(pair.split("=", 1) for pair in self.path.partition("?")[2].split("&") if "=" in pair)
                if not s.flush_cache(float(query.get("timeout", 0))):
                    return self._send(400, raw=b"Flush cache failed.\n", ctype="text/plain")
                return self._send(200, raw=b"Cache flushed.\nPlease check backend logs for more details. "
                                  b"(When there are running or waiting requests, the operation will not be performed.)\n",
                                  ctype="text/plain")
            if path == "/standin/fault":
                return self._send(200, s.set_faults(self._body()) if method == "POST" else dict(s.faults))
            if method == "GET":
                return self._send(404, {"detail": "Not Found"})
            body = self._body()
            if path == "/generate":
                out = s.generate(body)
                garbage = s.faults["garbage"]
                if garbage == "json":
                    return self._send(200, raw=b'{"text": "", "output_ids": [1, 2, ')
                if garbage == "shape":
                    for o in out if isinstance(out, list) else [out]:
                        del o["meta_info"].get("output_token_logprobs", [])[-1:]
                    out = out[:-1] if isinstance(out, list) else [out]
                return self._send(200, out)
            if path == "/update_weights_from_disk":
                return self._send(*s.update_weights(body))
            if path == "/update_weight_version":
                s.weight_version = str(body["new_version"])
                return self._send(200, {"success": True, "message": f"Weight version updated to {s.weight_version}",
                                        "new_version": s.weight_version})
            if path == "/pause_generation":
                s.unpaused.clear()
                return self._send(200, {"message": "Generation paused successfully.", "status": "ok"})
            if path == "/continue_generation":
                s.unpaused.set()
                return self._send(200, {"message": "Generation continued successfully.", "status": "ok"})
            if path == "/abort_request":
                return self._send(200)
            return self._send(404, {"detail": "Not Found"})

    return Handler


class ListeningServer(ThreadingHTTPServer):
    # SGLang's uvicorn listens with a backlog of 2048; socketserver's default of 5 overflows when a
    # rollout opens its 16 connections at once, and off loopback (a server placed by Ray listens on
    # the node's address) the overflow resets connections.
    request_queue_size = 2048


def hold_shared_memory() -> None:
    """Shared memory as vLLM leaves it when killed: a psm_* segment (multiprocessing.shared_memory,
    not unlinked: its resource tracker dies with it) and a semaphore file, both mapped by this process."""
    import mmap
    from multiprocessing import resource_tracker, shared_memory

    segment = shared_memory.SharedMemory(create=True, size=4096)
    resource_tracker.unregister(segment._name, "shared_memory")  # killed servers leave theirs
    semaphore = open(f"/dev/shm/sem.mp-{os.getpid()}-standin", "w+b")
    semaphore.truncate(32)
    HELD.extend([segment, mmap.mmap(semaphore.fileno(), 32)])
    log(f"shared memory: /dev/shm/{segment.name.lstrip('/')} {semaphore.name}")


HELD: list = []


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000, help="0 picks a free port (printed on stderr)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weight-version", default="default")
    p.add_argument("--health-check-timeout", type=float, default=20.0)
    p.add_argument("--stale-head", action="store_true")
    p.add_argument("--skip-reload", action="store_true")
    p.add_argument("--garbage", choices=["json", "shape"], default=None)
    p.add_argument("--hang-generate", action="store_true")
    p.add_argument("--warmup-s", type=float, default=0.0, help="a warm-up request pending this long after ready")
    p.add_argument("--shared-memory", action="store_true",
                   help="hold a /dev/shm/psm_* segment and a sem.mp-* file, as vLLM's processes do")
    args = p.parse_args(argv)
    if args.shared_memory:
        hold_shared_memory()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))

    server = Server(args)
    httpd = ListeningServer((args.host, args.port), make_handler(server))
    httpd.daemon_threads = True
    args.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log(f"Uvicorn running on http://{args.host}:{args.port} (SGLang stand-in, not SGLang)")
    server.engine.generate([{  # warm-up, as SGLang does before it reports ready
        "ids": [0], "sp": normalise_sampling({"max_new_tokens": 1, "temperature": 0}), "return_logprob": False,
        "logprob_start_len": -1, "top_logprobs_num": 0, "text_in_logprobs": False, "rid": "warmup",
        "weight_version": server.weight_version, "t0": time.monotonic()}])
    server.warm_at = time.monotonic() + args.warmup_s
    server.up = True
    log("The server is fired up and ready to roll!")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
