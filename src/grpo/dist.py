"""Ranks: who this process is in a `torchrun` (or Ray) group, and the few collectives the loop
needs. Every guard decision is made on values all ranks agree on, so these are the only places
where ranks exchange anything besides FSDP's own all-gathers and reduce-scatters.

Without a group (one process) every collective is the identity, and torch is not imported: the tools
that read a run directory (grpo doctor, watch, health) start in a fraction of a second.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    import torch

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0 writes the run directory (metrics, events, config, reports); every rank trains."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def sum(self, values: list[float]) -> list[float]:
        return self._reduce(values, "SUM")

    def max(self, values: list[float]) -> list[float]:
        return self._reduce(values, "MAX")

    def any(self, flag: bool) -> bool:
        return bool(self.max([float(flag)])[0])

    def _reduce(self, values: list[float], op: str) -> list[float]:
        if not self.distributed:
            return list(values)
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op))
        return tensor.tolist()

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: T) -> T:
        """Rank 0's `obj` on every rank."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()


SINGLE = Ranks()


def from_environment(device: torch.device) -> Ranks:
    """Join the group `torchrun` (or the Ray launcher) describes in the environment, if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    import torch.distributed as dist

    if not dist.is_initialized():
        rank = int(os.environ["RANK"])
        # The launcher's store outlives a restarted group; keys of the group that died would point
        # the new one at dead ranks' addresses, so each attempt keeps its keys apart.
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                              is_master=rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True")
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                store=dist.PrefixStore(f"grpo/attempt{attempt}", store), rank=rank, world_size=world)
    return Ranks(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def exit_process(status: int) -> NoReturn:
    """End this process with `status`. A rank of a process group skips the interpreter's teardown: gloo's
    worker threads may still be dropping the last collective's tensors, whose Python objects need the
    interpreter being torn down, and the process aborts (SIGABRT, "terminate called without an active
    exception"; pytorch/pytorch#179291) after a run that finished. The group cannot be emptied first:
    destroy_process_group leaves its threads running while FSDP's device mesh holds it. Logs and the
    standard streams are flushed before."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
