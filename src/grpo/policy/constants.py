"""The policy's implementation constants that `grpo plan` models, in a module without torch so the plan
imports the very values the trainer runs with (and stays quick to import)."""

# grpo.policy.head: tokens per chunk of the loss's fp32 temporaries ([256, 49152] fp32 is 48 MiB).
HEAD_CHUNK_TOKENS = 256
# grpo.policy.attention: the name eager attention without repeated keys and values is registered under ...
GROUPED_EAGER = "grouped_eager"
# ... SDPA that also takes a packed micro-batch (the default on GPUs) ...
PACKED_SDPA = "packed_sdpa"
# ... and the models whose own eager attention is the plain one it replaces (no softcapping, sinks or
# scaling of their own), by transformers' model_type: the models both are used for.
PLAIN_EAGER_MODELS = frozenset({"llama", "mistral", "qwen2", "qwen3"})
# grpo.rollout.engines.decode_step: the models whose layers are Llama's (Qwen3's normalise queries and keys),
# which decode through the engine's own step on the grouped eager attention.
LLAMA_SHAPED_MODELS = frozenset({"llama", "mistral", "qwen2"})
# The attentions that take a packed micro-batch (grpo.policy.attention.PackedPrompts): one pass a micro-batch.
PACKING_ATTENTIONS = frozenset({GROUPED_EAGER, PACKED_SDPA})
