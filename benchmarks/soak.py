"""Soak the demo: run `spectower demo` for N minutes and report what would go wrong over days.

    python3 benchmarks/soak.py [--minutes 30] [--browser] [--profile NAME] [--dir DIR]
                                [--estimate-mib-per-day X]

``--browser`` keeps a headless Chromium on the console (moving to the next page every minute), so the
console's memory includes live sessions and its auto-refreshing charts; without it nobody renders a page.

Prints, with the machine it ran on:
1. each child's memory (RSS of the child and its descendants) after start-up and at the end, and the change
   (target: flat within 10%);
2. the database's growth (pages as a reader sees them, WAL included), rows added per table, bytes per sample,
   and that rate extrapolated to a day, beside storage's per-day estimate (``--estimate-mib-per-day``, the
   figure ``benchmarks/storage_bench.py`` prints in [4], for 1 server + 8 GPUs at 1 Hz);
3. every error line the children logged (target: none).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MINUTES = 30.0
WARMUP_S = 30.0  # after every child is up: imports and first pages settle before the first memory figure
START_TIMEOUT_S = 240.0
CHILDREN = ("sim", "collect", "policy", "load", "console")
TABLES = ("engine_sample", "gpu_sample", "gpu_process_sample", "control_event", "collection_gap")
ERROR_LINE = re.compile(r"Traceback|\bERROR\b|\bCRITICAL\b|\berror:|Exception\b")
FLAT = 0.10
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
PAGES = ("", "speculation", "gpus", "control")  # overview first
DAY_S = 86_400.0


def machine() -> str:
    load = os.getloadavg()
    mem = psutil.virtual_memory()
    return (
        f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.1f}/{load[1]:.1f}, "
        f"{mem.total / 2**30:.0f} GiB RAM ({mem.available / 2**30:.1f} free), "
        f"Python {platform.python_version()}"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss(pid: int) -> int:
    """Bytes resident for the process and everything it started."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def db_figures(db: Path) -> tuple[int, dict[str, int]]:
    """(bytes as a reader sees the database, rows per table)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        rows = {}
        for table in TABLES:
            try:
                rows[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            except sqlite3.Error:
                rows[table] = 0
    return pages * size, rows


def wait_up(folder: Path, port: int, demo: subprocess.Popen[bytes]) -> dict[str, int]:
    deadline = time.monotonic() + START_TIMEOUT_S
    pids_file = folder / "pids.json"
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            sys.exit(f"the demo exited with {demo.returncode}; see {folder}/demo.out")
        pids = json.loads(pids_file.read_text()) if pids_file.exists() else {}
        if set(CHILDREN) <= set(pids):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=3).status_code == 200:
                    return {k: int(v) for k, v in pids.items()}
        time.sleep(1)
    sys.exit(f"the demo did not come up within {START_TIMEOUT_S:g} s; see {folder}")


class Browser:
    """A headless Chromium on the console; ``next_page()`` moves on (the charts refresh on their own)."""

    def __init__(self, base: str) -> None:
        from playwright.sync_api import sync_playwright

        self.base = base
        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        self.page = self._browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(120_000)
        self.visits = 0
        self.failures = 0
        self.next_page()

    def next_page(self) -> None:
        path = PAGES[self.visits % len(PAGES)]
        self.visits += 1
        try:
            self.page.goto(f"{self.base}/{path}")
            self.page.wait_for_timeout(3000)
        except Exception as exc:  # a slow page is a figure to report, not a reason to stop the soak
            self.failures += 1
            print(f"  browser: /{path} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._browser.close()
        with contextlib.suppress(Exception):
            self._pw.stop()


def error_lines(folder: Path) -> list[str]:
    found = []
    for log in [*sorted(folder.glob("*.log")), folder / "demo.out"]:
        if not log.exists():
            continue
        for n, line in enumerate(log.read_text(errors="replace").splitlines(), 1):
            if ERROR_LINE.search(line):
                found.append(f"{log.name}:{n}: {line}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=DEFAULT_MINUTES)
    ap.add_argument("--profile", default="glm5-nvfp4-8x-rtx-pro-6000")
    ap.add_argument("--browser", action="store_true", help="keep a headless Chromium on the console")
    ap.add_argument("--dir", type=Path, default=None, help="demo folder (default: a new temp dir)")
    ap.add_argument("--estimate-mib-per-day", type=float, default=None,
                    help="storage's per-day estimate (storage_bench.py [4]) to compare with")  # fmt: skip
    args = ap.parse_args()
    if args.minutes <= 0:
        sys.exit("--minutes must be positive")
    folder = (args.dir or Path(tempfile.mkdtemp(prefix="spectower-soak-"))).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "spectower.db"
    port = free_port()
    print(f"machine: {machine()}")
    print(
        f"soak: spectower demo --profile {args.profile} for {args.minutes:g} min, folder {folder}", flush=True
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
    with (folder / "demo.out").open("wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "spectower.console.cli", "demo", "--profile", args.profile,
             "--port", str(port),
             "--db", str(db)],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    pids: dict[str, int] = {}
    browser: Browser | None = None
    try:
        pids = wait_up(folder, port, demo)
        if args.browser:
            browser = Browser(f"http://127.0.0.1:{port}")
        time.sleep(WARMUP_S)
        t0 = time.monotonic()
        mem0 = {name: rss(pid) for name, pid in pids.items()}
        size0, rows0 = db_figures(db)
        end = t0 + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(min(60.0, max(0.0, end - time.monotonic())))
            if browser is not None and time.monotonic() < end:
                browser.next_page()
            if demo.poll() is not None:
                print(f"the demo exited early with {demo.returncode}")
                break
            elapsed = (time.monotonic() - t0) / 60
            now = "  ".join(f"{n} {rss(p) / 2**20:.0f}" for n, p in pids.items())
            print(f"  {elapsed:5.1f} min  RSS MiB: {now}", flush=True)
        elapsed_s = time.monotonic() - t0
        mem1 = {name: rss(pid) for name, pid in pids.items()}
        size1, rows1 = db_figures(db)
    finally:
        if browser is not None:
            browser.close()
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(timeout=90)
            except subprocess.TimeoutExpired:
                demo.kill()
        for pid in pids.values():  # nothing of ours may outlive the soak
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    print(
        f"\n[1] memory (RSS incl. descendants) after {WARMUP_S:g} s warm-up and "
        f"{elapsed_s / 60:.1f} min later:"
    )
    for name in pids:
        a, b = mem0[name], mem1[name]
        change = (b - a) / a if a else float("nan")
        verdict = "flat" if abs(change) <= FLAT else "NOT flat"
        print(
            f"    {name:<8} {a / 2**20:8.1f} MiB -> {b / 2**20:8.1f} MiB  "
            f"({change:+.1%}, {verdict} within 10%)"
        )

    grown = size1 - size0
    samples = sum(rows1[t] - rows0[t] for t in ("engine_sample", "gpu_sample"))
    per_day = grown / elapsed_s * DAY_S
    print(f"\n[2] database: {size0 / 2**20:.1f} MiB -> {size1 / 2**20:.1f} MiB (+{grown / 2**20:.2f} MiB "
          f"in {elapsed_s / 60:.1f} min)")  # fmt: skip
    for table in TABLES:
        added = rows1[table] - rows0[table]
        print(f"    {table:<20} +{added:,} rows ({added / elapsed_s:.2f}/s)")
    if samples:
        print(f"    {grown / samples:.0f} bytes per engine/GPU sample (indexes and rollups included)")
    print(f"    at this rate: {per_day / 2**20:,.0f} MiB per day")
    if args.estimate_mib_per_day:
        ratio = per_day / 2**20 / args.estimate_mib_per_day
        print(f"    storage's estimate: {args.estimate_mib_per_day:,.0f} MiB per day -> measured/estimate "
              f"{ratio:.2f}")  # fmt: skip
    with contextlib.closing(sqlite3.connect(db)) as conn:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    print(f"    after the stop: {db.stat().st_size / 2**20:.1f} MiB on disk, integrity_check {check}")

    errors = error_lines(folder)
    print(f"\n[3] error lines the children logged: {len(errors)}")
    for line in errors[:200]:
        print(f"    {line}")
    if len(errors) > 200:
        print(f"    ... and {len(errors) - 200} more (in {folder})")
    alive = [n for n, p in pids.items() if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    if browser is not None:
        print(f"\nbrowser: {browser.visits} page visits, {browser.failures} failed")
    print(f"\ndemo exit code {demo.returncode}; children alive after the stop: {alive or 'none'}")
    print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
