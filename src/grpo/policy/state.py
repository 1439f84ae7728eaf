"""The policy's training state on disk, the same for one process and for N ranks: fp32 weights and
AdamW's moments keyed by parameter name, written with torch.distributed.checkpoint (each rank writes
its own shards, in parallel). A checkpoint saved by N ranks therefore loads in M, resharded on load.

    {"model": {name: fp32 weight}, "optim": {"state": {name: {"step", "exp_avg", "exp_avg_sq"}}}}

One process keeps fp32 master copies of a bf16 model (MasterWeightAdamW): those are the weights
saved. Sharded, FSDP2 keeps fp32 parameters and computes in bf16: its parameters are.

The files are written past the page cache, each one's size and CRC32 taken as it is written
(grpo.rundir.direct), so the checkpoint's manifest need not read them back.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_state_dict

from grpo.policy.optim import MasterWeightAdamW
from grpo.rundir.direct import DirectFile, Written


def save(model: torch.nn.Module, optimizer: MasterWeightAdamW, directory: Path, sharded: bool,
         direct: bool = True) -> dict[Path, Written]:
    """-> the size and CRC32 of each file this process wrote. direct=False writes through the page cache
    with torch's own files and records nothing, as before grpo.rundir.direct (bench/checkpoint.py compares)."""
    if sharded:
        state = _sharded_state(model, optimizer, with_optim=bool(optimizer.optimizer.state))[0]
    else:
        state = _local_state(optimizer)
    writer = FileSystemWriter(str(directory), sync_files=True)
    written: dict[Path, Written] = {}
    if direct:
        writer.fs = _DirectFileSystem(written)
    with _one_process_is_fine():
        dcp.save(state, storage_writer=writer, no_dist=not sharded)
    return written


@torch.no_grad()
def load(model: torch.nn.Module, optimizer: MasterWeightAdamW, directory: Path, sharded: bool) -> None:
    metadata = FileSystemReader(str(directory)).read_metadata().state_dict_metadata
    saved = set(metadata)
    with_optim = any(key.startswith("optim.") for key in saved)
    if sharded:
        state, model_sd, optim_sd = _sharded_state(model, optimizer, with_optim)
    else:
        if with_optim:
            _allocate_adam_state(optimizer)
        state = _local_state(optimizer)
    missing = [f"model.{name}" for name in optimizer.names if f"model.{name}" not in saved]
    if missing:
        raise ValueError(f"{directory} has no weights for {missing[:3]}: it was saved from another model")
    for key, tensor in state["model"].items():
        stored = metadata.get(f"model.{key}")
        if stored is not None and tuple(stored.size) != tuple(tensor.shape):
            raise ValueError(f"{key} has shape {tuple(stored.size)} there, the model's is {tuple(tensor.shape)}")
    # Partial: a tied output layer is saved under both names by some writers and one by others.
    with _one_process_is_fine():
        dcp.load(state, checkpoint_id=str(directory), planner=DefaultLoadPlanner(allow_partial_load=True),
                 no_dist=not sharded)
    if sharded:
        set_state_dict(model, optimizer.optimizer, model_state_dict=model_sd,
                       optim_state_dict=optim_sd if with_optim else {})
    if not with_optim:
        optimizer.optimizer.state.clear()  # saved before the first step: AdamW starts fresh, as it did
    if optimizer.use_master:
        for param, master in zip(optimizer.params, optimizer.master):
            param.copy_(master)


class _DirectFileSystem(FileSystem):
    """torch.distributed.checkpoint's files, written through DirectFile into `written`; read as torch reads them."""

    def __init__(self, written: dict[Path, Written]) -> None:
        self.written = written

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator:
        if mode != "wb":
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with DirectFile(path) as stream:
            yield stream
        self.written[Path(path)] = stream.written

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        super().rename(path, new_path)  # .metadata is written under a temporary name
        if (written := self.written.pop(Path(path), None)) is not None:
            self.written[Path(new_path)] = written


@contextlib.contextmanager
def _one_process_is_fine() -> Iterator[None]:
    """torch.distributed.checkpoint warns when it runs without a process group, which one process does."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _local_state(optimizer: MasterWeightAdamW) -> dict:
    adam = optimizer.optimizer.state
    return {"model": dict(zip(optimizer.names, optimizer.master)),
            "optim": {"state": {name: adam[m] for name, m in zip(optimizer.names, optimizer.master) if adam.get(m)}}}


def _sharded_state(model: torch.nn.Module, optimizer: MasterWeightAdamW, with_optim: bool):
    """-> (the state to save or load into, the model and optimizer dicts set_state_dict takes back)."""
    if not with_optim:
        model_sd = get_model_state_dict(model)
        return {"model": model_sd}, model_sd, None
    # get_state_dict materialises AdamW's state of a fresh optimizer (a zero step); a load overwrites it.
    model_sd, optim_sd = get_state_dict(model, optimizer.optimizer)
    return {"model": model_sd, "optim": {"state": optim_sd["state"]}}, model_sd, optim_sd


def _allocate_adam_state(optimizer: MasterWeightAdamW) -> None:
    """Tensors for a load to fill, shaped as AdamW makes them at its first step."""
    fused = bool(optimizer.optimizer.defaults.get("fused"))
    for master in optimizer.master:
        optimizer.optimizer.state[master] = {
            "step": torch.zeros((), dtype=torch.float32, device=master.device if fused else "cpu"),
            "exp_avg": torch.zeros_like(master, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(master, memory_format=torch.preserve_format),
        }
