"""Upstreams a fair but hostile tester points opsagent at, each a real server on a loopback port:
one that echoes the request's headers in its error bodies (proxies and gateways do), one that
accepts connections and never answers, and a Prometheus that answers every read with no data."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Echo(BaseHTTPRequestHandler):
    status = 502

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        echoed = "; ".join(f"{k}: {v}" for k, v in self.headers.items())
        credential = (self.headers.get("authorization") or "").split(" ", 1)[-1]
        body = json.dumps(
            {
                "status": "error",
                "errorType": "bad_gateway",
                # the credential twice: inside its header, and bare (a gateway quoting what it refused)
                "error": f"upstream refused {self.command} {self.path} with headers {echoed}; rejected {credential}",
            }
        ).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """An HTTP server with ``handler`` on a free loopback port, in a thread; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name=handler.__name__)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def echoing_upstream(status: int = 502) -> Iterator[str]:
    """An HTTP server answering every request with ``status`` and a body that repeats the request's
    headers, ``Authorization`` included; yields its base URL."""
    with serving(type("Echo", (_Echo,), {"status": status})) as url:
        yield url


@contextmanager
def silent_listener() -> Iterator[str]:
    """A TCP listener that accepts every connection and never sends a byte; yields its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True, name="silent-listener")
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        listener.close()


class _EmptyPrometheus(BaseHTTPRequestHandler):
    """Prometheus' HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/) holding no series."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith("/query_range") or path.endswith("/query"):
            kind = "matrix" if path.endswith("_range") else "vector"
            data: object = {"resultType": kind, "result": []}
        elif path.endswith("/status/buildinfo"):
            data = {"version": "2.45.0"}
        else:  # series, labels
            data = []
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def empty_prometheus() -> Iterator[str]:
    """A Prometheus that answers every read, with no data; yields its URL."""
    with serving(_EmptyPrometheus) as url:
        yield url


class _Huge(BaseHTTPRequestHandler):
    """200 MB of a JSON answer, written as fast as it is read, with no length said (the connection's
    end marks the body's): the client must stop reading, not the server writing."""

    sent = 0

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("connection", "close")
        self.end_headers()
        chunk = b'{"metric": {"x": "' + b"x" * (1 << 20) + b'"}},'
        try:
            self.wfile.write(b'{"status": "success", "data": {"resultType": "vector", "result": [')
            for _ in range(200):
                self.wfile.write(chunk)
                type(self).sent += len(chunk)
        except OSError:  # the client hung up: what is being tested
            pass

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def huge_upstream() -> Iterator[tuple[str, type[_Huge]]]:
    """An upstream answering every GET with 200 MB; yields its URL and the handler (``sent``)."""
    handler = type("Huge", (_Huge,), {"sent": 0})
    with serving(handler) as url:
        yield url, handler
