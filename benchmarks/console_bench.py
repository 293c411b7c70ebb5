"""Server-side time of the console's pages over 7 days of 1 Hz data (one server, 8 GPUs).

    python3 benchmarks/console_bench.py [--days 7] [--db PATH] [--repeat 5]

Fills a SQLite file through storage (or reuses --db if it already holds data), folds the rollups and
seals the head into chunks the way the collector's writer does, then drives the real app with streamlit's
AppTest (the same script run a browser session triggers, without the websocket) and prints, per page and
time range: the first full render and the median of later reruns. A live fragment's refresh is a subset
of a page rerun, so the rerun time is an upper bound for it. Target: < 250 ms per refresh.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spectower.storage import open_database  # noqa: E402

from benchmarks import synthetic  # noqa: E402

APP = str(REPO / "console" / "app.py")
PAGES = ("overview", "speculation", "gpus", "control", "benchmarks")
TARGET_MS = 250.0
RANGES = ("1 h", "24 h", "7 d")


def fill(url: str, days: float) -> None:
    now = time.time()
    with open_database(url) as db:
        has = db.engine.connect().exec_driver_sql("SELECT COUNT(*) FROM engine_sample").scalar()
        if has:
            print(f"reusing {url}: {has} engine rows")
            return
        t = time.time()
        got = synthetic.fill(db, t0=now - days * 86400, t1=now, servers=1, gpus=8, step_s=1.0)
        print(f"filled {got.engine_rows} engine rows + {got.gpu_rows} GPU rows in {time.time() - t:.0f} s")
        synthetic.add_bench_run(db, synthetic.DEFAULT_PROFILE, now - 86400, "cuda12", scale_on=0.8)
        synthetic.add_bench_run(db, synthetic.DEFAULT_PROFILE, now - 3600, "cuda13")
        synthetic.add_policy_events(db, "http://10.0.0.1:30000", now - days * 86400, now, 900, 64)
        t = time.time()
        db.update_rollups()
        print(f"rollups folded in {time.time() - t:.0f} s")
        t = time.time()
        sealed = db.seal()  # as the collector's writer does: all but each series' newest 2 minutes
        print(f"{sealed} rows sealed into chunks in {time.time() - t:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--db", help="SQLite file to fill or reuse (default: a temp file)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    path = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="console-bench-")) / "bench.db"
    url = f"sqlite:///{path.resolve()}"
    fill(url, args.days)
    os.environ["SPECTOWER_DB"] = url
    from streamlit.testing.v1 import AppTest

    cpu = platform.processor() or platform.machine()
    print(f"machine: {platform.node()} · {cpu} · {os.cpu_count()} CPUs · "
          f"load {os.getloadavg()[0]:.1f} · python {platform.python_version()}")  # fmt: skip
    at = AppTest.from_file(APP, default_timeout=600)
    t = time.perf_counter()
    at.run()
    first = (time.perf_counter() - t) * 1000
    assert not at.exception, at.exception
    print(f"first full render (imports, engine, Overview, range 1 h): {first:.0f} ms")
    print(f"{'page':<12} {'range':<6} {'first':>8} {'median':>8} {'max':>8}  (ms, {args.repeat} reruns)")
    worst = 0.0
    for rng in RANGES:
        at.session_state["time_range"] = rng
        for page in PAGES:
            at.switch_page(f"pages/{page}.py")
            t = time.perf_counter()
            at.run()
            page_first = (time.perf_counter() - t) * 1000
            assert not at.exception, (page, at.exception)
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                at.run()
                times.append((time.perf_counter() - t) * 1000)
            med = statistics.median(times)
            worst = max(worst, med)
            flag = "" if med < TARGET_MS else "  over target"
            print(f"{page:<12} {rng:<6} {page_first:8.0f} {med:8.0f} {max(times):8.0f}{flag}")
    print(f"worst median refresh: {worst:.0f} ms (target < {TARGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()
