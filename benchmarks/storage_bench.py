"""Storage figures: ingest rate, reading a 30-day chart, database size per day.

    python3 benchmarks/storage_bench.py [--days 30] [--gpus 8] [--dir /tmp/x] [--keep]

1. Batched ingest through BatchWriter: one server (1 engine sample/s) + N GPUs (N GPU samples/s),
   i.e. what the collectors put at 1 Hz, with every column filled. Reported with and without the cost
   of building the SQLModel row objects (the collectors pay that, the writer thread does not).
2. Fills ``--days`` of such 1 Hz data (a day per transaction, generated inside SQLite so filling 23 M
   rows takes minutes, not hours), folding each day into the rollups and sealing it into chunks as the
   writer would.
3. Reads one chart series (gpu_util_pct, 30 days, max_points=1000) for each of the N GPUs, as the
   console does, and reports the time and the rows the database aggregated; the raw-table equivalent
   for one GPU is timed once for comparison.
4. Database size per day of data (after a WAL checkpoint).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from spectower.storage import open_database, queries
from spectower.storage.models import EngineSample, GpuSample
from sqlalchemy import text

DEFAULT_DAYS = 30
DEFAULT_GPUS = 8
DEFAULT_INGEST_SECONDS = 4000  # 1 Hz seconds pushed through BatchWriter in part 1
DEFAULT_MAX_POINTS = 1000
DAY_S = 86_400
T0 = 1_760_000_400.0  # a whole hour


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}"
    )


def gpu_row(gid: int, ts: float, i: int) -> GpuSample:
    return GpuSample(
        gpu_id=gid, ts=ts, gpu_util_pct=float(i % 100), mem_util_pct=40.0, memory_used_mib=70_000.0 + i % 50,
        memory_total_mib=143_771.0, power_w=300.0 + i % 300, power_limit_w=700.0, temperature_c=60.0 + i % 20,
        sm_clock_mhz=1980.0, mem_clock_mhz=3201.0, pcie_tx_bytes_s=1e8, pcie_rx_bytes_s=2e8,
        nvlink_tx_bytes_s=5e9, nvlink_rx_bytes_s=5e9, throttle_reasons=0, ecc_corrected=0, ecc_uncorrected=0,
        xid_errors=0,
    )  # fmt: skip


def engine_row(sid: int, ts: float, i: int) -> EngineSample:
    return EngineSample(
        server_id=sid, ts=ts, num_running_reqs=float(i % 64), num_queue_reqs=0.0, gen_throughput=900.0,
        output_tok_s=910.0, prefill_tok_s=5000.0, request_rate=3.0, token_usage=0.4, cache_hit_rate=0.1,
        spec_accept_length=2.8, spec_accept_rate=0.6, spec_num_steps=3.0, spec_max_bs=30, batches_drafted=i,
        batches_gated=0, ttft_p50_s=0.05, ttft_p90_s=0.1, ttft_p99_s=0.2, itl_p50_s=0.01, itl_p90_s=0.02,
        itl_p99_s=0.05, e2e_p50_s=2.0, e2e_p90_s=4.0, e2e_p99_s=8.0,
    )  # fmt: skip


def part1_ingest(path: Path, gpus: int, seconds: int) -> None:
    db = open_database(path)
    sid = db.server_id("http://127.0.0.1:30000")
    gids = [db.gpu_id("bench-host", k, f"GPU-{k:04d}") for k in range(gpus)]
    t = time.perf_counter()
    rows: list = []
    for i in range(seconds):
        ts = T0 - seconds + i
        rows.append(engine_row(sid, ts, i))
        rows.extend(gpu_row(g, ts, i) for g in gids)
    build_s = time.perf_counter() - t
    w = db.writer(maintenance=None)
    t = time.perf_counter()
    w.put(*rows)
    assert w.flush(timeout=600)
    write_s = time.perf_counter() - t
    n = len(rows)
    st = w.stats()
    print(f"[1] batched ingest, 1 server + {gpus} GPUs at 1 Hz ({n} samples = {seconds} s of data):")
    print(f"    writer thread (rows already built): {n / write_s:,.0f} samples/s "
          f"= {seconds / write_s:,.0f} s of 1 Hz data per second; {st.batches} transactions")  # fmt: skip
    print(f"    end to end incl. building SQLModel rows: {n / (build_s + write_s):,.0f} samples/s "
          f"(building: {build_s / n * 1e6:.0f} us/row)")  # fmt: skip
    db.close()


FILL_GPU = """
WITH RECURSIVE s(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :hi)
INSERT INTO gpu_sample (gpu_id, ts, lost, gpu_util_pct, mem_util_pct, memory_used_mib, memory_total_mib, power_w,
    power_limit_w, temperature_c, sm_clock_mhz, mem_clock_mhz, pcie_tx_bytes_s, pcie_rx_bytes_s, nvlink_tx_bytes_s,
    nvlink_rx_bytes_s, throttle_reasons, ecc_corrected, ecc_uncorrected, xid_errors)
SELECT g.id, :t0 + s.i, 0, abs(random() % 101), 40.0 + abs(random() % 20), 70000.0 + abs(random() % 5000), 143771.0,
    300.0 + abs(random() % 400), 700.0, 55.0 + abs(random() % 30), 1980.0, 3201.0, abs(random() % 100000000) * 1.0,
    abs(random() % 100000000) * 1.0, abs(random() % 5000000000) * 1.0, abs(random() % 5000000000) * 1.0, 0, 0, 0, 0
FROM s CROSS JOIN gpu AS g ORDER BY s.i, g.id
"""  # noqa: E501
FILL_ENGINE = """
WITH RECURSIVE s(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM s WHERE i + 1 < :hi)
INSERT INTO engine_sample (server_id, dp_rank, ts, num_running_reqs, num_queue_reqs, gen_throughput, output_tok_s,
    prefill_tok_s, request_rate, token_usage, cache_hit_rate, spec_accept_length, spec_accept_rate, spec_num_steps,
    spec_max_bs, batches_drafted, batches_gated, ttft_p50_s, ttft_p90_s, ttft_p99_s, itl_p50_s, itl_p90_s, itl_p99_s,
    e2e_p50_s, e2e_p90_s, e2e_p99_s)
SELECT :sid, 0, :t0 + s.i, abs(random() % 64), abs(random() % 8), 900.0 + abs(random() % 200), 910.0, 5000.0, 3.0,
    0.4, 0.1, 2.5 + abs(random() % 100) / 100.0, 0.6, 3, 30, s.i, 0, 0.05, 0.1, 0.2, 0.01, 0.02, 0.05, 2.0, 4.0, 8.0
FROM s
"""  # noqa: E501


def part2_fill(path: Path, gpus: int, days: int) -> tuple[float, float]:
    db = open_database(path)
    sid = db.server_id("http://127.0.0.1:30000")
    for k in range(gpus):
        db.gpu_id("bench-host", k, f"GPU-{k:04d}")
    start = T0 - days * DAY_S
    fill_s = roll_s = seal_s = 0.0
    for d in range(days):
        t = time.perf_counter()
        with db.engine.begin() as conn:
            p = {"lo": d * DAY_S, "hi": (d + 1) * DAY_S, "t0": start, "sid": sid}
            conn.execute(text(FILL_GPU), p)
            conn.execute(text(FILL_ENGINE), p)
        fill_s += time.perf_counter() - t
        t = time.perf_counter()
        db.update_rollups(now=start + (d + 1) * DAY_S)
        roll_s += time.perf_counter() - t
        t = time.perf_counter()
        db.seal()  # as the writer's maintenance does: all but each series' newest minutes into chunks
        seal_s += time.perf_counter() - t
        if d % 5 == 4 or d == days - 1:
            print(
                f"    filled day {d + 1}/{days} (fill {fill_s:.0f} s, rollups {roll_s:.0f} s so far)",
                flush=True,
            )
    with db.engine.connect() as conn:
        n = 0
        for table in ("gpu_sample", "engine_sample"):
            n += conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
        for table in ("gpu_chunk", "engine_chunk"):
            n += conn.execute(text(f"SELECT coalesce(sum(n), 0) FROM {table}")).scalar_one()
    # steady state: the writer folds in what arrived during the last minute
    w = db.writer(maintenance=None)
    gids = [g.id for g in queries.gpus(db, host="bench-host")]
    for i in range(60):
        w.put(engine_row(sid, T0 + i, i), *(gpu_row(g, T0 + i, i) for g in gids if g is not None))
    assert w.flush(timeout=120)
    t = time.perf_counter()
    folded = db.update_rollups(now=T0 + 60)
    minute_ms = (time.perf_counter() - t) * 1000
    per_day = n / days
    print(
        f"[2] filled {days} days: {n:,} raw samples ({per_day:,.0f}/day), {n / fill_s:,.0f} rows/s generated;"
    )
    print(f"    rollup backfill: {roll_s / days:.1f} s per day of data ({n / roll_s:,.0f} samples/s);")
    print(f"    sealing into chunks: {seal_s / days:.1f} s per day of data ({n / seal_s:,.0f} samples/s);")
    print(f"    steady state: folding the last minute ({folded} samples) into rollups: {minute_ms:.0f} ms")
    db.close()
    return start, T0


def part3_read(path: Path, gpus: int, start: float, end: float, max_points: int) -> None:
    db = open_database(path)
    gids = [g.id for g in queries.gpus(db, host="bench-host")][:gpus]
    runs: list[float] = []
    rows_read = points = 0
    tier = ""
    for rep in range(5):
        t = time.perf_counter()
        total_rows = total_points = 0
        for gid in gids:
            assert gid is not None
            s = queries.series(db, "gpu", gid, "gpu_util_pct", start, end, max_points)
            total_rows += s.rows_read
            total_points += len(s.points)
            tier = s.tier
        runs.append(time.perf_counter() - t)
        rows_read, points = total_rows, total_points
        _ = rep
    per_gpu = statistics.median(runs) / len(gids)
    print(f"[3] chart over {(end - start) / DAY_S:.0f} days, max_points={max_points}, tier {tier}: "
          f"{len(gids)} GPU series in {statistics.median(runs) * 1000:.0f} ms median of {len(runs)} "
          f"(best {min(runs) * 1000:.0f} ms; {per_gpu * 1000:.1f} ms per series), "
          f"{rows_read:,} rows read, {points:,} points drawn")  # fmt: skip
    # one engine series too
    t = time.perf_counter()
    s = queries.series(db, "engine", 1, "output_tok_s", start, end, max_points)
    print(f"    engine series (output_tok_s, same range): {(time.perf_counter() - t) * 1000:.0f} ms, "
          f"{s.rows_read:,} rows read, {len(s.points)} points")  # fmt: skip
    # what the same chart would cost straight from the raw table (one GPU)
    t = time.perf_counter()
    with db.engine.connect() as conn:
        width = (end - start) / (max_points - 1)
        n = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT CAST(ts / :w AS INTEGER) AS b, min(gpu_util_pct),"
                " avg(gpu_util_pct), max(gpu_util_pct), count(*) AS n FROM gpu_sample"
                " WHERE gpu_id = :g AND ts BETWEEN :a AND :z GROUP BY b)"
            ),
            {"w": width, "g": gids[0], "a": start, "z": end},
        ).scalar_one()
    raw_s = time.perf_counter() - t
    print(f"    for comparison, the same series of ONE GPU from the head's raw rows: {raw_s * 1000:,.0f} ms "
          f"({(end - start):,.0f} rows read, {n} buckets)")  # fmt: skip
    db.close()


def part4_size(path: Path, days: int) -> None:
    db = open_database(path)
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = {}
        try:
            for name, size in conn.exec_driver_sql(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 8"
            ):
                pages[name] = size
        except Exception:  # dbstat is an optional SQLite module
            pages = {}
    db.close()
    size = path.stat().st_size
    print(
        f"[4] database size: {size / 2**30:.2f} GiB for {days} days = {size / days / 2**20:,.0f} MiB per day"
    )
    print("    (raw 1 Hz samples of 1 server + the GPUs, their indexes, 1-minute and 1-hour rollups)")
    if pages:
        print("    largest objects: " + ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in pages.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=DEFAULT_DAYS)
    ap.add_argument("--gpus", type=int, default=DEFAULT_GPUS)
    ap.add_argument("--ingest-seconds", type=int, default=DEFAULT_INGEST_SECONDS)
    ap.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS)
    ap.add_argument(
        "--dir", type=Path, default=None, help="where the database files go (default: a temp dir)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the database files")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="spectower-storage-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    print(f"files in {work}")
    try:
        part1_ingest(work / "ingest.db", args.gpus, args.ingest_seconds)
        path = work / "month.db"
        start, end = part2_fill(path, args.gpus, args.days)
        part3_read(path, args.gpus, start, end, args.max_points)
        part4_size(path, args.days)
        print(f"machine at the end: {machine()}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
