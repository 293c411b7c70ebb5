"""benchmarks/gpu/check_acceptance.py's failures: a server that is not up (a launch still capturing its CUDA
graphs, as on the H200 on 2026-12-01), or one whose answer passes the byte cap, is one line and exit 2, not a
traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "check_acceptance.py"


def _closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening: a connection is refused at once
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Flood(BaseHTTPRequestHandler):
    """Answers every request with 5 MiB of JSON-looking bytes, past the script's 4 MiB cap."""

    def do_POST(self) -> None:  # http.server calls it by this name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))  # the request, read whole
        body = b"[" + b"0," * (5 * 1024 * 1024 // 2) + b"0]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flood_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flood)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _run(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--server", url, "--gated"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_a_server_not_up_is_one_line_and_exit_2() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    assert _one_line(_run(url)).startswith(f"check_acceptance: {url}/generate: ConnectError")


def test_an_answer_past_the_byte_cap_is_one_line_and_exit_2(flood_url: str) -> None:
    assert _one_line(_run(flood_url)).endswith("over the 4194304 byte limit")
