"""A started server's KV cache (rollout.server.kv_cache_gib) against the model and the machine, judged before any
server starts: a cache too small for the longest request grpo sends, or too large for the memory left beside the
trainer, is refused with a value that works. A pure function of the config, the architecture, the lengths and
the room (grpo.tools.plan.machine reads those); `grpo plan` prints it, `grpo train` refuses by it.

On a GPU the server's memory fraction bounds what it takes (SGLang lowers --max-total-tokens to it), so only the
cache's size in tokens is judged there; on a CPU the servers' processes take host memory beside the trainer's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from grpo.config import RunConfig
from grpo.precision import with_concrete_dtype
from grpo.rollout.engines.registry import ENGINES, serves
from grpo.rollout.server.backend import Backend, kv_bytes_per_token
from grpo.tools.plan.model import BYTES, GIB, Architecture


@dataclass(frozen=True)
class ServerCache:
    """What each of a run's started servers holds in its KV cache, and what it is asked to hold."""

    backend: Backend
    replicas: int
    gib: float  # rollout.server.kv_cache_gib
    bytes_per_token: int
    dtype: str
    sequence: int  # the longest request grpo sends, in tokens, with what the server keeps back
    sequence_why: str
    requests: int  # a step's requests, spread over the servers
    max_concurrent: int  # rollout.server.max_concurrent_requests
    beside_bytes: float  # each server's process beside its cache: runtime and weights (host memory, on a CPU)

    @property
    def in_flight(self) -> int:
        """The requests each server is sent at once."""
        return min(self.max_concurrent, -(-self.requests // self.replicas))

    def tokens(self, gib: float | None = None) -> int:
        """The tokens kv_cache_gib=`gib` (default: the configured one) gives the cache, as the server sizes it."""
        return self.backend.kv_cache_tokens(self.gib if gib is None else gib, self.bytes_per_token) or 0

    def bytes(self, gib: float | None = None) -> float:
        return self.tokens(gib) * self.bytes_per_token

    def servers_bytes(self, gib: float | None = None) -> float:
        """Every server's process, its cache included."""
        return self.replicas * (self.beside_bytes + self.bytes(gib))


def sizes_a_cache(cfg: RunConfig) -> bool:
    """Whether the config gives the servers grpo starts a KV cache size."""
    s = cfg.rollout.server
    return serves(cfg.rollout.engine) and not s.urls and s.kv_cache_gib is not None


def server_cache(cfg: RunConfig, device: str, arch: Architecture, prompt_len: int, probe_len: int) -> ServerCache | None:
    """The cache of the servers grpo starts, when rollout.server.kv_cache_gib sizes it; None otherwise (the
    embedded engine, attached servers, the server's default size, vLLM on a GPU)."""
    from grpo.rollout.engines.server import make_backend
    from grpo.rollout.server.weights import PROBE_GENERATED

    if not sizes_a_cache(cfg):
        return None
    r, s = cfg.rollout, cfg.rollout.server
    dtype = with_concrete_dtype(cfg, device).model.dtype
    backend = make_backend(r.engine, device)
    per_token = kv_bytes_per_token(arch.num_layers, arch.num_kv_heads, arch.head_dim, dtype)
    if backend.kv_cache_tokens(s.kv_cache_gib, per_token) is None:
        return None
    answer, probe = prompt_len + r.max_new_tokens, probe_len + PROBE_GENERATED
    why = (f"the longest prompt, {prompt_len}, + rollout.max_new_tokens={r.max_new_tokens}" if answer >= probe
           else f"the weight probe's {probe_len} tokens + {PROBE_GENERATED} generated")
    if backend.cache_slack_tokens:
        why += f" + {backend.cache_slack_tokens} {backend.name} keeps back"
    runtime = ENGINES[backend.name].server_cpu_bytes if device == "cpu" else 0.0
    return ServerCache(backend, s.replicas, s.kv_cache_gib, per_token, dtype, max(answer, probe)
                       + backend.cache_slack_tokens, why, r.problems_per_step * r.samples_per_problem,
                       s.max_concurrent_requests, runtime + arch.params * BYTES[dtype])


def describe(cache: ServerCache, room: float | None) -> list[str]:
    """`grpo plan`'s lines on the servers' cache; `room`: the host memory left beside the trainer (None: not
    judged, on a GPU)."""
    name, holds = cache.backend.name, cache.tokens() // cache.sequence
    lines = [f"{name} KV cache (rollout.server.kv_cache_gib={cache.gib:g}): {cache.tokens()} tokens of "
             f"{cache.bytes_per_token} bytes ({cache.dtype}) per server; the longest request takes {cache.sequence} "
             f"({cache.sequence_why}): it holds {holds} such, and each server is sent up to {cache.in_flight} at once"]
    if 1 <= holds < cache.in_flight:
        better = _holding(cache, cache.in_flight * cache.sequence, room)
        lines.append("  the others wait for room in the cache" + (
            f": rollout.server.kv_cache_gib={better:g} holds them all" if better is not None else ""))
    if room is not None:
        verdict = "fits" if cache.servers_bytes() <= room else "does NOT fit"
        lines.append(f"{cache.replicas} {name} server(s) x {(cache.beside_bytes + cache.bytes()) / GIB:.2f} GiB "
                     f"(runtime and weights {cache.beside_bytes / GIB:.2f}, cache {cache.bytes() / GIB:.2f}) in "
                     f"{room / GIB:.2f} GiB left beside the trainer: {verdict}")
    return lines


def refusal(cache: ServerCache, room: float | None, room_source: str) -> str | None:
    """One line when the cache cannot hold the longest request, or when the servers do not fit in `room` bytes
    (`room_source` says where that comes from), naming kv_cache_gib and a value that works; else None."""
    knob, name = f"rollout.server.kv_cache_gib={cache.gib:g}", cache.backend.name
    if cache.tokens() < cache.sequence:
        # Each server's requests at once, all in its cache; else the largest cache that fits.
        better = _holding(cache, cache.in_flight * cache.sequence, room) or _largest(cache, room)
        fix = (f"set rollout.server.kv_cache_gib={better:g}" if better is not None
               else "free memory for a larger one, or lower rollout.max_new_tokens")
        return (f"{knob} gives each {name} server a KV cache of {cache.tokens()} tokens of this model "
                f"({cache.bytes_per_token} bytes each in {cache.dtype}), fewer than the longest request takes: "
                f"{cache.sequence} ({cache.sequence_why}): {fix}")
    if room is None or cache.servers_bytes() <= room:
        return None
    fix = "no cache fits beside the trainer: free memory, or make the trainer smaller (grpo plan)"
    for replicas in range(cache.replicas, 0, -1):  # the most servers that fit, each with the largest cache
        fewer = replace(cache, replicas=replicas)
        if (largest := _largest(fewer, room)) is not None:
            knobs = [] if replicas == cache.replicas else [f"rollout.server.replicas={replicas}"]
            fix = "set " + " with ".join([*knobs, f"rollout.server.kv_cache_gib={largest:g} or less"])
            if (enough := _holding(fewer, fewer.in_flight * fewer.sequence, room)) is not None:
                fix += f" ({enough:g} holds the {fewer.in_flight} requests each server is sent at once)"
            break
    return (f"{knob} with {cache.replicas} {name} server(s) takes {cache.servers_bytes() / GIB:.1f} GiB of host "
            f"memory (each {cache.bytes() / GIB:.1f} GiB of cache and {cache.beside_bytes / GIB:.1f} GiB of runtime "
            f"and weights), more than the {room / GIB:.1f} GiB left beside the trainer ({room_source}): {fix}; "
            "grpo plan shows where it goes (memory.check=false runs it anyway)")


def _works(cache: ServerCache, gib: float, room: float | None) -> bool:
    """kv_cache_gib=`gib` holds the longest request, the server takes what it is told to the token (vLLM rounds
    to whole GiB), and the servers fit in `room`."""
    exact = 0 <= gib * GIB - cache.bytes(gib) < cache.bytes_per_token
    return (gib > 0 and exact and cache.tokens(gib) >= cache.sequence
            and (room is None or cache.servers_bytes(gib) <= room))


def _holding(cache: ServerCache, tokens: int, room: float | None) -> float | None:
    """The smallest kv_cache_gib of two significant digits (or whole) that holds `tokens` and works."""
    wanted = _round(tokens * cache.bytes_per_token / GIB, up=True)
    return next((gib for gib in (wanted, math.ceil(wanted))
                 if cache.tokens(gib) >= tokens and _works(cache, gib, room)), None)


def _largest(cache: ServerCache, room: float | None) -> float | None:
    """The largest kv_cache_gib of two significant digits (or whole) that works in `room`; None: none does, or
    no room is judged."""
    if room is None:
        return None
    largest = _round((room / cache.replicas - cache.beside_bytes) / GIB, up=False)
    return next((gib for gib in (largest, math.floor(largest)) if _works(cache, gib, room)), None)


def _round(gib: float, up: bool) -> float:
    """`gib` to two significant digits, up or down."""
    if gib <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(gib)) - 1)
    steps = gib / scale
    return round((math.ceil(steps - 1e-9) if up else math.floor(steps + 1e-9)) * scale, 12)
