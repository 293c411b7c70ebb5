"""How long a fleet incident flip takes: `spectower control set --off` on N simulated replicas at once.

    python3 benchmarks/fleet_flip.py [--replicas 8] [--rounds 5]

Starts N simulators (glm5 profile, one admin key), then per round: the whole command as an operator runs
it (`spectower control set --server ... x N --off --reason ... --yes`, a fresh process: imports, the
concurrent writes, read-backs, the audit rows in a temp SQLite file), then `control release` the same way;
and, in this process, the fleet write alone (``control.fleet_ops.set_all``). Prints each figure's median
and worst over the rounds. The issue's target: 8 replicas under 2 s.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spectower.control.fleet_ops import release_all, set_all  # noqa: E402
from spectower.control.knob import KnobClient  # noqa: E402
from spectower.storage import open_database  # noqa: E402

PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"
ADMIN_KEY = "fleet-bench-key"
CLI = [sys.executable, "-m", "spectower.console.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_replicas(count: int) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    env = {**os.environ, "SPECTOWER_SIM_ADMIN_API_KEY": ADMIN_KEY}
    procs, urls = [], []
    for _ in range(count):
        port = free_port()
        argv = [sys.executable, "-m", "spectower.simulator", "serve", "--profile", PROFILE,
                "--port", str(port)]
        procs.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))  # fmt: skip
        urls.append(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 120
    for url in urls:
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not start")
            time.sleep(0.1)
    return procs, urls


def cli_seconds(args: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run([*CLI, "control", *args], cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"control {args[0]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    procs, urls = start_replicas(args.replicas)
    folder = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    db_path = folder / "audit.db"
    env = {**os.environ, "SPECTOWER_ADMIN_KEY": ADMIN_KEY, "SPECTOWER_DB": str(db_path)}
    servers = [arg for url in urls for arg in ("--server", url)]
    # "cli set, 1 replica": the same command on one server, what every CLI run costs before any fleet
    names = ("cli set", "cli release", "cli set, 1 replica", "set_all")
    figures: dict[str, list[float]] = {name: [] for name in names}
    try:
        with open_database(str(db_path)) as db:
            for _ in range(args.rounds):
                flip = ["set", *servers, "--off", "--reason", "bench", "--yes"]
                figures["cli set"].append(cli_seconds(flip, env))
                figures["cli release"].append(cli_seconds(["release", *servers, "--reason", "bench"], env))
                one = ["set", "--server", urls[0], "--off", "--reason", "bench", "--yes"]
                figures["cli set, 1 replica"].append(cli_seconds(one, env))
                cli_seconds(["release", "--server", urls[0], "--reason", "bench"], env)

                def client(url: str) -> KnobClient:
                    return KnobClient(url, ADMIN_KEY)

                started = time.monotonic()
                outcomes = set_all(db, urls, client, "off", "bench", "operator:bench")
                figures["set_all"].append(time.monotonic() - started)
                assert all(o.confirmed for o in outcomes), outcomes
                release_all(db, urls, client, "operator:bench", "bench")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=15)
    cores = os.cpu_count()
    print(f"{args.replicas} simulated replicas, {args.rounds} rounds, {cores} cores")
    for name, values in figures.items():
        print(f"  {name:18s} median {statistics.median(values):.2f} s, worst {max(values):.2f} s")


if __name__ == "__main__":
    main()
