"""CPU cost of the collector: one SGLang server + 8 GPUs (dcgm-exporter), per collection cycle.

    python3 benchmarks/collector_bench.py [--seconds 20] [--cycles 50]

Starts the simulator (glm5 profile: 8 virtual GPUs on its dcgm-exporter port) with a closed-loop load,
then measures, in this process only (the simulator's CPU is not counted):
1. back-to-back cycles: one SGLang scrape (/metrics, /server_info every 5 s) + one dcgm scrape, parsed and
   turned into rows (storage sink into a temp SQLite file, drained each cycle): CPU seconds per cycle;
2. the daemon itself at --interval 1s for --seconds: process CPU time (all threads: asyncio loop, HTTP,
   storage writer) / cycles, and the share of one core that is at 1 Hz.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spectower.collectors.daemon import Collector, DaemonConfig  # noqa: E402
from spectower.collectors.gpu.dcgm import DcgmScraper  # noqa: E402
from spectower.collectors.http import KeepAliveGets  # noqa: E402
from spectower.collectors.sglang.scraper import SglangScraper  # noqa: E402
from spectower.collectors.sink import StorageSink  # noqa: E402
from spectower.storage import open_database  # noqa: E402

PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_simulator() -> tuple[subprocess.Popen[bytes], str, str]:
    port, gport = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spectower.simulator", "serve", "--profile", PROFILE, "--port", str(port),
         "--gpu-metrics-port", str(gport)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return proc, base, f"http://127.0.0.1:{gport}/metrics"
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("simulator did not start")


LOAD = """
import asyncio, sys, httpx
async def worker(c):
    while True:
        try:
            body = {"text": "hi", "sampling_params": {"max_new_tokens": 64}}
            await c.post(sys.argv[1] + "/generate", json=body)
        except httpx.HTTPError:
            await asyncio.sleep(0.1)
async def main():
    async with httpx.AsyncClient(timeout=30) as c:
        await asyncio.gather(*[worker(c) for _ in range(int(sys.argv[2]))])
asyncio.run(main())
"""


def start_load(base: str, concurrency: int = 8) -> subprocess.Popen[bytes]:
    """The load runs in its own process so that its CPU is not counted as the collector's."""
    return subprocess.Popen([sys.executable, "-c", LOAD, base, str(concurrency)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


async def back_to_back(base: str, dcgm_url: str, cycles: int, db_path: Path) -> tuple[float, int, int]:
    db = open_database(str(db_path))
    sink = StorageSink(db)
    async with KeepAliveGets() as client:  # as the daemon reads its targets
        sg = SglangScraper(base, client)
        dc = DcgmScraper(dcgm_url, client)
        await sg.scrape()  # warm-up (first /server_info, connections)
        c0 = time.process_time()
        n_gpu = 0
        for _ in range(cycles):
            res = await sg.scrape()
            readings, facts = await dc.scrape()
            n_gpu = len(readings)
            sink.engine(base, res)
            sink.gpus(readings, facts)
        sink.writer.flush(timeout=30)
        cpu = time.process_time() - c0
    db.close()
    return cpu / cycles, n_gpu, cycles


def daemon_at_1hz(base: str, dcgm_url: str, seconds: float, db_path: Path) -> tuple[float, int]:
    db = open_database(str(db_path))
    sink = StorageSink(db)
    collector = Collector(DaemonConfig(servers=[base], gpu=f"dcgm={dcgm_url}", interval_s=1.0), sink)

    async def main() -> float:
        task = asyncio.create_task(collector.run())
        await asyncio.sleep(2.0)  # start-up (inventory, first /server_info) not counted
        n0 = _cycles()
        c0 = time.process_time()
        await asyncio.sleep(seconds)
        cpu = time.process_time() - c0
        counted[0] = _cycles() - n0
        collector.stop()
        await task
        return cpu

    def _cycles() -> int:
        return sum(h.cycles for h in collector.health.values() if h.source == "sglang")

    counted = [0]
    cpu = asyncio.run(main())
    cycles = counted[0]
    db.close()
    return cpu, cycles


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--cycles", type=int, default=50)
    args = ap.parse_args()
    proc, base, dcgm_url = start_simulator()
    load = start_load(base)
    try:
        time.sleep(2.0)
        with tempfile.TemporaryDirectory() as tmp:
            per_cycle, n_gpu, n = asyncio.run(back_to_back(base, dcgm_url, args.cycles, Path(tmp) / "b.db"))
            cpu, cycles = daemon_at_1hz(base, dcgm_url, args.seconds, Path(tmp) / "d.db")
    finally:
        load.terminate()
        load.wait(timeout=15)
        proc.terminate()
        proc.wait(timeout=15)
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}, "
          f"Python {platform.python_version()}")  # fmt: skip
    print(
        f"setup: 1 SGLang server (simulator, {PROFILE}, 8 concurrent requests) + {n_gpu} GPUs "
        "via dcgm-exporter"
    )
    print(
        f"back-to-back: {n} cycles, CPU {per_cycle * 1000:.1f} ms per cycle (scrape + parse + rows + SQLite)"
    )
    per = cpu / max(cycles, 1)
    print(
        f"daemon at 1 Hz for {args.seconds:g} s: {cycles} cycles, CPU {cpu:.3f} s total, "
        f"{per * 1000:.1f} ms per cycle, {100 * cpu / args.seconds:.1f}% of one core"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
