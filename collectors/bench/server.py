"""What a sweep (and the load walker) reads from the server besides the streams: ``/server_info``, what it
serves right now (``/v1/loads``), its counters (``/metrics``), and ``/flush_cache``.

Through the collectors' own parts: one bounded GET (collectors.http: a deadline and a byte cap, whatever the
sweep's long request timeout is), the collectors' parsers (collectors.sglang: server_info, loads, metrics,
so TP/PP ranks of one DP group are counted once) and the collectors' keys (collectors.auth).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

from ..auth import auth_headers
from ..http import BoundedReadError, ServerUnreachable, get_bounded, request_bounded
from ..promtext import MetricsParseError
from ..sglang.loads import LoadsError, parse_loads_json
from ..sglang.metrics import MetricsSnapshot, parse_metrics
from ..sglang.server_info import ServerInfo, ServerInfoError, parse_server_info

SERVER_INFO_PATH = "/server_info"
LOADS_PATH = "/v1/loads?include=core&format=json"
METRICS_PATH = "/metrics"
FLUSH_PATH = "/flush_cache"
FLUSH_MAX_BYTES = 64 * 1024  # /flush_cache answers a line of text
READ_TIMEOUT_S = 10.0  # a whole answer; /server_info and /metrics take milliseconds on a healthy server
# collectors.sglang.metrics counter keys (summed over label sets within a DP group, once per DP group)
GENERATION_TOKENS = "generation_tokens_total"
VERIFY_CALLS = "spec_verify_calls_total"
DECODE_TOKENS = "realtime_tokens_total:decode"  # tokens the scheduler produced in decode, as they happen
DEFAULT_SAMPLE_INTERVAL_S = 0.5


async def get_server_info(client: httpx.AsyncClient) -> ServerInfo:
    """The server's ``/server_info``; ``ServerUnreachable`` naming --server when it cannot be read or is not
    an SGLang server's."""
    where = f"--server {client.base_url}"
    try:
        resp = await get_bounded(client, SERVER_INFO_PATH, timeout_s=READ_TIMEOUT_S)
    except BoundedReadError as exc:
        raise ServerUnreachable(f"{where}: unreachable ({exc})") from None
    if resp.status_code != 200:
        raise ServerUnreachable(
            f"{where}: {SERVER_INFO_PATH} answered HTTP {resp.status_code}; is it an SGLang server?"
        )
    try:
        return parse_server_info(json.loads(resp.content))
    except ValueError as exc:  # not JSON, or ServerInfoError: not a server_info object
        why = str(exc) if isinstance(exc, ServerInfoError) else f"{SERVER_INFO_PATH} is not JSON"
        raise ServerUnreachable(f"{where}: {why}") from None


async def requests_in_flight(client: httpx.AsyncClient) -> int | None:
    """Requests running + waiting on the server now, over its DP ranks (None when /v1/loads cannot tell)."""
    try:
        resp = await get_bounded(client, LOADS_PATH, timeout_s=READ_TIMEOUT_S)
    except BoundedReadError:
        return None
    if resp.status_code != 200:
        return None
    try:
        loads = parse_loads_json(json.loads(resp.content))
    except (ValueError, LoadsError):
        return None
    return int(sum((r.num_running_reqs or 0) + (r.num_waiting_reqs or 0) for r in loads.ranks))


async def _metrics(client: httpx.AsyncClient) -> MetricsSnapshot | None:
    """One /metrics scrape through the collector's parser; None without /metrics (or a bad body)."""
    try:
        resp = await get_bounded(client, METRICS_PATH, timeout_s=READ_TIMEOUT_S)
    except BoundedReadError:
        return None
    if resp.status_code != 200:
        return None
    try:
        return parse_metrics(resp.text)
    except MetricsParseError:
        return None


@dataclass(frozen=True)
class SpecCounters:
    generation_tokens: float
    verify_calls: float


async def read_spec_counters(client: httpx.AsyncClient) -> SpecCounters | None:
    """Cumulative generated tokens and verify calls over the DP ranks; None without verify counters."""
    snap = await _metrics(client)
    if snap is None:
        return None
    ranks = snap.ranks.values()
    calls = [r.counters[VERIFY_CALLS] for r in ranks if VERIFY_CALLS in r.counters]
    if not calls:
        return None
    return SpecCounters(sum(r.counters.get(GENERATION_TOKENS, 0.0) for r in ranks), sum(calls))


async def read_decode_tokens(client: httpx.AsyncClient) -> float | None:
    """``sglang:realtime_tokens_total{mode="decode"}`` summed over DP ranks; None when absent."""
    snap = await _metrics(client)
    ranks = snap.ranks.values() if snap is not None else ()
    values = [r.counters[DECODE_TOKENS] for r in ranks if DECODE_TOKENS in r.counters]
    return sum(values) if values else None


async def flush_cache(client: httpx.AsyncClient, admin_key: str | None) -> bool:
    """Reset the server's cumulative accept length; SGLang refuses while requests run (then False)."""
    try:
        resp = await request_bounded(client, "POST", FLUSH_PATH, timeout_s=READ_TIMEOUT_S,
                                     max_bytes=FLUSH_MAX_BYTES, headers=auth_headers(admin_key))  # fmt: skip
    except BoundedReadError:
        return False
    return resp.status_code == 200


class DecodeSampler:
    """Samples the server's decode-token counter while a point runs: the server's own view of its
    throughput, to tell a slow server from a slow client (the two must agree when the client keeps up)."""

    def __init__(self, client: httpx.AsyncClient, interval_s: float = DEFAULT_SAMPLE_INTERVAL_S) -> None:
        self._client = client
        self._interval = interval_s
        self.samples: list[tuple[float, float]] = []  # (perf_counter, cumulative decode tokens)

    async def run(self) -> None:
        while True:
            value = await read_decode_tokens(self._client)
            if value is None:
                return
            self.samples.append((time.perf_counter(), value))
            await asyncio.sleep(self._interval)

    def rate_between(self, a: float, b: float) -> float | None:
        """Decode tok/s over the samples that fall inside [a, b] (None with fewer than two)."""
        inside = [(t, v) for t, v in self.samples if a <= t <= b]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
