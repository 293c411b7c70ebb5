"""Is the sweep's client the bottleneck? Drive N concurrent streams against the simulator and print the
client's CPU share and the achieved versus the profile's throughput.

    python3 benchmarks/bench_client.py [--profile NAME] [--concurrency 512] [--duration 20] [--mode on|off]
                                       [--api openai|generate] [--output-len 256] [--input-len 16]

The simulator runs as its own process (``--max-running-requests`` raised to the concurrency so every
stream decodes); the client is this process: one asyncio loop, httpx + httpx-sse, exactly what
``spectower bench sweep`` runs. Figures depend on the machine: it is printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spectower.collectors.bench.loadgen import run_closed_loop
from spectower.collectors.bench.prompts import PromptFactory
from spectower.collectors.bench.stats import point_figures
from spectower.collectors.bench.stream import RequestShape
from spectower.simulator.profile import load_profile

from benchmarks.simulator_process import SimulatorProcess

DEFAULT_PROFILE = "llama31-8b-1x-h100"  # the fastest shipped profile: the most chunks per second


async def drive(base_url: str, args: argparse.Namespace, admin_headers: dict[str, str]) -> dict:
    limits = httpx.Limits(
        max_connections=args.concurrency + 8, max_keepalive_connections=args.concurrency + 8
    )
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=600.0) as client:
        knob = 1_000_000 if args.mode == "on" else 0
        r = await client.post(
            "/set_internal_state",
            json={"server_args": {"spectower_spec_max_bs": knob}},
            headers=admin_headers,
        )
        r.raise_for_status()
        prompts = PromptFactory(args.input_len, as_text=args.api == "openai", seed=7)
        shape = RequestShape(api=args.api, output_len=args.output_len)
        me = psutil.Process()
        cpu0, t0 = me.cpu_times(), time.perf_counter()
        loop = await run_closed_loop(client, prompts, shape, args.concurrency, duration_s=args.duration)
        cpu1, t1 = me.cpu_times(), time.perf_counter()
    figures = point_figures(loop)
    figures["chunks"] = sum(len(r.chunk_times) for r in loop.records)
    figures["client_cpu_s"] = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    figures["wall_s"] = t1 - t0
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--mode", choices=("on", "off"), default="off")
    ap.add_argument("--api", choices=("openai", "generate"), default="openai")
    ap.add_argument("--input-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=256)
    args = ap.parse_args()

    profile = load_profile(args.profile)
    with SimulatorProcess(
        profile=args.profile, admin_key="bench", max_running_requests=args.concurrency
    ) as sim:
        sim_proc = psutil.Process(sim.pid)
        sim_cpu0 = sim_proc.cpu_times()
        figures = asyncio.run(drive(sim.base_url, args, sim.admin_headers))
        sim_cpu1 = sim_proc.cpu_times()
    sim_cpu = (sim_cpu1.user - sim_cpu0.user) + (sim_cpu1.system - sim_cpu0.system)
    wall = figures["wall_s"]
    expected = profile.output_tok_s(args.concurrency, args.mode == "on")
    steady = figures["steady_output_throughput"] or 0.0
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}, python {platform.python_version()}"
    )
    print(
        f"profile {args.profile}, spec {args.mode}, api {args.api}, {args.concurrency} concurrent streams, "
        f"input {args.input_len} / output {args.output_len} tokens, {args.duration:g} s"
    )
    print(
        f"requests completed: {figures['completed']}, failed: {figures['failed']}, "
        f"steady interval {figures['steady_duration']:.1f} s of {wall:.1f} s"
    )
    print(
        f"client CPU: {figures['client_cpu_s']:.1f} s over {wall:.1f} s = "
        f"{100 * figures['client_cpu_s'] / wall:.0f}% of one core"
    )
    per_chunk_us = 1e6 * figures["client_cpu_s"] / max(1, figures["chunks"])
    print(
        f"client CPU per streamed chunk: {per_chunk_us:.0f} us ({figures['chunks']} chunks) -> one core "
        f"parses about {1e6 / per_chunk_us:,.0f} chunks/s"
    )
    print(f"simulator CPU: {sim_cpu:.1f} s = {100 * sim_cpu / wall:.0f}% of one core")
    print(
        f"throughput: achieved {steady:.0f} tok/s (steady), {figures['output_throughput']:.0f} tok/s "
        f"(whole phase); profile {expected:.0f} tok/s; achieved/profile = {steady / expected:.3f}"
    )
    print(f"median TTFT {figures['median_ttft_ms']:.0f} ms, median ITL {figures['median_itl_ms']:.1f} ms")


if __name__ == "__main__":
    main()
