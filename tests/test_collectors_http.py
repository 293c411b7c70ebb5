"""collectors/http.py: the one URL-flag check every config uses, and one "server did not answer" error."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import threading
import time

import httpx
import pytest
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.sweep import SweepConfig
from spectower.collectors.bench.walk import WalkConfig
from spectower.collectors.daemon import DaemonConfig
from spectower.collectors.http import (
    BodyTooLarge,
    BoundedReadError,
    ServerUnreachable,
    check_http_url,
    request_bounded,
    request_bounded_sync,
)
from spectower.collectors.sglang.scraper import ScrapeError

from tests.drip_server import DripServer

SNIFFIO_LOOKUPS = """
import importlib.abc, sys
import spectower.collectors.http
asked = []
class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        asked.append(name)
sys.meta_path.insert(0, Spy())
try:
    import sniffio
except ImportError:
    pass
print(asked.count("sniffio"))
"""


@pytest.mark.skipif(importlib.util.find_spec("httpcore") is None, reason="httpcore is not installed")
def test_a_missing_sniffio_is_not_searched_for_again_on_every_request() -> None:
    # httpcore imports sniffio several times per request: without sniffio each import searched sys.path on
    # disk (~10 failed imports a second at 1 Hz, a visible part of the collector's CPU)
    code = "import importlib.util; print(importlib.util.find_spec('sniffio') is None)"
    if subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() != "True":
        pytest.skip("sniffio is installed here: its import is cached by Python itself")
    out = subprocess.run([sys.executable, "-c", SNIFFIO_LOOKUPS], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_check_http_url_names_the_flag() -> None:
    assert check_http_url("https://a:1", "--server") == "https://a:1"
    with pytest.raises(ValueError, match=r"^--plain-server must be an http\(s\) URL, got 'a:1'$"):
        check_http_url("a:1", "--plain-server")
    with pytest.raises(BenchError):
        check_http_url("ftp://a", "--server", BenchError)


@pytest.mark.parametrize(
    ("make", "flag"),
    [
        (lambda: DaemonConfig(servers=["a:1"]), "--server"),
        (lambda: DaemonConfig(prometheus="a:9090"), "--prometheus"),
        (lambda: DaemonConfig(gpu="dcgm=a:9400"), "--gpu dcgm=URL"),
        (lambda: SweepConfig(server="a:1").validate(), "--server"),
        (lambda: SweepConfig(server="http://a:1", plain_server="a:2").validate(), "--plain-server"),
        (lambda: WalkConfig(server="a:1", pattern=None).validate(), "--server"),  # type: ignore[arg-type]
    ],
)
def test_every_url_flag_is_the_same_check(make: object, flag: str) -> None:
    with pytest.raises(ValueError, match=rf"^{flag} must be an http\(s\) URL, got 'a:\d+'$"):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("url", "why"),
    [("http://[::1", "Invalid IPv6 URL"), ("http://127.0.0.1:99999", "Port out of range"),
     ("http://h:x1/", "Port could not be cast"), ("http://127.0.0.1:0", "a port in 1..65535")],
)  # fmt: skip
def test_a_url_that_does_not_parse_is_a_flag_error_not_a_traceback(url: str, why: str) -> None:
    # these raised ValueError from urllib deep inside a command (control get, bench load, collect)
    with pytest.raises(BenchError, match=rf"^--server must be an http\(s\) URL.*{why}"):
        check_http_url(url, "--server", BenchError)


def _echo_headers(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={k: v for k, v in request.headers.items()})


def test_both_readers_ask_for_an_uncompressed_body_and_keep_the_callers_headers() -> None:
    """The byte cap bounds memory only for an identity body: the async and the sync reader send the same
    headers (one ``_request_headers``), the caller's on top."""
    asked = {"Authorization": "Bearer k"}
    with httpx.Client(transport=httpx.MockTransport(_echo_headers)) as client:
        sync_sent = request_bounded_sync(client, "GET", "http://h/x", timeout_s=5, headers=asked).json()

    async def read_async() -> dict[str, str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(_echo_headers)) as client:
            resp = await request_bounded(client, "GET", "http://h/x", timeout_s=5, headers=asked)
        return dict(json.loads(resp.text))

    for sent in (sync_sent, asyncio.run(read_async())):
        assert sent["accept-encoding"] == "identity" and sent["authorization"] == "Bearer k"


def test_a_failed_scrape_is_a_server_that_did_not_answer() -> None:
    assert issubclass(ScrapeError, ServerUnreachable) and issubclass(BoundedReadError, ServerUnreachable)
    assert issubclass(ServerUnreachable, ConnectionError)


def test_a_trickling_answer_ends_at_the_deadline_not_a_read_timeout_later() -> None:
    server = DripServer(body_len=10_000, gap_s=0.05)
    try:
        with httpx.Client() as client:
            start = time.monotonic()
            with pytest.raises(httpx.ReadTimeout):
                request_bounded_sync(client, "GET", server.url, timeout_s=0.5)
            # a byte every 0.05 s resets httpx's own 0.5 s read timeout: only the deadline ends it
            assert time.monotonic() - start < 3.0
    finally:
        server.close()


def test_trickling_headers_end_at_the_deadline_too() -> None:
    server = DripServer(body_len=0, gap_s=0.05, drip_headers=True)
    try:
        with httpx.Client() as client:
            start = time.monotonic()
            with pytest.raises(httpx.ReadTimeout, match=r"no answer within 0\.5s"):
                request_bounded_sync(client, "GET", server.url, timeout_s=0.5)
            assert time.monotonic() - start < 3.0
    finally:
        server.close()


def test_an_answer_past_the_cap_is_refused_while_it_streams() -> None:
    server = DripServer(body_len=10_000, gap_s=0.0, chunked=True)  # 10 MiB, no length said up front
    try:
        with httpx.Client() as client, pytest.raises(BodyTooLarge, match="over the 65536 byte limit"):
            request_bounded_sync(client, "GET", server.url, timeout_s=10, max_bytes=65536)
    finally:
        server.close()


def test_a_call_past_its_deadline_never_holds_up_the_process_exit() -> None:
    """A send stuck on a trickling peer runs on after its caller gave up; on an executor's worker it would
    have kept the CLI from exiting (executors join their workers at exit) for as long as the peer trickled."""
    import subprocess
    import sys

    code = (
        "import threading\n"
        "from spectower.collectors.http import DeadlineCalls\n"
        "calls = DeadlineCalls('t', max_in_flight=2)\n"
        "try:\n"
        "    calls.call(0.2, threading.Event().wait)\n"
        "except TimeoutError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "no result within 0.2s", done.stderr


def test_calls_stuck_on_a_peer_take_their_slots_not_more_threads() -> None:
    from spectower.collectors.http import DeadlineCalls

    calls = DeadlineCalls("t", max_in_flight=2)
    never = threading.Event()
    for _ in range(2):
        with pytest.raises(TimeoutError):
            calls.call(0.05, never.wait)
    with pytest.raises(TimeoutError, match="earlier calls still waiting"):
        calls.call(0.05, lambda: 1)
    never.set()  # the peer answers at last: the slots come back
    closed: list[int] = []
    assert calls.call(5, lambda: 7, late=closed.append) == 7 and closed == []
