"""What a sweep reads from the server besides the streams: /server_info, counters, /flush_cache."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from spectower.collectors.bench.errors import ServerUnreachable

SERVER_INFO_PATH = "/server_info"
METRICS_PATH = "/metrics"
FLUSH_PATH = "/flush_cache"
GENERATION_TOKENS = "sglang:generation_tokens"  # counter family names (the parser strips _total)
VERIFY_CALLS = "sglang:spec_verify_calls"
REALTIME_TOKENS = "sglang:realtime_tokens"  # {mode="decode"}: tokens the scheduler produced, as they happen
DEFAULT_SAMPLE_INTERVAL_S = 0.5


def auth_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def get_server_info(client: httpx.AsyncClient) -> dict[str, Any]:
    try:
        resp = await client.get(SERVER_INFO_PATH)
    except httpx.HTTPError as exc:
        raise ServerUnreachable(
            f"--server {client.base_url}: unreachable ({type(exc).__name__}: {exc})"
        ) from None
    if resp.status_code != 200:
        raise ServerUnreachable(
            f"--server {client.base_url}: {SERVER_INFO_PATH} answered HTTP {resp.status_code}; "
            "is it an SGLang server?"
        )
    try:
        info = resp.json()
    except ValueError:
        raise ServerUnreachable(f"--server {client.base_url}: {SERVER_INFO_PATH} is not JSON") from None
    if not isinstance(info, dict):
        raise ServerUnreachable(f"--server {client.base_url}: {SERVER_INFO_PATH} is not a JSON object")
    return info


def max_running_requests(info: dict[str, Any]) -> int:
    states = info.get("internal_states") or []
    for state in states:
        value = state.get("effective_max_running_requests_per_dp") if isinstance(state, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    value = info.get("max_running_requests")
    if isinstance(value, int) and value > 0:
        return value
    raise ServerUnreachable("server_info: no max_running_requests (neither internal_states nor top level)")


@dataclass(frozen=True)
class SpecCounters:
    generation_tokens: float
    verify_calls: float


async def read_spec_counters(client: httpx.AsyncClient) -> SpecCounters | None:
    """Cumulative generated tokens and verify calls, summed over label sets; None without /metrics."""
    try:
        resp = await client.get(METRICS_PATH)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    gen = verify = 0.0
    seen_verify = False
    try:
        for family in text_string_to_metric_families(resp.text):
            if family.name not in (GENERATION_TOKENS, VERIFY_CALLS):
                continue
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                if family.name == GENERATION_TOKENS:
                    gen += sample.value
                else:
                    verify += sample.value
                    seen_verify = True
    except ValueError:
        return None
    return SpecCounters(gen, verify) if seen_verify else None


def accept_length_between(before: SpecCounters | None, after: SpecCounters | None) -> float | None:
    """Tokens per verify call over the interval: the accept length of that interval alone."""
    if before is None or after is None:
        return None
    calls = after.verify_calls - before.verify_calls
    tokens = after.generation_tokens - before.generation_tokens
    if calls <= 0 or tokens <= 0:
        return None
    return tokens / calls


async def flush_cache(client: httpx.AsyncClient, admin_key: str | None) -> bool:
    """Reset the server's cumulative accept length; SGLang refuses while requests run (then False)."""
    try:
        resp = await client.post(FLUSH_PATH, headers=auth_headers(admin_key))
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


def avg_accept_length(info: dict[str, Any]) -> float | None:
    values = [
        s["avg_spec_accept_length"]
        for s in info.get("internal_states") or []
        if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), int | float)
    ]
    return sum(values) / len(values) if values else None


async def read_decode_tokens(client: httpx.AsyncClient) -> float | None:
    """``sglang:realtime_tokens_total{mode="decode"}`` summed over ranks; None when absent."""
    try:
        resp = await client.get(METRICS_PATH)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    total, seen = 0.0, False
    try:
        for family in text_string_to_metric_families(resp.text):
            if family.name != REALTIME_TOKENS:
                continue
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels.get("mode") == "decode":
                    total += sample.value
                    seen = True
    except ValueError:
        return None
    return total if seen else None


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
