"""`grpo export`: a checkpoint's model as a directory to use outside grpo.

A full fine-tuning checkpoint's `model/` already loads with `AutoModelForCausalLM.from_pretrained`
and is copied. A LoRA checkpoint's `model/` is an adapter: copied as it is, or with `merged`, the base
is rebuilt, checked against the hash the adapter was trained on, and written with the adapter merged
in, as a plain model. The output is written aside and renamed into place, so it is whole or absent.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging

from grpo.config import CheckpointConfig
from grpo.errors import ConfigError
from grpo.policy import lora
from grpo.rundir.checkpoints import CheckpointInvalid, CheckpointStore


def export_checkpoint(checkpoint: Path, out: Path, merged: bool) -> str:
    """Write `checkpoint`'s model to `out` (which must not exist). -> what was written, in one line."""
    checkpoint, out = Path(checkpoint), Path(out)
    if out.exists():
        raise ConfigError(f"--out {out} already exists; name a new directory")
    try:
        info = CheckpointStore(checkpoint.parent, CheckpointConfig()).open(checkpoint)  # every file's checksum
    except CheckpointInvalid as exc:
        raise ConfigError(f"--checkpoint {checkpoint} is not a usable checkpoint: {exc.reason}"
                          f"{_checkpoints_inside(checkpoint)}") from None
    adapter = lora.is_adapter_dir(info.model_dir)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if adapter and merged:
            # The libraries' loading bars and deprecation notices say nothing the user can act on here.
            hf_logging.disable_progress_bar()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", FutureWarning)
                try:
                    model, tokenizer = lora.load_adapted(info.model_dir, torch.device("cpu"))
                except ValueError as exc:  # the base is not the one the adapter was trained on
                    raise ConfigError(f"--checkpoint {checkpoint}: {exc}") from None
                lora.save_merged(model, tmp)
            tokenizer.save_pretrained(tmp)
            what = "the LoRA adapter merged into its base: loads with AutoModelForCausalLM.from_pretrained"
        else:
            shutil.copytree(info.model_dir, tmp)
            what = "the full model: loads with AutoModelForCausalLM.from_pretrained"
            if adapter:
                what = (f"the LoRA adapter: loads with peft's AutoPeftModelForCausalLM.from_pretrained('{out}'), its "
                        f"base from {_name_the_base(tmp, out)} (--merged writes a plain model)")
        _honour_umask(tmp)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return f"wrote {out}: {what}"


def _name_the_base(tmp: Path, out: Path) -> str:
    """A base built from the config alone (model.name=tiny) is saved in the adapter's base/ and named by
    nothing in adapter_config.json: named there as `out`'s, so that PEFT finds it. -> the base's name."""
    config_path = tmp / lora.ADAPTER_CONFIG
    config = json.loads(config_path.read_text())
    if not config.get("base_model_name_or_path") and (tmp / lora.BASE_DIR).is_dir():
        config["base_model_name_or_path"] = str(out.absolute() / lora.BASE_DIR)
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config["base_model_name_or_path"]


def _checkpoints_inside(path: Path) -> str:
    """A run directory given for a checkpoint: the checkpoints it holds, to name one of."""
    root = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if not root.is_dir():
        return ""
    found = [str(info.path) for info in CheckpointStore(root, CheckpointConfig()).list()]
    if not found:
        return ""
    return f"; {path} holds checkpoints: give one of {', '.join(found)}"


def _honour_umask(root: Path) -> None:
    """Files as the user's umask makes them (checkpoint files are written owner-only), so a model
    server run by another user can read the export."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
