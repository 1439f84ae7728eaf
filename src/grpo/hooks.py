"""The seams of a training run that an entry point may fill from outside the production paths: parts wrapped as
they are built (a server engine's backend, the rollout collector), and calls at named points of each
step. grpo.faults rehearses failures through them (grpo.entry installs it when `testing.faults` asks);
tests watch and disturb whole runs through them instead of patching the loop's methods.

A hook's step points run on the loop's thread, in the order the hooks were given; each method leaves
the run as it is unless overridden. Once the run is built, a hook is handed a `RunView`: the little of the
run that hooks read, not the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager

if TYPE_CHECKING:
    import torch

    from grpo.rollout.collector import RolloutCollector
    from grpo.rollout.engines.server import ServerEngine
    from grpo.rollout.server.backend import Backend


@dataclass(frozen=True)
class RunView:
    """What hooks see of a built run."""

    run_dir: Path
    model: torch.nn.Module  # the policy's model: the weights the update changes (a LoRA model: its adapters)
    server_engine: ServerEngine | None  # the servers' engine on the rank holding it (None: embedded, another rank)
    current_step: Callable[[], int]  # the run's last step done (after a rollback, the one it went back to)


class StepHooks:
    rehearses_faults = False  # True for the hooks that carry out `testing.faults` (grpo.faults)

    def wrap_backend(self, backend: Backend) -> Backend:
        """A server engine's backend, before the engine is built on it."""
        return backend

    def wrap_collector(self, collector: RolloutCollector) -> RolloutCollector:
        """The rollout collector, before the rollout queue is built on it (it may run on the queue's worker)."""
        return collector

    def built(self, run: RunView) -> None:
        """Every part is built and the run's state restored."""

    def step_start(self, step: int) -> None:
        """Before the step's rollout phase."""

    def after_rollout(self, step: int) -> None:
        """The step's batch is in hand, before its checks."""

    def around_update(self, step: int) -> ContextManager[object]:
        """Entered around the policy update (not entered when the step trains nothing)."""
        return nullcontext()

    def before_record(self, step: int) -> None:
        """Before the step's metrics line and checkpoint are written."""

    def step_end(self, step: int) -> None:
        """The step is recorded, saved if due, and the guard's verdict acted on."""


class Hooks:
    """The run's hooks, called in turn."""

    def __init__(self, hooks: Sequence[StepHooks] = ()) -> None:
        self.hooks = list(hooks)

    @property
    def rehearse_faults(self) -> bool:
        return any(h.rehearses_faults for h in self.hooks)

    def wrap_backend(self, backend: Backend) -> Backend:
        for hook in self.hooks:
            backend = hook.wrap_backend(backend)
        return backend

    def wrap_collector(self, collector: RolloutCollector) -> RolloutCollector:
        for hook in self.hooks:
            collector = hook.wrap_collector(collector)
        return collector

    def built(self, run: RunView) -> None:
        self._each("built", run)

    def step_start(self, step: int) -> None:
        self._each("step_start", step)

    def after_rollout(self, step: int) -> None:
        self._each("after_rollout", step)

    @contextmanager
    def around_update(self, step: int) -> Iterator[None]:
        with ExitStack() as stack:
            for hook in self.hooks:
                stack.enter_context(hook.around_update(step))
            yield

    def before_record(self, step: int) -> None:
        self._each("before_record", step)

    def step_end(self, step: int) -> None:
        self._each("step_end", step)

    def _each(self, point: str, *args: Any) -> None:
        for hook in self.hooks:
            getattr(hook, point)(*args)
