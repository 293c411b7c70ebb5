"""collectors/http.py KeepAliveGets, the collector's scrape GET, against real local HTTP servers: the total
deadline and the byte cap hold as on httpx's path, one connection serves a target's GETs, and a kept
connection the server closed is replaced without a failed scrape."""

from __future__ import annotations

import asyncio
import gzip
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from spectower.collectors.http import (
    BodyTooLarge,
    BoundedReadError,
    BoundedResponse,
    KeepAliveGets,
    get_bounded,
)

from tests.drip_server import DripServer, LocalHttpServer, QuietHandler


class KeepAliveServer:
    """A real HTTP/1.1 server on 127.0.0.1: ``/`` answers ``body`` (gzip-encoded when ``gzip_body``),
    ``/headers`` echoes what was sent; it counts the TCP connections it accepted and, with ``close_after``,
    closes each connection after its answer without saying so (as a server whose keep-alive expired)."""

    def __init__(self, body: bytes = b"ok\n") -> None:
        self.body, self.gzip_body, self.close_after = body, False, False
        self.connections: set[int] = set()
        self.seen_headers: dict[str, str] = {}
        outer = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.connections.add(self.client_address[1])
                outer.seen_headers = {k.lower(): v for k, v in self.headers.items()}
                body = gzip.compress(outer.body) if outer.gzip_body else outer.body
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                if outer.gzip_body:
                    self.send_header("Content-Encoding", "gzip")
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = outer.close_after

        self.http = LocalHttpServer(Handler)
        self.url = self.http.url

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    s = KeepAliveServer()
    yield s
    s.close()


def _gets(url: str, n: int, **kw: Any) -> list[BoundedResponse]:
    async def go() -> list[BoundedResponse]:
        async with KeepAliveGets() as gets:
            return [await get_bounded(gets, url, **{"timeout_s": 5.0, **kw}) for _ in range(n)]

    return asyncio.run(go())


def test_one_connection_serves_every_get_of_a_target(server: KeepAliveServer) -> None:
    answers = _gets(server.url, 5, headers={"Authorization": "Bearer k"})
    assert [(a.status_code, a.text) for a in answers] == [(200, "ok\n")] * 5
    assert len(server.connections) == 1  # kept alive: no new TCP connection (and its CPU) per scrape
    sent = server.seen_headers
    assert sent["accept-encoding"] == "identity" and sent["authorization"] == "Bearer k"
    assert sent["host"] == server.url.removeprefix("http://")


def test_a_connection_the_server_closed_is_replaced_not_a_failed_get(server: KeepAliveServer) -> None:
    server.close_after = True  # no "Connection: close" said: the client finds out on reuse
    answers = _gets(server.url, 4)
    assert [a.text for a in answers] == ["ok\n"] * 4
    assert len(server.connections) == 4


def test_a_gzip_answer_is_decoded_and_its_inflated_size_capped(server: KeepAliveServer) -> None:
    server.gzip_body = True  # identity was asked; a server that compresses anyway is still read
    assert _gets(server.url, 1)[0].text == "ok\n"
    server.body = b"0" * 5_000_000  # ~5 KB compressed
    with pytest.raises(BodyTooLarge, match="over the 65536 byte limit"):
        _gets(server.url, 1, max_bytes=65536)


def test_a_trickling_answer_ends_at_the_deadline() -> None:
    drip = DripServer(body_len=10_000, gap_s=0.05)
    try:
        start = time.monotonic()
        with pytest.raises(BoundedReadError, match=r"timed out: no complete answer within 0\.5s"):
            _gets(drip.url, 1, timeout_s=0.5)
        assert time.monotonic() - start < 3.0  # a byte every 0.05 s: only the total deadline ends it
    finally:
        drip.close()


def test_trickling_headers_end_at_the_deadline_too() -> None:
    drip = DripServer(body_len=0, gap_s=0.05, drip_headers=True)
    try:
        start = time.monotonic()
        with pytest.raises(BoundedReadError, match="timed out"):
            _gets(drip.url, 1, timeout_s=0.5)
        assert time.monotonic() - start < 3.0
    finally:
        drip.close()


@pytest.mark.parametrize("chunked", [True, False])
def test_an_answer_past_the_cap_is_refused(chunked: bool) -> None:
    # chunked: no length up front, counted as it streams (10 MiB); else its Content-Length is refused
    drip = DripServer(
        body_len=10_000 if chunked else 10_000_000, gap_s=0.0 if chunked else 1.0, chunked=chunked
    )
    try:
        with pytest.raises(BodyTooLarge, match="over the 65536 byte limit"):
            _gets(drip.url, 1, timeout_s=10.0, max_bytes=65536)
    finally:
        drip.close()


def test_a_refused_connection_names_the_url() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(BoundedReadError, match=rf"^{url}/metrics: ConnectError: "):
        _gets(url + "/metrics", 1)
