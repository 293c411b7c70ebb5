"""Does the simulator deliver its profile? Measured from the client side, over loopback.

For every concurrency of a profile and both knob settings (spec off: ``spectower_spec_max_bs = 0``;
spec on: ``= max_running_requests``), C closed-loop clients stream ``/generate`` (``ignore_eos``, long
outputs) and the aggregate output tokens/s received during a measurement window (after a warm-up) is
compared with ``profile.output_tok_s(C, mode)``. Tokens are counted from each SSE event's
``meta_info.completion_tokens`` (events split on the blank line, per the SSE spec, not on
``str.splitlines``).

    python benchmarks/sim_fidelity.py [--profile NAME|PATH] [--window 10] [--warmup 3] [--url URL]

Without ``--url`` it starts the simulator itself (a subprocess on a free loopback port) and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from spectower.collectors.bench.errors import BenchError  # noqa: E402
from spectower.collectors.bench.sweep import parse_concurrency  # noqa: E402
from spectower.simulator.profile import Profile, load_profile  # noqa: E402

from benchmarks.simulator_process import SimulatorProcess  # noqa: E402

DEFAULT_WINDOW_S = 10.0
DEFAULT_WARMUP_S = 3.0
# Each request should last about this long, so the closed loop's between-request gaps are negligible.
TARGET_REQUEST_S = 15.0
_COMPLETION = b'"completion_tokens":'
_DIGITS = re.compile(rb"\d+")


def completion_tokens(event: bytes) -> int | None:
    """``meta_info.completion_tokens`` of one /generate SSE event, without parsing the whole JSON."""
    at = event.rfind(_COMPLETION)
    if at < 0:
        return None
    m = _DIGITS.match(event, at + len(_COMPLETION))
    return int(m.group()) if m else None


@dataclass(frozen=True)
class Measurement:
    concurrency: int
    spec_on: bool
    measured_tok_s: float
    profile_tok_s: float
    window_s: float
    tokens: int

    @property
    def error(self) -> float:
        return self.measured_tok_s / self.profile_tok_s - 1.0


def max_new_tokens_for(profile: Profile, concurrency: int, spec_on: bool) -> int:
    per_request = profile.output_tok_s(concurrency, spec_on) / concurrency
    return max(64, int(per_request * TARGET_REQUEST_S))


async def set_knob(client: httpx.AsyncClient, base_url: str, value: int, headers: dict[str, str]) -> None:
    r = await client.post(
        f"{base_url}/set_internal_state",
        json={"server_args": {"spectower_spec_max_bs": value}},
        headers=headers,
    )
    r.raise_for_status()
    if not all(r.json()):
        raise RuntimeError(f"knob refused: {r.text}")


class TokenClock:
    """Token arrivals (monotonic time, count) from every stream, for windowed rates."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []

    def add(self, n: int) -> None:
        self.events.append((time.monotonic(), n))

    def tokens_between(self, t0: float, t1: float) -> int:
        return sum(n for t, n in self.events if t0 <= t < t1)


def generate_body(max_new_tokens: int) -> dict[str, Any]:
    """What each worker streams from ``/generate``: ``max_new_tokens`` tokens, never cut short by EOS."""
    return {
        "text": "Explain speculative decoding in one paragraph.",
        "stream": True,
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True, "temperature": 0},
    }


@dataclass
class StreamTokens:
    """One /generate stream's bytes, fed as they arrive: each SSE event's ``completion_tokens`` past the
    last one seen goes to ``clock``."""

    clock: TokenClock
    buf: bytes = b""
    seen: int = 0

    def feed(self, data: bytes) -> None:
        self.buf += data
        # SSE events end with a blank line; only LF (or CR/CRLF) ends a line, never U+2028.
        while b"\n\n" in self.buf:
            event, self.buf = self.buf.split(b"\n\n", 1)
            n = completion_tokens(event)
            if n is not None and n > self.seen:
                self.clock.add(n - self.seen)
                self.seen = n


async def stream_worker(
    client: httpx.AsyncClient,
    base_url: str,
    max_new_tokens: int,
    clock: TokenClock,
    stop_at: float,
    headers: dict[str, str],
) -> None:
    body = generate_body(max_new_tokens)
    while time.monotonic() < stop_at:
        async with client.stream("POST", f"{base_url}/generate", json=body, headers=headers) as resp:
            resp.raise_for_status()
            stream = StreamTokens(clock)
            async for raw in resp.aiter_raw():
                stream.feed(raw)
                if time.monotonic() >= stop_at:
                    return


async def raw_stream_worker(
    base_url: str, max_new_tokens: int, clock: TokenClock, stop_at: float, headers: dict[str, str]
) -> None:
    """``stream_worker`` on a bare asyncio HTTP/1.1 connection (keep-alive, chunked transfer decoding).

    A lighter client than httpx, so that on a small shared machine the measurement is limited by the
    server, not by the client's per-chunk overhead.
    """
    url = httpx.URL(base_url)
    body = json.dumps(generate_body(max_new_tokens)).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (
        f"POST /generate HTTP/1.1\r\nHost: {url.host}:{url.port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        while time.monotonic() < stop_at:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1]
            if status != b"200" or b"transfer-encoding: chunked" not in head.lower():
                raise RuntimeError(f"unexpected response head: {head[:200]!r}")
            stream = StreamTokens(clock)
            while True:
                size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # end of the chunked body
                    break
                stream.feed((await reader.readexactly(size + 2))[:-2])
                if time.monotonic() >= stop_at:
                    return
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def measure(
    base_url: str,
    profile: Profile,
    concurrency: int,
    spec_on: bool,
    window_s: float,
    warmup_s: float,
    headers: dict[str, str] | None = None,
    max_running_requests: int | None = None,
) -> Measurement:
    headers = headers or {}
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=limits) as client:
        await set_knob(
            client,
            base_url,
            (max_running_requests or profile.max_running_requests) if spec_on else 0,
            headers,
        )
        clock = TokenClock()
        start = time.monotonic()
        t0 = start + warmup_s
        t1 = t0 + window_s
        n_tokens = max_new_tokens_for(profile, concurrency, spec_on)
        tasks = [
            asyncio.create_task(raw_stream_worker(base_url, n_tokens, clock, t1, headers))
            for _ in range(concurrency)
        ]
        await asyncio.gather(*tasks)
    tokens = clock.tokens_between(t0, t1)
    return Measurement(
        concurrency, spec_on, tokens / window_s, profile.output_tok_s(concurrency, spec_on), window_s, tokens
    )


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load avg {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="glm5-nvfp4-8x-rtx-pro-6000")
    ap.add_argument("--window", type=float, default=DEFAULT_WINDOW_S, help="measurement window per point (s)")
    ap.add_argument("--warmup", type=float, default=DEFAULT_WARMUP_S, help="warm-up per point (s)")
    ap.add_argument("--url", default=None, help="an already running simulator (default: start one)")
    ap.add_argument("--concurrency", default=None, help="comma-separated subset (default: the profile's)")
    args = ap.parse_args(argv)
    profile = load_profile(args.profile)
    try:  # the product's own parser of a concurrency list, as `spectower bench sweep --concurrency`
        levels = list(parse_concurrency(args.concurrency)) if args.concurrency else [
            int(c) for c in profile.concurrency]  # fmt: skip
    except BenchError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"simulator fidelity: profile {profile.name}; {machine()}")
    print(
        f"window {args.window:.0f} s after {args.warmup:.0f} s warm-up per point; "
        "client and server on one box"
    )
    print(f"{'C':>4} {'mode':>8} {'profile tok/s':>14} {'measured tok/s':>15} {'error':>8}")
    worst = 0.0
    with contextlib.ExitStack() as stack:
        base_url = args.url or stack.enter_context(SimulatorProcess(profile=args.profile)).base_url
        for c in levels:
            for spec_on in (False, True):
                m = asyncio.run(measure(base_url, profile, c, spec_on, args.window, args.warmup))
                worst = max(worst, abs(m.error))
                print(
                    f"{c:>4} {'spec_on' if spec_on else 'spec_off':>8} {m.profile_tok_s:>14.1f} "
                    f"{m.measured_tok_s:>15.1f} {m.error * 100:>7.2f}%",
                    flush=True,
                )
    print(f"worst |error|: {worst * 100:.2f}%  ({machine()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
