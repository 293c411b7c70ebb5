"""HTTP for every collector: one bounded read (a total deadline and a byte cap, streamed), whether a URL
flag is an http(s) URL, and whether a URL points at this host.

httpx's timeouts apply per network read, so a server that trickles a byte every second never times out,
and ``response.text`` holds the whole body however large it is. ``get_bounded`` streams the body under
one deadline for the whole exchange (connect, headers, body) and stops reading past ``max_bytes``, so a
collector's memory per read is bounded by the cap whatever the peer does.

The collector's own scrapes (every source, every interval) go through ``KeepAliveGets``: the same bounded
GET on httpx's transport layer (httpcore's HTTP/1.1 connection, one kept alive per target) over asyncio's
streams, which costs a third of an ``httpx.AsyncClient`` GET's CPU (see its docstring).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import ipaddress
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpcore
import httpx

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
T = TypeVar("T")


def remember_missing_sniffio() -> None:
    """httpcore asks ``import sniffio`` several times per request to learn it runs under asyncio; without
    sniffio installed (httpx and anyio no longer need it) each ask searches every sys.path entry on disk
    and fails: about 10 failed imports a second, a noticeable part of the collector's CPU at 1 Hz. A None
    in sys.modules is Python's own record of "no such module": the same ImportError, at once."""
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


remember_missing_sniffio()


class ServerUnreachable(ConnectionError):
    """A server did not answer usefully: refused, timed out, an HTTP error, or not the server asked for.
    Every collector's (and every sweep's) HTTP failure is one of these; the message names the URL or flag."""


class BoundedReadError(ServerUnreachable):
    """The read failed, took longer than its deadline, or the body passed the cap (message says which)."""


@dataclass(frozen=True)
class BoundedResponse:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


def _request_headers(headers: dict[str, str] | None) -> dict[str, str]:
    """The headers both readers send: the caller's, over ``Accept-Encoding: identity``. Identity so that
    the byte cap bounds what is held in memory (a compressed body could expand past it)."""
    return {"Accept-Encoding": "identity", **(headers or {})}


class BodyTooLarge(BoundedReadError):
    """An answer passed its byte cap."""


class _BodyCap:
    """The one byte cap of a streamed answer, for every reader: its declared length (``Content-Length``)
    refused up front, then what arrives counted as it arrives."""

    def __init__(self, url: str, max_bytes: int, declared: str | None) -> None:
        self.url, self.max_bytes = url, max_bytes
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise BodyTooLarge(f"{url}: body of {int(declared)} bytes is over the {max_bytes} byte limit")
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise BodyTooLarge(f"{self.url}: body is over the {self.max_bytes} byte limit")
        self.chunks.append(chunk)

    def content(self) -> bytes:
        return b"".join(self.chunks)


async def get_bounded(
    client: httpx.AsyncClient | KeepAliveGets,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    headers: dict[str, str] | None = None,
) -> BoundedResponse:
    """GET ``url``: at most ``timeout_s`` seconds in all, at most ``max_bytes`` of body (through the
    collector's ``KeepAliveGets`` or any httpx client). Raises ``BoundedReadError`` naming the URL and
    what went wrong."""
    if isinstance(client, KeepAliveGets):
        return await client.get(url, timeout_s=timeout_s, max_bytes=max_bytes, headers=headers)
    return await request_bounded(
        client, "GET", url, timeout_s=timeout_s, max_bytes=max_bytes, headers=headers
    )


async def request_bounded(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    headers: dict[str, str] | None = None,
    json: object = None,
) -> BoundedResponse:
    """``get_bounded`` for any method, with an optional JSON body (the GPU scripts' ``/generate``)."""
    hdrs = _request_headers(headers)
    try:
        async with asyncio.timeout(timeout_s):
            stream = client.stream(method, url, headers=hdrs, json=json, timeout=httpx.Timeout(timeout_s))
            async with stream as resp:
                cap = _BodyCap(url, max_bytes, resp.headers.get("content-length"))
                async for chunk in resp.aiter_bytes():
                    cap.add(chunk)
                return BoundedResponse(resp.status_code, cap.content())
    except TimeoutError:
        raise BoundedReadError(f"{url}: timed out: no complete answer within {timeout_s:g}s") from None
    except httpx.TimeoutException:
        raise BoundedReadError(f"{url}: timed out after {timeout_s:g}s") from None
    except httpx.HTTPError as exc:
        raise BoundedReadError(f"{url}: {type(exc).__name__}: {exc}") from None


# As httpx's default: a connection idle longer than this is closed rather than reused (servers close theirs
# after a few idle seconds; uvicorn's default is 5 s).
KEEPALIVE_EXPIRY_S = 5.0
_IDLE_PER_TARGET = 2  # a source reads its target one GET at a time: a spare for an overlapping caller
_USER_AGENT = "spectower"


class _AsyncioStream(httpcore.AsyncNetworkStream):
    """httpcore's network stream over an asyncio connection. httpcore's default one (anyio's) enters a
    cancel scope for every read and write; here the caller's one deadline (``asyncio.timeout`` around the
    whole GET) bounds every read, so httpcore's per-read timeouts (none are passed) are not needed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return await self._reader.read(max_bytes)
        except OSError as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            self._writer.write(buffer)
            await self._writer.drain()
        except OSError as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from None

    async def aclose(self) -> None:
        self._writer.close()

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle kept connection the peer closed (or wrote to): not reusable
            return self._reader.at_eof() or self._writer.transport.is_closing()
        names = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername"}
        return self._writer.get_extra_info(names.get(info, info))


class _StaleConnection(Exception):
    """A kept connection failed before any answer came: the peer closed it while it sat idle."""


class KeepAliveGets:
    """Bounded GETs for the collector's scrape loops: one HTTP/1.1 connection kept alive per target
    (httpcore's ``AsyncHTTP11Connection``: httpx's own transport layer) over asyncio's streams.

    Why not ``httpx.AsyncClient``: at 1 Hz per source its per-request work was the collector's largest
    cost. CPU per GET of the simulator's /metrics (61 KB), measured: 2.1 ms through the client (request and
    response models, auth, redirects, cookies; httpcore's pool scanning every connection it holds for each
    request, which grows with the number of targets; anyio's cancel scopes and lock checkpoints), 0.9 ms
    here. The contract is ``get_bounded``'s: one deadline for connect, headers and body; the byte cap
    counted as the body streams; ``Accept-Encoding: identity`` asked (a gzip or deflate answer anyway is
    decoded under the same cap, as httpx would); no proxies and no redirects (as the collector's client had
    none). A kept connection that the peer closed while it sat idle is dropped before use; when the close
    crosses the request (no answer at all), the GET is sent once more on a new connection within the same
    deadline (a GET repeats safely)."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        # by (scheme, host, port): httpcore's Origin compares equal but is not hashable
        self._idle: dict[tuple[bytes, bytes, int], list[httpcore.AsyncHTTP11Connection]] = {}
        self._ssl_context = ssl_context

    async def __aenter__(self) -> KeepAliveGets:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                await conn.aclose()

    async def get(
        self,
        url: str,
        *,
        timeout_s: float,
        max_bytes: int = DEFAULT_MAX_BODY_BYTES,
        headers: dict[str, str] | None = None,
    ) -> BoundedResponse:
        """``get_bounded``'s GET: raises ``BoundedReadError`` naming the URL and what went wrong."""
        hdrs = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in _scrape_headers(headers).items()]
        try:
            async with asyncio.timeout(timeout_s):
                try:
                    return await self._get_once(url, hdrs, max_bytes, reuse=True)
                except _StaleConnection:
                    return await self._get_once(url, hdrs, max_bytes, reuse=False)
        except TimeoutError:
            raise BoundedReadError(f"{url}: timed out: no complete answer within {timeout_s:g}s") from None
        except BoundedReadError:
            raise
        except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:  # OSError: connect
            kind = "ConnectError" if isinstance(exc, OSError) else type(exc).__name__
            raise BoundedReadError(f"{url}: {kind}: {exc}") from None
        except (httpcore.UnsupportedProtocol, httpcore.LocalProtocolError, ValueError) as exc:
            raise BoundedReadError(f"{url}: {type(exc).__name__}: {exc}") from None

    async def _get_once(
        self, url: str, headers: list[tuple[bytes, bytes]], max_bytes: int, *, reuse: bool
    ) -> BoundedResponse:
        target = httpcore.URL(url)  # parsed once, for the origin and the request
        origin = target.origin
        conn = await self._take_idle(origin) if reuse else None
        reused = conn is not None
        conn = conn or await self._connect(origin)
        answered = keep = False
        try:
            async with conn.stream("GET", target, headers=headers) as resp:
                answered = True
                cap = _BodyCap(url, max_bytes, _header(resp.headers, b"content-length"))
                inflate = _inflater(url, _header(resp.headers, b"content-encoding"))
                async for chunk in resp.aiter_stream():
                    if inflate is None:
                        cap.add(chunk)
                    else:
                        _inflate_into(cap, inflate, chunk)
                status = resp.status
            keep = conn.is_idle()
            return BoundedResponse(status, cap.content())
        except (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError) as exc:
            if reused and not answered:
                raise _StaleConnection() from exc
            raise
        finally:
            if keep:
                await self._keep(origin, conn)
            else:
                await conn.aclose()

    async def _take_idle(self, origin: httpcore.Origin) -> httpcore.AsyncHTTP11Connection | None:
        conns = self._idle.get(_key(origin))
        while conns:
            conn = conns.pop()
            if conn.is_idle() and not conn.has_expired():
                return conn
            await conn.aclose()
        return None

    async def _keep(self, origin: httpcore.Origin, conn: httpcore.AsyncHTTP11Connection) -> None:
        conns = self._idle.setdefault(_key(origin), [])
        if len(conns) < _IDLE_PER_TARGET:
            conns.append(conn)
        else:
            await conn.aclose()

    async def _connect(self, origin: httpcore.Origin) -> httpcore.AsyncHTTP11Connection:
        host = origin.host.decode("ascii")
        context: ssl.SSLContext | None = None
        if origin.scheme == b"https":
            context = self._ssl_context = self._ssl_context or httpx.create_ssl_context()
        reader, writer = await asyncio.open_connection(
            host, origin.port, ssl=context, server_hostname=host if context else None
        )
        return httpcore.AsyncHTTP11Connection(
            origin, _AsyncioStream(reader, writer), keepalive_expiry=KEEPALIVE_EXPIRY_S
        )


def _key(origin: httpcore.Origin) -> tuple[bytes, bytes, int]:
    return (origin.scheme, origin.host, origin.port)


def _scrape_headers(headers: dict[str, str] | None) -> dict[str, str]:
    """What httpx would send besides Host: Accept, a User-Agent, and ``_request_headers``."""
    return {"Accept": "*/*", "User-Agent": _USER_AGENT, **_request_headers(headers)}


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _inflater(url: str, encoding: str | None) -> Any:
    """A decoder for a body compressed although identity was asked (gzip, deflate), None for identity."""
    coding = (encoding or "identity").lower()
    if coding == "identity":
        return None
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj()
    raise BoundedReadError(f"{url}: answered Content-Encoding {encoding!r}, not identity as asked")


def _inflate_into(cap: _BodyCap, inflate: Any, chunk: bytes) -> None:
    """Decode ``chunk`` into ``cap`` at most one byte past the cap at a time (a small compressed body may
    inflate to gigabytes)."""
    try:
        cap.add(inflate.decompress(chunk, cap.max_bytes - cap.size + 1))
        while inflate.unconsumed_tail:
            cap.add(inflate.decompress(inflate.unconsumed_tail, cap.max_bytes - cap.size + 1))
    except zlib.error as exc:
        raise BoundedReadError(f"{cap.url}: a compressed body that does not decode: {exc}") from None


_WIRE_HEADERS = ("content-encoding", "content-length", "transfer-encoding")


class DeadlineCalls:
    """Blocking calls a caller waits for at most a deadline (httpx's and requests' timeouts apply per read:
    a server trickling its headers a byte a second never times out). Each call runs on a daemon thread of
    its own: a call past its deadline runs on by itself (its own read timeout bounds it) and never holds up
    the process's exit, which an executor's worker would. At most ``max_in_flight`` calls at once: while
    that many are still stuck on a peer, a new one waits for a slot within its deadline, so a peer that
    never answers cannot grow the threads without bound."""

    def __init__(self, name: str, max_in_flight: int) -> None:
        self.name = name
        self._slots = threading.BoundedSemaphore(max_in_flight)

    def call(self, timeout_s: float, fn: Callable[[], T], late: Callable[[T], None] | None = None) -> T:
        """``fn()``'s result or exception, or ``TimeoutError`` at ``timeout_s`` (the wait for a slot
        included). ``late`` gets the result of a call that ends well after its caller gave up (to close
        what it opened)."""
        deadline = time.monotonic() + timeout_s
        if not self._slots.acquire(timeout=max(0.0, timeout_s)):
            raise TimeoutError(f"no result within {timeout_s:g}s ({self.name}: earlier calls still waiting)")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result = fn()
            except BaseException as exc:  # handed to the caller, or dropped when the caller gave up
                self._slots.release()
                future.set_exception(exc)
            else:
                self._slots.release()
                future.set_result(result)

        threading.Thread(target=run, name=f"spectower-{self.name}", daemon=True).start()
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            if late is not None:
                future.add_done_callback(lambda done: _hand_late(done, late))
            raise TimeoutError(f"no result within {timeout_s:g}s") from None


def _hand_late(done: concurrent.futures.Future[T], late: Callable[[T], None]) -> None:
    """A call that ended after its caller gave up: its result to ``late`` (to close what it opened)."""
    if done.exception() is None:
        with contextlib.suppress(Exception):
            late(done.result())


# Synchronous HTTP sends (the knob client, the console's threads): headers waited for at most a deadline.
_SENDS = DeadlineCalls("send", max_in_flight=8)


def request_bounded_sync(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    headers: dict[str, str] | None = None,
    json: object = None,
) -> httpx.Response:
    """``request_bounded`` for a synchronous client (the knob client, the console's threads): the answer
    with its body read, at most ``max_bytes`` of it (``BodyTooLarge`` past that), all of it within
    ``timeout_s`` (the headers are waited for at most that long; the body is read chunk by chunk, each as
    it arrives, until the same deadline). A deadline passed raises ``httpx.ReadTimeout``; other httpx
    errors pass through for the caller to name (whether the request was sent at all matters to a knob
    write)."""
    deadline = time.monotonic() + timeout_s
    hdrs = _request_headers(headers)
    request = client.build_request(method, url, headers=hdrs, json=json, timeout=timeout_s)
    try:
        response = _SENDS.call(timeout_s, lambda: client.send(request, stream=True), late=lambda r: r.close())
    except TimeoutError:
        raise httpx.ReadTimeout(f"no answer within {timeout_s:g}s", request=request) from None
    try:
        cap = _BodyCap(url, max_bytes, response.headers.get("content-length"))
        for chunk in response.iter_bytes():  # decoded (identity asked: a server that compresses anyway)
            cap.add(chunk)
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("deadline passed while reading the answer", request=request)
    finally:
        response.close()
    # The body as read: decoded, so the headers that describe the wire form go
    kept = [(k, v) for k, v in response.headers.multi_items() if k not in _WIRE_HEADERS]
    return httpx.Response(response.status_code, headers=kept, content=cap.content(), request=request)


def check_http_url(url: str, flag: str, error: type[ValueError] = ValueError) -> str:
    """``url`` when it is an http(s) URL with a host (and, if given, a port in 1..65535), else ``error``
    naming ``flag`` (the one check of every URL flag: ``--server``, ``--plain-server``, ``--prometheus``,
    ``--gpu dcgm=URL``, ``--gpu-metrics``)."""
    try:
        parts = urlsplit(url)
        port = parts.port  # a port that is no number, or past 65535, raises here
    except ValueError as exc:  # e.g. "http://[::1": an address left open
        raise error(f"{flag} must be an http(s) URL, got {url!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise error(f"{flag} must be an http(s) URL, got {url!r}")
    if port == 0:
        raise error(f"{flag} must be an http(s) URL with a port in 1..65535, got {url!r}")
    return url


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` names this host (``localhost`` or a loopback address): only then are the server's
    files (its adaptive config) and GPUs (NVML) the ones this process can see."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
