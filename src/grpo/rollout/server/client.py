"""An HTTP client for inference servers: JSON in and out, a concurrency limit, timeouts, retries
with backoff for answers that mean "busy, try again", and cancellation of every request in flight
(used when the server is restarted: nothing may wait on a dead process).

One connection per request keeps cancellation simple (closing its socket ends the call) and costs
nothing that matters on loopback next to generation.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, TypeVar
from urllib.parse import urlparse

from grpo.rollout.server.diagnosis import one_line

T = TypeVar("T")
R = TypeVar("R")
RETRY_STATUSES = {429, 502, 503}


class ServerError(Exception):
    """One request failed. `kind` says how: connect, timeout, http, garbage or cancelled."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.status = kind, status


class HttpClient:
    def __init__(self, base_url: str, timeout_s: float, max_concurrency: int, retries: int = 2,
                 backoff_s: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> None:
        parsed = urlparse(base_url)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"server url {base_url!r} must look like http://HOST:PORT")
        self.base_url, self.host, self.port = base_url, parsed.hostname, parsed.port
        self.timeout_s, self.retries, self.backoff_s, self.sleep = timeout_s, retries, backoff_s, sleep
        self.pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="grpo-http")
        self._lock = threading.Lock()
        self._in_flight: set[http.client.HTTPConnection] = set()
        self._epoch = 0  # bumped by cancel_all: a request that began before it ends as cancelled
        self._jitter = random.Random(0)

    def request(self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None,
                retries: int | None = None) -> Any:
        """-> the decoded JSON answer (or text, for a non-JSON 200). Retries 429/502/503 and
        refused or reset connections with exponential backoff; never retries a timeout."""
        retries = self.retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                return self._once(method, path, body, timeout_s or self.timeout_s)
            except ServerError as exc:
                retryable = exc.kind == "connect" or (exc.kind == "http" and exc.status in RETRY_STATUSES)
                if not retryable or attempt == retries:
                    raise
                self.sleep(self.backoff_s * 2**attempt * (1 + self._jitter.random()))
        raise AssertionError("unreachable")

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """fn over items, at most `max_concurrency` at a time; results in order."""
        return list(self.pool.map(fn, items))

    def cancel_all(self) -> None:
        with self._lock:
            self._epoch += 1
            doomed = list(self._in_flight)
        for conn in doomed:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.cancel_all()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _once(self, method: str, path: str, body: Any, timeout_s: float) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        with self._lock:
            epoch = self._epoch
            self._in_flight.add(conn)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (socket.timeout, TimeoutError) as exc:
            raise ServerError("timeout", f"{method} {path}: no answer in {timeout_s:g}s") from exc
        except (ConnectionError, OSError, http.client.HTTPException) as exc:
            if self._epoch != epoch:
                raise ServerError("cancelled", f"{method} {path}: cancelled (server restarting)") from exc
            raise ServerError("connect", f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        finally:
            with self._lock:
                self._in_flight.discard(conn)
            conn.close()
        if self._epoch != epoch:
            raise ServerError("cancelled", f"{method} {path}: cancelled (server restarting)")
        text = raw.decode("utf-8", errors="replace")
        if response.status >= 400:
            raise ServerError("http", f"{method} {path}: HTTP {response.status}: {one_line(text)}", response.status)
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            if "json" in (response.getheader("Content-Type") or ""):
                raise ServerError("garbage", f"{method} {path}: malformed JSON: {one_line(text, 120)!r}") from None
            return text
