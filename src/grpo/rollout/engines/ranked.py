"""Server engines under torchrun: rank 0 holds the servers, every rank's share of the rollouts goes
through them.

Each call is collective (every rank makes the same calls, in the same order; the collector and the
evaluation decide their retries together for this): the ranks' prompts and seeds are gathered to
rank 0, which runs the one-process engine on all of them (the fleet: spreading, supervision,
restarts, the dead-incarnation check), and every rank gets its own completions back. So the samples
are the ones one process draws (per-sample seeds), and the guard's inputs agree on every rank.

Weights: on a change, every rank takes part in gathering the full model once (FSDP), which rank 0
writes once to where every server loads from; the servers are then reloaded and probed by rank 0
inside the ranks' gathered-weights context (its probe forwards communicate nothing). An error on rank
0 (a server given up on, weights that never verify, a stop) is raised on every rank alike.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from grpo.dist import Ranks
from grpo.rollout.engines.base import RolloutEngine
from grpo.rollout.server.supervisor import ServerGaveUp
from grpo.rollout.server.weights import WeightSyncFailed
from grpo.rollout.types import Completion, GenerationCancelled, SamplingParams

T = TypeVar("T")
SHARED_ERRORS = {"ServerGaveUp": ServerGaveUp, "WeightSyncFailed": WeightSyncFailed}


class RankedEngine(RolloutEngine):
    def __init__(self, inner: RolloutEngine | None, ranks: Ranks) -> None:
        """`inner`: the server engine, on rank 0 only (None elsewhere)."""
        assert (inner is not None) == ranks.main
        self.inner, self.ranks = inner, ranks
        self.policy = None
        self.exported: int | None = None  # the policy revision last gathered and written for the servers

    def start(self, policy) -> None:
        self.policy = policy
        self._export()
        self._on_rank_0(lambda: self.inner.start(policy))

    def sync_weights(self, policy) -> dict[str, float]:
        self.policy = policy
        self._export()
        return self._on_rank_0(lambda: self.inner.sync_weights(policy))

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seeds: list[int] | None = None) -> list[Completion]:
        self._export()  # after a rollback the weights changed without a sync
        shares = self.ranks.gather((prompts, seeds))

        def all_shares() -> list[list[Completion]]:
            merged = [p for share, _ in shares for p in share]
            merged_seeds = None if any(s is None for _, s in shares) else [x for _, s in shares for x in s]
            completions = self.inner.generate(merged, params, merged_seeds)
            out, at = [], 0
            for share, _ in shares:
                out.append(completions[at: at + len(share)])
                at += len(share)
            return out

        return self._on_rank_0(all_shares)[self.ranks.rank]

    def _export(self) -> None:
        """Gather the full model once (every rank takes part), written by rank 0 for the servers."""
        if self.policy is None or self.policy.revision == self.exported:
            return
        if self.ranks.main:
            self.inner.export(self.policy)
        else:
            self.policy.save_full_model(None)  # the gather's other half: only rank 0 writes
        self.exported = self.policy.revision

    def _on_rank_0(self, work: Callable[[], T]) -> T:
        """`work` on rank 0 inside the gathered weights (its probes run forwards), its result or its
        error on every rank."""
        outcome: tuple[str, Any, Any] = ("ok", None, None)
        with self.policy.unsharded():
            if self.ranks.main:
                try:
                    outcome = ("ok", work(), None)
                except (ServerGaveUp, WeightSyncFailed) as exc:
                    outcome = (type(exc).__name__, str(exc), getattr(exc, "diagnosis", None) or exc.evidence)
                except GenerationCancelled as exc:
                    outcome = ("GenerationCancelled", str(exc), None)
                except BaseException as exc:
                    self.ranks.broadcast(("crash", f"rank 0: {type(exc).__name__}: {exc}", None))
                    raise
            kind, value, evidence = self.ranks.broadcast(outcome)
        if kind == "ok":
            return value
        if kind == "GenerationCancelled":
            raise GenerationCancelled(value)
        if kind == "crash":
            raise RuntimeError(value)
        raise SHARED_ERRORS[kind](value, evidence)

    def status(self) -> list[dict]:
        return self.inner.status() if self.inner is not None else []

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
