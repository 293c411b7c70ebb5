"""A peer that never finishes: a real TCP server on 127.0.0.1 that trickles its answer (tests of the total
deadlines every network read has: httpx's and requests' timeouts apply per read, and a byte now and then
keeps them from firing)."""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class DripServer:
    """A real TCP server on 127.0.0.1 that answers every request with headers, then its body one byte at a
    time (each byte well inside any per-read timeout), until told to stop."""

    def __init__(
        self, body_len: int, gap_s: float, chunked: bool = False, drip_headers: bool = False
    ) -> None:
        self.drip_headers = drip_headers
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.body_len, self.gap_s, self.chunked = body_len, gap_s, chunked
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            length = "Transfer-Encoding: chunked" if self.chunked else f"Content-Length: {self.body_len}"
            if self.drip_headers:  # one header byte at a time, the headers never ending
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                with contextlib.suppress(OSError):
                    while not self.stop.wait(self.gap_s):
                        conn.sendall(b"x")
                return
            conn.sendall(f"HTTP/1.1 200 OK\r\n{length}\r\n\r\n".encode())
            with contextlib.suppress(OSError):
                for _ in range(self.body_len):
                    if self.chunked:
                        conn.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
                    else:
                        conn.sendall(b"x")
                    if self.stop.wait(self.gap_s):
                        return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


class LocalHttpServer:
    """A real threaded HTTP server on 127.0.0.1 answering with ``handler`` (a ``BaseHTTPRequestHandler``
    class), for tests of what the collectors read over the network."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test's output clean (no access log lines)."""

    def log_message(self, *a: Any) -> None:
        pass
