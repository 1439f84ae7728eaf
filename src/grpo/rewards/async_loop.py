"""The event loop that runs ``async def`` reward functions, as TRL's GRPOTrainer does: one loop for the
process, on a daemon thread, so a client an async reward keeps between calls (an HTTP session to an LLM
judge) stays on the loop it was made on, and a caller whose own thread runs a loop (a notebook) can wait."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable
from typing import Any

_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (the pid it was started in, the loop)


def _reward_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop[0] != os.getpid():  # a forked child has the loop but not its thread
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="async-rewards", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def wait_all(awaitables: list[Awaitable[Any]]) -> list[Any]:
    """Each awaitable's result, or the exception it raised; run together (TRL's asyncio.gather)."""

    async def together() -> list[Any]:
        return await asyncio.gather(*awaitables, return_exceptions=True)

    return asyncio.run_coroutine_threadsafe(together(), _reward_loop()).result()
