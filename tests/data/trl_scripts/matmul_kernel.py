"""Rewards in the shape of Unsloth's gpt-oss (20B) GRPO notebook, which asks for a fast pure-Python `matmul`: the
function is taken out of the completion's backticks, rewarded for compiling (1.0, -0.5 where it does not, -2.0 where
there is none or it imports beyond the standard library), for using the standard library alone (1.0, else -20.0), and
for matching numpy's product (graded by the largest and the mean squared error). None of them reads a data column.
Modelled on https://github.com/unslothai/notebooks/blob/bdda2efc7ad5ae129ea63cd2065d23c391406283/python_scripts/gpt-oss-(20B)-GRPO.py;
written here, not copied. The notebook's matrices are drawn with a fresh random seed each call and its `speed_check`
times the kernel: here the matrices are drawn from a fixed seed and the timing reward is left out, so that two calls
on one batch agree."""

from __future__ import annotations

import ast
import sys

import numpy as np

EPSILON = float(np.finfo(np.float64).eps)


def _function(text: str) -> str | None:
    """The `def matmul(A, B):` inside the first pair of triple backticks, None without one."""
    if text.count("```") < 2:
        return None
    first = text.find("```") + 3
    body = text[first:text.find("```", first)].strip().removeprefix("python\n")
    body = body[body.find("def"):]
    return body if body.startswith("def matmul(A, B):") else None


def _stdlib_only(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    modules = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    modules += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    return all(name.split(".")[0] in sys.stdlib_module_names for name in modules)


def _compiled(source: str):
    scope: dict = {}
    exec(compile(source, "<completion>", "exec"), {"__builtins__": __builtins__}, scope)  # noqa: S102 -- the task
    return scope["matmul"]


def kernel_compiles_reward(completions, **kwargs) -> list[float]:
    scores = []
    for completion in completions:
        source = _function(completion[0]["content"])
        if source is None or not _stdlib_only(source):
            scores.append(-2.0)
            continue
        try:
            _compiled(source)
        except Exception:  # noqa: BLE001 -- the notebook's own contract: code that fails to build scores -0.5
            scores.append(-0.5)
            continue
        scores.append(1.0)
    return scores


def stdlib_only_reward(completions, **kwargs) -> list[float]:
    sources = [_function(completion[0]["content"]) for completion in completions]
    return [1.0 if source is not None and _stdlib_only(source) else -20.0 for source in sources]


def _graded(error: float) -> float:
    for bound, score in ((3, -3.0), (2, -2.5), (1, -2.0), (0.5, -1.0), (100 * EPSILON, 0.0), (EPSILON, 1.0)):
        if error >= bound:
            return score
    return 3.0


def kernel_correct_reward(completions, **kwargs) -> list[float]:
    rng = np.random.RandomState(3407)
    a, b = rng.uniform(-10, 10, size=(5, 4)), rng.uniform(-10, 10, size=(4, 3))
    scores = []
    for completion in completions:
        source = _function(completion[0]["content"])
        if source is None or not _stdlib_only(source):
            scores.append(0.0)
            continue
        try:
            product = np.array(_compiled(source)(a.tolist(), b.tolist()), dtype=float)
        except Exception:  # noqa: BLE001 -- the notebook's own contract: a kernel that raises scores -2.0
            scores.append(-2.0)
            continue
        if product.shape != (a.shape[0], b.shape[1]):  # the notebook's error of 5 on both measures
            scores.append(2 * _graded(5.0))
            continue
        difference = product - a @ b
        scores.append(_graded(float(np.amax(difference))) + _graded(float(np.mean(np.square(difference)))))
    return scores
