"""An engine is named in the engine packages and declared in the registry; everything else asks the registry."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import get_args, get_type_hints

import grpo
from grpo.config import RolloutConfig
from grpo.rollout.engines.in_process import InProcessEngine
from grpo.rollout.engines.registry import ENGINES, serves
from grpo.rollout.engines.server import make_backend

SRC = Path(next(iter(grpo.__path__))).resolve()
ENGINE_PACKAGES = ("rollout/engines", "rollout/server", "rollout/server_ext")
# The schema lists rollout.engine's choices, and checks a switch only SGLang has; other trainers' names tables
# (config/*_names.py) write their engine settings (TRL's use_vllm, verl's rollout.name) as rollout.engine's values:
# config/ sits below grpo.rollout in the import graph, so none can ask the registry.
ALLOWED = {"config/schema.py", *(p.relative_to(SRC).as_posix() for p in (SRC / "config").glob("*_names.py"))}


def engine_literals(path: Path) -> list[tuple[int, str]]:
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and node.value in ENGINES]


def test_no_module_outside_the_engine_packages_names_an_engine():
    named = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel in ALLOWED or rel.startswith(ENGINE_PACKAGES):
            continue
        if found := engine_literals(path):
            named[rel] = found
    assert named == {}


def test_the_scan_sees_every_name_and_the_schema_offers_each():
    registry = SRC / "rollout" / "engines" / "registry.py"
    assert {name for _, name in engine_literals(registry)} == set(ENGINES)
    assert set(get_args(get_type_hints(RolloutConfig)["engine"])) == {"auto", *ENGINES}


def test_every_engine_declares_what_builds_it():
    """A server engine its backend (ServerEngine drives it), an in-process one its class (grpo.train.build
    builds it through grpo.rollout.engines.in_process.make_in_process)."""
    for kind in ENGINES.values():
        assert serves(kind.name) == kind.server
        assert (kind.backend is not None, kind.engine is not None) == (kind.server, not kind.server), kind
        if kind.server:
            assert make_backend(kind.name).name == kind.name
            assert 0 < kind.gpu_fraction < 1 and kind.server_cpu_bytes > 0
        else:
            module, _, name = kind.engine.partition(":")
            assert issubclass(getattr(importlib.import_module(module), name), InProcessEngine)
    assert not serves("auto")
