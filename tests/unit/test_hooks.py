"""grpo.hooks: every hook is called at each seam in the order given; parts are wrapped in turn."""

from contextlib import contextmanager
from pathlib import Path

import torch

from grpo.hooks import Hooks, RunView, StepHooks


class Logged(StepHooks):
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wrap_collector(self, collector):
        return f"{self.name}({collector})"

    def built(self, run):
        self.log.append((self.name, "built", run.current_step()))

    def step_start(self, step: int) -> None:
        self.log.append((self.name, "start", step))

    @contextmanager
    def around_update(self, step: int):
        self.log.append((self.name, "enter", step))
        yield
        self.log.append((self.name, "exit", step))

    def step_end(self, step: int) -> None:
        self.log.append((self.name, "end", step))


def test_hooks_run_in_order_and_wrap_in_turn():
    log = []
    hooks = Hooks([Logged("a", log), Logged("b", log)])
    assert hooks.wrap_collector("c") == "b(a(c))"
    hooks.built(RunView(Path("run"), torch.nn.Linear(1, 1), None, current_step=lambda: 0))
    hooks.step_start(1)
    with hooks.around_update(1):
        log.append(("update",))
    hooks.step_end(1)
    assert log == [("a", "built", 0), ("b", "built", 0), ("a", "start", 1), ("b", "start", 1), ("a", "enter", 1),
                   ("b", "enter", 1), ("update",), ("b", "exit", 1), ("a", "exit", 1), ("a", "end", 1), ("b", "end", 1)]


def test_no_hooks_leave_everything_as_it_is():
    hooks = Hooks()
    assert hooks.wrap_backend("backend") == "backend" and not hooks.rehearse_faults
    with hooks.around_update(1):
        pass
