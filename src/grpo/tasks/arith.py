"""Procedural arithmetic: unlimited, deterministic, with train and held-out problems disjoint by construction."""

from __future__ import annotations

import hashlib
import random

from grpo.config import ArithConfig
from grpo.errors import ConfigError
from grpo.tasks.base import Problem, Task

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
HELD_OUT_BUCKETS = 10  # one bucket in ten of the problem space is held out


class ArithTask(Task):
    name = "arith"

    def __init__(self, cfg: ArithConfig) -> None:
        bad = [op for op in cfg.ops if op not in _OPS]
        if bad or not cfg.ops:
            raise ConfigError(f"task.arith.ops={cfg.ops}: each op must be one of {', '.join(_OPS)}")
        if not 1 <= cfg.min_digits <= cfg.max_digits:
            raise ConfigError("task.arith needs 1 <= min_digits <= max_digits")
        if cfg.num_operands < 2:
            raise ConfigError("task.arith.num_operands must be at least 2")
        self.cfg = cfg

    @property
    def num_train(self) -> int | None:
        return None

    def _draw(self, rng: random.Random) -> tuple[str, int]:
        operands = []
        for _ in range(self.cfg.num_operands):
            digits = rng.randint(self.cfg.min_digits, self.cfg.max_digits)
            operands.append(rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1))
        ops = [rng.choice(self.cfg.ops) for _ in range(self.cfg.num_operands - 1)]
        expression = str(operands[0])
        for op, operand in zip(ops, operands[1:]):
            expression += f" {op} {operand}"
        value = eval(expression, {"__builtins__": {}})  # digits and + - * only: precedence done right
        return expression, value

    @staticmethod
    def is_held_out(expression: str) -> bool:
        return int(hashlib.sha1(expression.encode()).hexdigest(), 16) % HELD_OUT_BUCKETS == 0

    def _problem(self, stream: str, index: int, want_held_out: bool) -> Problem:
        rng = random.Random(f"{self.cfg.seed}:{stream}:{index}")
        while True:
            expression, value = self._draw(rng)
            if self.is_held_out(expression) == want_held_out:
                return Problem(id=f"arith-{stream}-{index}", question=f"What is {expression}?", gold=str(value))

    def train_problem(self, index: int, seed: int) -> Problem:
        return self._problem(f"train{seed}", index, want_held_out=False)

    def eval_problems(self, max_samples: int | None) -> list[Problem]:
        problems, seen = [], set()
        index = 0
        while len(problems) < (max_samples or 500) and index < 100 * (max_samples or 500):
            problem = self._problem("eval", index, want_held_out=True)
            index += 1
            if problem.question not in seen:  # distinct problems, so accuracy is over distinct items
                seen.add(problem.question)
                problems.append(problem)
        return problems
