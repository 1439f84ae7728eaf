"""The HTTP client's retry, timeout, garbage and cancellation paths, against a real local server."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grpo.rollout.server.client import HttpClient, ServerError


class Scripted(BaseHTTPRequestHandler):
    """Answers each request from the server's script: (status, body) or "block" (until released)."""

    def do_GET(self) -> None:
        server = self.server
        with server.lock:
            server.requests += 1
            action = server.script.pop(0) if server.script else (200, {"ok": True})
        if action == "block":
            server.blocked.set()
            server.release.wait(10)
            return
        status, body = action
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    httpd.lock, httpd.requests, httpd.script = threading.Lock(), 0, []
    httpd.blocked, httpd.release = threading.Event(), threading.Event()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.release.set()
    httpd.shutdown()


def client_for(httpd, **kwargs) -> HttpClient:
    delays: list[float] = []
    client = HttpClient(f"http://127.0.0.1:{httpd.server_address[1]}", kwargs.pop("timeout_s", 5.0),
                        kwargs.pop("max_concurrency", 4), sleep=delays.append, **kwargs)
    client.delays = delays
    return client


def test_busy_answers_are_retried_with_growing_backoff(server):
    server.script = [(503, {"error": "busy"}), (429, {"error": "slow down"}), (200, {"answer": 42})]
    client = client_for(server, retries=2, backoff_s=0.5)
    assert client.request("GET", "/x") == {"answer": 42}
    assert server.requests == 3
    assert len(client.delays) == 2 and 0.5 <= client.delays[0] < 1.0 and 1.0 <= client.delays[1] < 2.0


def test_retries_run_out_with_the_last_error(server):
    server.script = [(503, {"error": "busy"})] * 3
    with pytest.raises(ServerError) as info:
        client_for(server, retries=1).request("GET", "/x")
    assert info.value.kind == "http" and info.value.status == 503 and server.requests == 2


def test_a_client_error_is_not_retried(server):
    server.script = [(400, {"error": {"message": "bad sampling params"}})]
    with pytest.raises(ServerError, match="HTTP 400: .*bad sampling params") as info:
        client_for(server, retries=3).request("GET", "/x")
    assert info.value.kind == "http" and server.requests == 1


def test_a_timeout_is_reported_and_never_retried(server):
    server.script = ["block"]
    client = client_for(server, retries=3, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(ServerError) as info:
        client.request("GET", "/x")
    assert info.value.kind == "timeout" and time.monotonic() - started < 3
    assert server.requests == 1


def test_malformed_json_is_garbage(server):
    server.script = [(200, b'{"text": "abc", "meta_info": {')]
    with pytest.raises(ServerError) as info:
        client_for(server).request("GET", "/x")
    assert info.value.kind == "garbage"


def test_a_refused_connection_is_retried_then_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    delays: list[float] = []
    client = HttpClient(f"http://127.0.0.1:{port}", 2.0, 2, retries=2, sleep=delays.append)
    with pytest.raises(ServerError) as info:
        client.request("GET", "/health")
    assert info.value.kind == "connect" and len(delays) == 2


def test_cancel_all_ends_requests_in_flight_at_once(server):
    server.script = ["block", "block"]
    client = client_for(server, timeout_s=30)
    outcomes: list[str] = []

    def call() -> None:
        try:
            client.request("GET", "/generate")
            outcomes.append("answered")
        except ServerError as exc:
            outcomes.append(exc.kind)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    assert server.blocked.wait(5)
    while server.requests < 2:  # both requests reached the server
        server.blocked.wait(0.05)
    started = time.monotonic()
    client.cancel_all()
    for t in threads:
        t.join(5)
    assert outcomes == ["cancelled", "cancelled"] and time.monotonic() - started < 2


def test_map_keeps_order_and_limits_concurrency(server):
    server.script = [(200, {"i": i}) for i in range(8)]
    client = client_for(server, max_concurrency=3)
    results = client.map(lambda i: client.request("GET", f"/{i}")["i"], range(8))
    assert sorted(results) == list(range(8)) and client.pool._max_workers == 3
