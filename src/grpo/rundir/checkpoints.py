"""Checkpoints: a loadable model directory, the policy's training state (weights and optimizer, in
torch.distributed.checkpoint's sharded format, so any number of ranks can load it), and the loop's
state (step, data position, RNG, guard), everything needed to resume exactly.

    step_NNNNNN/model/              loads with AutoModelForCausalLM.from_pretrained (LoRA: an adapter,
                                    see grpo.policy.lora)
    step_NNNNNN/policy/             fp32 weights and AdamW state by parameter name, one file per rank
    step_NNNNNN/trainer_state.pt    the loop's state
    step_NNNNNN/meta.json           step, healthy, score, log sizes, and the manifest

A checkpoint is written under `.tmp-step_NNNNNN`, fsynced, and renamed into place, so a crash never
leaves a torn `step_NNNNNN`. Its `meta.json`, written last, holds a manifest (every file's size and
CRC32), whether the run was healthy, and the sizes of the run's logs at that moment (so a resume can
cut the lines of steps it will replay). A checkpoint whose files do not match its manifest is
invalid: it is moved to `invalid/` with the reason (the newest such one is kept there), and the newest
valid one is used instead.
Deletion renames to `.trash-*` first, so a kill mid-delete never leaves a half-deleted checkpoint, and
a replacement moves the old copy to `.replaced-*` until the new one is in place.

torch, numpy and safetensors are imported where they are used: the tools that only read a run directory
(grpo doctor, watch, health) start without them.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from grpo.config import CheckpointConfig
from grpo.dist import SINGLE, Ranks
from grpo.errors import DiskError, is_disk_error
from grpo.rundir.direct import Written
from grpo.rundir.files import fsync_dir

if TYPE_CHECKING:
    import torch

STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"
FORMAT = 2  # 1: before the sharded policy state
_STEP_DIR = re.compile(r"^step_(\d{6,})$")


class CheckpointInvalid(Exception):
    """A checkpoint's files are torn, missing or corrupt."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"checkpoint {path} is invalid: {reason}")
        self.path, self.reason = Path(path), reason


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    healthy: bool
    score: float | None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    @property
    def log_offsets(self) -> dict[str, int]:
        return dict(self.meta.get("logs") or {})


def capture_rng() -> dict[str, Any]:
    """The global random streams (sampling has its own per-sample seeds: grpo.rollout.seeds)."""
    import numpy as np
    import torch

    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def file_crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            crc = zlib.crc32(chunk, crc)
    return crc


class CheckpointStore:
    def __init__(self, root: Path, cfg: CheckpointConfig, writes: bool = True) -> None:
        """writes=False (ranks other than 0): read, and write shards into saves, but never move,
        delete or commit checkpoints."""
        self.root = Path(root)
        self.cfg = cfg
        self.writes = writes

    # --- writing ----------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Tidy what a killed writer left (run with the run directory locked): unfinished writes
        are removed, a replacement cut short is undone, and invalid checkpoints are moved to
        `invalid/`. -> one line per thing done, for the event log."""
        if not self.writes:
            return []
        self.root.mkdir(parents=True, exist_ok=True)
        notes = []
        for trash in sorted(self.root.glob(".trash-*")):  # deletions cut short: finish them
            shutil.rmtree(trash, ignore_errors=True)
        for old in sorted(self.root.glob(".replaced-*")):
            original = self.root / old.name.removeprefix(".replaced-")
            if not original.exists():
                os.rename(old, original)  # killed mid-replacement: the old, whole checkpoint comes back
                notes.append(f"restored {original.name} from an interrupted replacement")
            else:
                shutil.rmtree(old, ignore_errors=True)
        for tmp in sorted(self.root.glob(".tmp-*")):
            shutil.rmtree(tmp, ignore_errors=True)
            notes.append(f"removed the unfinished checkpoint write {tmp.name}")
        for path, reason in self.scan()[1]:
            moved = self.quarantine(path, reason)
            notes.append(f"moved invalid checkpoint {path.name} to {moved} ({reason})")
        return notes

    def save(
        self, step: int, write: Callable[[Path], dict[Path, Written] | None], state: dict[str, Any], *,
        healthy: bool, score: float | None, logs: dict[str, int] | None = None, ranks: Ranks = SINGLE,
    ) -> CheckpointInfo:
        """`write(dir)` writes the model and policy directories (every rank, its shards) and returns the
        size and CRC32 it took of files as it wrote them (grpo.rundir.direct): the manifest reads back
        only the others. `state` is the loop's state; `logs` maps each append-only log to its size now.
        Rank 0 alone writes the manifest and commits."""
        final = self.root / f"step_{step:06d}"
        tmp = self.root / f".tmp-{final.name}"
        meta: dict[str, Any] = {}
        try:
            if ranks.main:
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
            ranks.barrier()
            written = {str(path.relative_to(tmp)): sums for path, sums in (write(tmp) or {}).items()}
            # Every rank's shards are on disk, and rank 0 has what each rank took of its files.
            recorded = {name: sums for each in ranks.gather(written) for name, sums in each.items()}
            if ranks.main:
                import torch

                torch.save(state, tmp / STATE_FILE)
                files = {}
                for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
                    name = str(path.relative_to(tmp))
                    sums = recorded.get(name) or Written(path.stat().st_size, file_crc32(path))
                    files[name] = {"size": sums.size, "crc32": sums.crc32}
                meta = {"format": FORMAT, "step": step, "healthy": healthy, "score": score,
                        "saved_at": time.time(), "logs": logs or {}, "files": files}
                (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
                _fsync_tree(tmp)
        except BaseException as exc:
            # Described before the partial checkpoint is removed: afterwards the disk looks free, and a
            # write that a library reports only as an I/O error would not be recognised as a full disk.
            disk_error = DiskError(tmp, exc) if is_disk_error(exc) else None
            if ranks.main:
                shutil.rmtree(tmp, ignore_errors=True)  # a failed write must not hold on to disk space
            if disk_error is not None:
                raise disk_error from exc
            raise
        if ranks.main:
            self._commit(tmp, final)
        ranks.barrier()
        return CheckpointInfo(step, final, healthy, score, meta)

    def _commit(self, tmp: Path, final: Path) -> None:
        if final.exists():  # same step saved again (e.g. after a rollback): replace it atomically
            replaced = self.root / f".replaced-{final.name}"
            os.rename(final, replaced)
            os.rename(tmp, final)
            fsync_dir(self.root)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.rename(tmp, final)
        fsync_dir(self.root)
        self.prune()

    # --- reading ----------------------------------------------------------------------------

    def scan(self) -> tuple[list[CheckpointInfo], list[tuple[Path, str]]]:
        """-> (valid checkpoints by step, [(invalid checkpoint, why)]), checking the manifest's
        files and sizes (not their checksums: `verify` does that before a load)."""
        valid, invalid = [], []
        if not self.root.is_dir():
            return [], []
        for path in sorted(p for p in self.root.iterdir() if _STEP_DIR.match(p.name) and p.is_dir()):
            try:
                valid.append(self._read(path))
            except CheckpointInvalid as exc:
                invalid.append((path, exc.reason))
        return sorted(valid, key=lambda i: i.step), invalid

    def list(self) -> list[CheckpointInfo]:
        return self.scan()[0]

    def latest(self) -> CheckpointInfo | None:
        infos = self.list()
        return infos[-1] if infos else None

    def last_good(self) -> CheckpointInfo | None:
        good = [i for i in self.list() if i.healthy]
        return good[-1] if good else None

    def best(self) -> CheckpointInfo | None:
        scored = [i for i in self.list() if i.score is not None and i.healthy]
        return max(scored, key=lambda i: (i.score, i.step)) if scored else None

    def open(self, path: Path) -> CheckpointInfo:
        """A checkpoint at any path (e.g. `resume_from`), fully verified."""
        info = self._read(Path(path))
        self.verify(info)
        return info

    def verify(self, info: CheckpointInfo) -> None:
        """Raise CheckpointInvalid unless every file matches the manifest's size and CRC32."""
        for name, expected in info.meta["files"].items():
            file = info.path / name
            if not file.is_file():
                raise CheckpointInvalid(info.path, f"{name} is missing")
            if file.stat().st_size != expected["size"]:
                raise CheckpointInvalid(info.path, f"{name} has {file.stat().st_size} bytes, expected {expected['size']}")
            if file_crc32(file) != expected["crc32"]:
                raise CheckpointInvalid(info.path, f"{name} fails its checksum (corrupt)")

    def load_state(self, info: CheckpointInfo) -> dict[str, Any]:
        import torch

        try:
            return torch.load(info.path / STATE_FILE, weights_only=False)
        except Exception as exc:  # a file that matched its checksum but still does not load
            raise CheckpointInvalid(info.path, f"{STATE_FILE} does not load ({type(exc).__name__}: {exc})") from exc

    def _read(self, path: Path) -> CheckpointInfo:
        meta_path = path / META_FILE
        if not path.is_dir():
            raise CheckpointInvalid(path, "no such directory")
        if not meta_path.is_file():
            raise CheckpointInvalid(path, f"{META_FILE} is missing")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise CheckpointInvalid(path, f"{META_FILE} is unreadable ({type(exc).__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("files"), dict):
            raise CheckpointInvalid(path, f"{META_FILE} is not a grpo checkpoint manifest (format {FORMAT})")
        if not isinstance(meta.get("step"), int):
            raise CheckpointInvalid(path, f"{META_FILE} has no step")
        for required in (STATE_FILE, "policy/.metadata"):
            if required not in meta["files"]:
                raise CheckpointInvalid(path, f"the manifest lists no {required}")
        # A full model, or a LoRA adapter (grpo.policy.lora).
        if not {"model/config.json", "model/adapter_config.json"} & set(meta["files"]):
            raise CheckpointInvalid(path, "the manifest lists no model/config.json (or model/adapter_config.json)")
        for name, expected in meta["files"].items():
            file = path / name
            if not file.is_file():
                raise CheckpointInvalid(path, f"{name} is missing")
            if file.stat().st_size != expected.get("size"):
                raise CheckpointInvalid(path, f"{name} has {file.stat().st_size} bytes, expected {expected.get('size')}")
        return CheckpointInfo(meta["step"], path, bool(meta.get("healthy", False)), meta.get("score"), meta)

    # --- removing ---------------------------------------------------------------------------

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move an invalid checkpoint to `invalid/`, with the reason beside it. Only the newest is kept
        there: a run whose checkpoints are torn again and again (killed mid-write) would otherwise fill
        its disk with them and never save again (bench/chaos.py found it)."""
        target = self.root / "invalid" / f"{path.name}-{int(time.time() * 1000)}"
        if not self.writes:
            return target
        target.parent.mkdir(exist_ok=True)
        for older in sorted(target.parent.iterdir()):
            self._delete(older)
        os.rename(path, target)
        (target / "INVALID.txt").write_text(reason + "\n")
        fsync_dir(self.root)
        return target

    def _delete(self, path: Path) -> None:
        if not self.writes:
            return
        trash = self.root / f".trash-{path.name}"
        os.rename(path, trash)  # atomic: the checkpoint is either whole or gone
        shutil.rmtree(trash, ignore_errors=True)

    def prune(self) -> None:
        infos = self.list()
        keep = {i.path for i in infos[-max(self.cfg.keep_last, 1) :]}
        for special in (self.last_good(), self.best() if self.cfg.keep_best else None):
            if special is not None:
                keep.add(special.path)
        for info in infos:
            if info.path not in keep:
                self._delete(info.path)

    def discard_after(self, step: int) -> None:
        """After a rollback to `step`, later checkpoints were saved unhealthy: delete them."""
        for info in self.list():
            if info.step > step:
                self._delete(info.path)

    def set_aside_after(self, step: int) -> list[Path]:
        """When resuming from an older checkpoint by hand, move later ones to `abandoned/`, where
        automatic recovery never looks, rather than delete what the user may still want."""
        moved = []
        for info in self.list() if self.writes else []:
            if info.step > step:
                target = self.root / "abandoned" / f"{info.path.name}-{int(time.time())}"
                target.parent.mkdir(exist_ok=True)
                os.rename(info.path, target)
                moved.append(target)
        return moved


def load_weights(model_dir: Path, model: torch.nn.Module) -> None:
    """Load a model directory's safetensors into `model`, which must have the same architecture."""
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    weights: dict[str, torch.Tensor] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        weights.update(load_file(file))
    if not weights:
        raise FileNotFoundError(f"{model_dir} has no *.safetensors weights")
    expected = model.state_dict()
    wrong_shape = [k for k, v in weights.items() if k in expected and expected[k].shape != v.shape]
    if wrong_shape:
        k = wrong_shape[0]
        raise ValueError(f"{model_dir} does not match the model: {k} has shape {tuple(weights[k].shape)}, "
                         f"the model's is {tuple(expected[k].shape)}")
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
        fsync_dir(Path(dirpath))
