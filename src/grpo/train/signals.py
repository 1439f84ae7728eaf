"""SIGTERM and SIGINT end a run cleanly: the step in progress is finished or abandoned, the state is
saved, and the process exits with its own status. Schedulers and `docker stop` send SIGTERM and wait
a few seconds before SIGKILL, so long phases check for a stop often (every generated token, every
micro-batch). A second SIGINT exits at once, without saving (grpo.train.run_state records it)."""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

from grpo.dist import Ranks


class StopRequested(Exception):
    """A signal asked the run to stop; whatever was in progress is abandoned, not trained on."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


class SignalWatch:
    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.event = threading.Event()  # engines watch this to cancel generation
        self.signum: int | None = None
        self.received_at: float | None = None  # time.monotonic() of the first signal
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait for the save
        self.signum = signum
        self.received_at = time.monotonic()
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def check(self) -> None:
        if self.signum is not None:
            raise StopRequested(self.signum)

    def check_together(self, ranks: Ranks) -> None:
        """A stop at a step's boundary; under torchrun every rank must agree, so the ranks decide
        together (a signal that reached one rank stops them all)."""
        if ranks.distributed:
            if ranks.any(self.requested):
                raise StopRequested(self.signum or signal.SIGTERM)
            return
        self.check()
