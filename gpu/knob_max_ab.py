"""Does spectower's gate cost anything when it lets everything draft? The knob at max on a server with
spectower's plugins against an un-gated EAGLE-3 server (same model pair, no adaptive config, no plugin),
measured in turn with one closed-loop client, interleaved per round so drift hits both alike, each round's
prompts the same for both.

    python3 gpu/knob_max_ab.py --gated http://127.0.0.1:30000 --ungated http://127.0.0.1:30001 \\
        --concurrency 1,16,64 --rounds 2 --seconds 8 --out knob_max_vs_ungated.json

The same pieces as ``spectower bench sweep`` (prompts, streaming client, closed loop, steady-interval windows,
the ratio's interval); ``bench sweep --plain-server`` refuses a speculative server, which is why this is its
own script. Prints one line per level: gated/un-gated output tok/s with its 95 % interval. Issue #12 wants
>= 0.97. Works against the simulator too (the test does that).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.loadgen import run_closed_loop
from spectower.collectors.bench.prompts import PromptFactory
from spectower.collectors.bench.ratio import ratio_interval
from spectower.collectors.bench.stats import window_throughputs
from spectower.collectors.bench.stream import RequestShape
from spectower.collectors.bench.sweep import parse_concurrency

WINDOWS_PER_ROUND = 4
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 300.0  # a 256-token request at C=64 stays well inside


async def measure(urls: dict[str, str], levels: list[int], rounds: int, seconds: float, output_len: int,
                  input_len: int, transports: dict[str, httpx.AsyncBaseTransport] | None = None,
                  ) -> dict[str, Any]:  # fmt: skip
    """Both servers at each level, ``rounds`` times in turn; ``transports`` (per name, for tests) carry the
    requests instead of httpx's own."""
    shape = RequestShape(api="generate", output_len=output_len)
    prompts = PromptFactory(input_len, as_text=False)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    limits = httpx.Limits(max_connections=max(levels) + 4)
    clients = {name: httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits,
                                       transport=(transports or {}).get(name))
               for name, url in urls.items()}  # fmt: skip
    windows: dict[int, dict[str, list[float]]] = {c: {name: [] for name in urls} for c in levels}
    index = 0
    try:
        for c in levels:
            for r in range(rounds):
                # alternate which server goes first, so neither always follows the other's warm cache
                order = list(urls) if r % 2 == 0 else list(reversed(urls))
                # both servers get the same prompts in a round: with the constructed pair a prompt's
                # acceptance is its own, and a 7 s window at C=1 holds only a dozen requests
                served = 0
                for name in order:
                    loop = await run_closed_loop(clients[name], prompts, shape, c, duration_s=seconds,
                                                 first_index=index)  # fmt: skip
                    served = max(served, len(loop.records))
                    got = window_throughputs(loop, WINDOWS_PER_ROUND)
                    windows[c][name].extend(got)
                    mean = sum(got) / len(got) if got else 0.0
                    print(f"C={c} round {r + 1} {name}: {mean:.1f} tok/s", flush=True)
                index += served
    finally:
        for client in clients.values():
            await client.aclose()
    rows = []
    for c in levels:
        ratio, lo, hi = ratio_interval(windows[c]["gated"], windows[c]["ungated"])
        rows.append({"concurrency": c, "ratio": ratio, "lo": lo, "hi": hi,
                     "gated_tok_s": windows[c]["gated"], "ungated_tok_s": windows[c]["ungated"]})  # fmt: skip
        print(f"C={c}: knob at max / un-gated {ratio:.3f} ({lo:.3f}-{hi:.3f})", flush=True)
    return {"gated": urls["gated"], "ungated": urls["ungated"], "rounds": rounds, "seconds": seconds,
            "output_len": output_len, "input_len": input_len, "levels": rows}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--gated", required=True, help="the server with spectower's plugins (knob at max)")
    parser.add_argument("--ungated", required=True, help="the same pair served by EAGLE-3 without the plugin")
    parser.add_argument("--concurrency", default="1,16,64", help="levels, as bench sweep's --concurrency")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0, help="per server, level and round")
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        raise SystemExit("--rounds must be >= 1 and --seconds > 0")
    try:
        levels = list(parse_concurrency(args.concurrency))  # the sweep's own parser: one line naming the flag
    except BenchError as exc:
        raise SystemExit(str(exc)) from None
    urls = {"gated": args.gated.rstrip("/"), "ungated": args.ungated.rstrip("/")}
    result = asyncio.run(measure(urls, levels, args.rounds, args.seconds, args.output_len, args.input_len))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
