"""Atomic checkpoints: a loadable model directory plus the trainer state needed to resume exactly.

A checkpoint is written under a temporary name and renamed into place, so a crash mid-write never
leaves a torn `step_NNNNNN`. Each carries `meta.json` saying whether the run was healthy when it was
saved; retention always keeps the newest healthy one, the newest K and the best.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors.torch import load_file

from grpo.config import CheckpointConfig

STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    healthy: bool
    score: float | None

    @property
    def model_dir(self) -> Path:
        return self.path / "model"


def capture_rng(generator: torch.Generator) -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "sampler": generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    generator.set_state(state["sampler"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointManager:
    def __init__(self, root: Path, cfg: CheckpointConfig) -> None:
        self.root = root
        self.cfg = cfg
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(".tmp-*"):  # left by a crash mid-write: never a valid checkpoint
            shutil.rmtree(stale, ignore_errors=True)

    def save(
        self, step: int, write_model: Callable[[Path], None], state: dict[str, Any], *, healthy: bool,
        score: float | None,
    ) -> CheckpointInfo:
        """`write_model(dir)` writes the loadable model directory; `state` is everything else needed to resume."""
        final = self.root / f"step_{step:06d}"
        tmp = self.root / f".tmp-step_{step:06d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write_model(tmp / "model")
        torch.save(state, tmp / STATE_FILE)
        meta = {"step": step, "healthy": healthy, "score": score, "saved_at": time.time()}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
        _fsync_tree(tmp)
        if final.exists():  # same step saved again (e.g. after a rollback): replace it atomically
            old = self.root / f".tmp-old-{final.name}-{os.getpid()}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(self.root)
        info = CheckpointInfo(step, final, healthy, score)
        self.prune()
        return info

    def list(self) -> list[CheckpointInfo]:
        infos = []
        for path in sorted(self.root.glob("step_*")):
            meta_path = path / META_FILE
            if not meta_path.is_file() or not (path / STATE_FILE).is_file():
                continue
            meta = json.loads(meta_path.read_text())
            infos.append(CheckpointInfo(meta["step"], path, bool(meta.get("healthy", True)), meta.get("score")))
        return sorted(infos, key=lambda i: i.step)

    def latest(self) -> CheckpointInfo | None:
        infos = self.list()
        return infos[-1] if infos else None

    def last_good(self) -> CheckpointInfo | None:
        good = [i for i in self.list() if i.healthy]
        return good[-1] if good else None

    def best(self) -> CheckpointInfo | None:
        scored = [i for i in self.list() if i.score is not None and i.healthy]
        return max(scored, key=lambda i: (i.score, i.step)) if scored else None

    def prune(self) -> None:
        infos = self.list()
        keep = {i.path for i in infos[-max(self.cfg.keep_last, 1) :]}
        for special in (self.last_good(), self.best() if self.cfg.keep_best else None):
            if special is not None:
                keep.add(special.path)
        for info in infos:
            if info.path not in keep:
                shutil.rmtree(info.path, ignore_errors=True)

    def discard_after(self, step: int) -> None:
        """After a rollback to `step`, later checkpoints were saved unhealthy: delete them."""
        for info in self.list():
            if info.step > step:
                shutil.rmtree(info.path, ignore_errors=True)

    def set_aside_after(self, step: int) -> list[Path]:
        """When resuming from an older checkpoint by hand, move later ones to `abandoned/`, where
        automatic recovery never looks, rather than delete what the user may still want."""
        moved = []
        for info in self.list():
            if info.step > step:
                target = self.root / "abandoned" / f"{info.path.name}-{int(time.time())}"
                target.parent.mkdir(exist_ok=True)
                os.rename(info.path, target)
                moved.append(target)
        return moved


def load_state(path: Path) -> dict[str, Any]:
    """The trainer state saved beside a checkpoint's model."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint: it has no {STATE_FILE}")
    return torch.load(path / STATE_FILE, weights_only=False)


def load_weights(model_dir: Path, model: torch.nn.Module) -> None:
    """Load a model directory's safetensors into `model`, which must have the same architecture."""
    model_dir = Path(model_dir)
    weights: dict[str, torch.Tensor] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        weights.update(load_file(file))
    if not weights:
        raise FileNotFoundError(f"{model_dir} has no *.safetensors weights")
    result = model.load_state_dict(weights, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    missing = [k for k in result.missing_keys if k not in tied and not k.endswith("lm_head.weight")]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{model_dir} does not match the model: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}"
        )


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(Path(dirpath) / name, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
