"""spectower beside a real Prometheus, from one run: bytes per stored value, 30 days extrapolated, chart
query times and the collectors' CPU.

    python3 benchmarks/prometheus_compare.py [--minutes 20] [--postgres postgresql://USER@HOST/DB]
    python3 benchmarks/prometheus_compare.py --minutes 5 --servers 16 --cpu-only

Starts the simulator (glm5 profile: 8 GPUs on its dcgm-exporter port) under a closed-loop load, then for
``--minutes`` scrapes it every second with ``spectower collect`` into SQLite (and with ``--postgres`` a
second ``spectower collect`` into that database, which should be empty) and with Prometheus (Debian's,
2-minute blocks, keeping only the families spectower reads: the dcgm fields and the SGLang gauges and
counters, not its histograms' buckets). At the end:

1. bytes per stored value: spectower's sealed chunks (+ their index), then everything that holds samples
   (head rows, chunks, rollups, indexes; SQLite after VACUUM, PostgreSQL after VACUUM FULL), against
   Prometheus's compacted blocks (chunks + index + meta) over the samples they hold; what the writer has
   not sealed yet (less than its 10-minute minimum) is sealed first, as its next maintenance would once
   10 minutes gathered: the head keeps its 2 minutes either way;
2. those bytes per second of 1 server + 8 GPUs, times 30 days;
3. a chart of 8 GPUs' utilisation over the last 15 minutes (or the whole run if shorter) at 1 s and 60 s
   buckets: ``queries.series_many`` against ``query_range`` over HTTP (median of 7);
4. CPU (user + system from /proc) of each collector process and of Prometheus over the run, as a share
   of one core, with the machine's load average (``--servers N``: N simulated servers, each under a
   closed loop of 2 requests, all scraped by one collector and one Prometheus, beside the first's 8 GPUs;
   ``--cpu-only`` prints only this);
5. (unless --no-day) 24 hours of 8 GPUs at 1 Hz put into both stores (spectower: inserted, rolled up,
   sealed; Prometheus: promtool blocks of the same values): charts of the 24 hours at 60 s and of the
   last 15 minutes at 1 s and 60 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector_bench import REPO, free_port, start_load, start_simulator
from spectower.collectors.gpu.dcgm import FALLBACKS, FIELD_MAP
from spectower.storage import Database, open_database, queries, sealed
from sqlalchemy import func, select, text

PROMETHEUS = "/usr/bin/prometheus"
SGLANG_KEPT = (
    "num_running_reqs|num_queue_reqs|gen_throughput|token_usage|cache_hit_rate|spec_accept_length|"
    "spec_accept_rate|spec_num_steps|realtime_tokens_total|generation_tokens_total|num_requests_total"
)
DAY_S = 86_400
SAMPLE_TABLES = ("engine_sample", "gpu_sample", "engine_chunk", "gpu_chunk")
ROLLUP_TABLES = ("engine_rollup", "gpu_rollup")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_prometheus(
    work: Path, bases: list[str] | None, dcgm_url: str | None, *, tsdb: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus scraping the simulators (``bases``, ``dcgm_url``) into ``work``/tsdb, or (None, None)
    serving ``tsdb`` only."""
    if bases is None or dcgm_url is None:
        (work / "prometheus.yml").write_text("global: {evaluation_interval: 1m}\n")
    else:
        _scrape_config(work / "prometheus.yml", bases, dcgm_url)
    port = free_port()
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={tsdb or work / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.min-block-duration=2m",
         "--storage.tsdb.max-block-duration=2m", "--storage.tsdb.retention.time=30d", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=(work / "prometheus.log").open("wb"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("prometheus did not get ready")


def _scrape_config(path: Path, bases: list[str], dcgm_url: str) -> None:
    sg = ", ".join(f'"{b.removeprefix("http://")}"' for b in bases)
    dc = dcgm_url.removeprefix("http://").removesuffix("/metrics")
    dcgm_kept = "|".join(sorted({*FIELD_MAP, *FALLBACKS}))
    path.write_text(
        f"""global: {{scrape_interval: 1s, evaluation_interval: 1m}}
scrape_configs:
  - job_name: sglang
    static_configs: [{{targets: [{sg}]}}]
    metric_relabel_configs: [{{source_labels: [__name__], regex: "sglang:({SGLANG_KEPT})", action: keep}}]
  - job_name: dcgm
    static_configs: [{{targets: ["{dc}"]}}]
    metric_relabel_configs: [{{source_labels: [__name__], regex: "{dcgm_kept}", action: keep}}]
"""
    )


def start_collector(db: str, bases: list[str], dcgm_url: str, log: Path) -> subprocess.Popen[bytes]:
    spectower = Path(sys.executable).with_name("spectower")
    servers = [arg for base in bases for arg in ("--server", base)]
    return subprocess.Popen(
        [str(spectower), "collect", "--db", db, *servers, "--gpu", f"dcgm={dcgm_url}", "--interval", "1s"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip


def prometheus_blocks(tsdb: Path) -> tuple[int, int, int]:
    """(bytes, samples, blocks) of the compacted blocks."""
    size = samples = blocks = 0
    for meta in tsdb.glob("*/meta.json"):
        blocks += 1
        samples += int(json.loads(meta.read_text())["stats"]["numSamples"])
        size += sum(f.stat().st_size for f in meta.parent.rglob("*") if f.is_file())
    return size, samples, blocks


def stored_values(db: Database) -> tuple[int, int]:
    """(values in sealed chunks, values in head rows): every non-NULL value of a sample column."""
    in_chunks = in_head = 0
    with db.engine.connect() as conn:
        for spec in sealed.SPECS:
            for run in sealed.iter_runs(conn, spec, None, None, None, spec.columns):
                in_chunks += sum(int(p.sum()) for _, p in run.columns.values())
            t = spec.sample
            counts = conn.execute(select(*[func.count(t.c[c]) for c in spec.columns])).one()
            in_head += sum(int(n) for n in counts)
    return in_chunks, in_head


def sqlite_bytes(db: Database, work: Path) -> dict[str, int]:
    copy = work / "vacuumed.db"
    with contextlib.closing(sqlite3.connect(str(db.engine.url.database))) as raw:
        raw.execute("VACUUM INTO ?", (str(copy),))
    vac = open_database(copy)
    try:
        with vac.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT tbl_name, name FROM sqlite_master WHERE type IN ('table','index')"
            )
            owner = dict((name, tbl) for tbl, name in rows)
            sizes: dict[str, int] = {}
            for name, size in conn.exec_driver_sql("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
                tbl = owner.get(name, name)
                sizes[tbl] = sizes.get(tbl, 0) + int(size)
    finally:
        vac.close()
    sizes["(file)"] = copy.stat().st_size
    return sizes


def postgres_bytes(db: Database) -> dict[str, int]:
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for t in (*SAMPLE_TABLES, *ROLLUP_TABLES):
            conn.exec_driver_sql(f"VACUUM FULL {t}")
        sizes = {
            t: int(conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": t}).scalar_one())
            for t in (*SAMPLE_TABLES, *ROLLUP_TABLES)
        }
        sizes["(file)"] = int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
    return sizes


def report_bytes(name: str, db: Database, sizes: dict[str, int], seconds: float) -> None:
    in_chunks, in_head = stored_values(db)
    chunks = sizes.get("engine_chunk", 0) + sizes.get("gpu_chunk", 0)
    samples = chunks + sizes.get("engine_sample", 0) + sizes.get("gpu_sample", 0)
    with_rollups = samples + sum(sizes.get(t, 0) for t in ROLLUP_TABLES)
    print(f"    spectower {name}: {in_chunks:,} values sealed, {in_head:,} in the head rows")
    print(f"      sealed chunks: {chunks / max(in_chunks, 1):.2f} B/value; head + chunks: "
          f"{samples / (in_chunks + in_head):.2f} B/value; with rollups: "
          f"{with_rollups / (in_chunks + in_head):.2f} B/value; "
          f"whole database {sizes['(file)'] / 2**20:.1f} MiB")  # fmt: skip
    per_s = (chunks / max(in_chunks, 1)) * (in_chunks + in_head) / seconds
    month = (per_s + sum(sizes.get(t, 0) for t in ROLLUP_TABLES) / seconds) * 30 * DAY_S
    print(f"      30 days extrapolated (sealed rate + rollups): {per_s / 8:.0f} B per GPU-second of samples, "
          f"{month / 2**30:.2f} GiB")  # fmt: skip


def chart_times(
    db: Database,
    prom: str,
    end: float,
    span: float,
    *,
    steps: tuple[int, ...] = (1, 60),
    gids: list[int] | None = None,
) -> None:
    """``series_many`` (min / mean / max per bucket) against ``query_range`` over HTTP, raw and the three
    ``*_over_time`` queries one after the other; medians of 7."""
    gids = gids or [g.id or 0 for g in queries.gpus(db)]
    start = end - span
    for step in steps:
        ours, raw, three = [], [], []
        # buckets of exactly `step` s: series_many widens a rollup tier's buckets by one tier bucket
        points = int(span / step) + 1 if step < 60 else math.ceil((span + 60) / step) + 1
        for _ in range(7):
            t = time.perf_counter()
            got = queries.series_many(db, "gpu", gids, ["gpu_util_pct"], start, end, points)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = _query_range(prom, "DCGM_FI_DEV_GPU_UTIL", start, end, step)
            raw.append(time.perf_counter() - t)
            t = time.perf_counter()
            for agg in ("min", "avg", "max"):
                _query_range(prom, f"{agg}_over_time(DCGM_FI_DEV_GPU_UTIL[{step}s])", start, end, step)
            three.append(time.perf_counter() - t)
        n_ours = sum(len(s.points) for s in got.values())
        n_theirs = sum(len(s["values"]) for s in r["data"]["result"])
        tier = next(iter(got.values())).tier
        print(f"    {len(gids)} GPUs, {span / 60:.0f} min, {step} s buckets: "
              f"spectower {statistics.median(ours) * 1e3:.1f} ms ({n_ours} points, {tier}, min/mean/max); "
              f"Prometheus query_range {statistics.median(raw) * 1e3:.1f} ms raw ({n_theirs} points), "
              f"{statistics.median(three) * 1e3:.1f} ms min/avg/max")  # fmt: skip


def _query_range(prom: str, query: str, start: float, end: float, step: int) -> Any:
    params = {"query": query, "start": start, "end": end, "step": step}
    r = httpx.get(f"{prom}/api/v1/query_range", params=params, timeout=60)
    r.raise_for_status()
    return r.json()


def day_chart(work: Path, gpus: int = 8) -> None:
    """The same 24 hours of 1 Hz utilisation of ``gpus`` GPUs in both stores (spectower: inserted, rolled
    up and sealed as the writer does; Prometheus: blocks made by promtool from the same values), then
    charts of 24 hours at 60 s and of its last 15 minutes at 1 s, each store answering over its own path
    (Prometheus: HTTP, raw and min/avg/max over each step)."""
    import numpy as np

    end = float(int(time.time()) // 3600 * 3600 - 3600)
    ts = end - DAY_S + 1 + np.arange(DAY_S, dtype=np.float64)
    rng = np.random.default_rng(7)
    util = np.clip(50 + np.cumsum(rng.normal(0, 2, (gpus, DAY_S)), axis=1), 0, 100).round()
    db = open_database(work / "day.db")
    gids = [db.gpu_id("day", k, f"GPU-day-{k}", ts=end) for k in range(gpus)]
    for k, gid in enumerate(gids):
        values = zip(ts.tolist(), util[k].tolist(), strict=True)
        db.insert_many(
            "gpu_sample", ({"gpu_id": gid, "ts": t, "lost": False, "gpu_util_pct": u} for t, u in values)
        )
    db.update_rollups()
    db.seal()
    om = work / "day.om"
    with om.open("w") as fh:
        fh.write("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        for k in range(gpus):
            fh.writelines(
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="{k}"}} {u:g} {t:.3f}\n' for t, u in zip(ts, util[k], strict=True)
            )
        fh.write("# EOF\n")
    tsdb = work / "day-tsdb"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)], check=True
    )
    (work / "day-prom").mkdir()
    prom, url = start_prometheus(work / "day-prom", None, None, tsdb=tsdb)
    try:
        print(f"[5] one day of {gpus} GPUs at 1 Hz, the same values in both stores:")
        chart_times(db, url, end, DAY_S, steps=(60,), gids=gids)
        chart_times(db, url, end, 900.0, steps=(1, 60), gids=gids)
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        db.close()


def start_servers(n: int) -> tuple[list[subprocess.Popen[bytes]], list[str], str]:
    """``n`` simulated servers under load (processes to stop, their URLs) and the first one's dcgm URL."""
    procs: list[subprocess.Popen[bytes]] = []
    bases: list[str] = []
    dcgm_url = ""
    for _ in range(n):
        sim, base, dcgm = start_simulator()
        procs += [sim, start_load(base, 8 if n == 1 else 2)]
        bases.append(base)
        dcgm_url = dcgm_url or dcgm
    return procs, bases, dcgm_url


def measure_cpu(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each process's CPU (user + system, /proc) over ``seconds`` as a share of one core; prints the load
    average around it (the machine is shared: compare within a run)."""
    before = os.getloadavg()
    cpu0, t0 = {k: cpu_s(p) for k, p in pids.items()}, time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    cpu = {k: (cpu_s(p) - cpu0[k]) / elapsed for k, p in pids.items()}
    after = os.getloadavg()
    print(f"    measured over {elapsed:.0f} s; load average (1 min) {before[0]:.1f} at the start, "
          f"{after[0]:.1f} at the end, on {os.cpu_count()} CPUs")  # fmt: skip
    return cpu


def report_stores(
    args: argparse.Namespace, work: Path, targets: dict[str, str], prom_url: str, end: float
) -> None:
    print("[1, 2] bytes")
    size, samples, blocks = prometheus_blocks(work / "tsdb")
    print(
        f"    Prometheus: {blocks} compacted blocks, {samples:,} samples, "
        f"{size / max(samples, 1):.2f} B/value"
    )
    per_s = size / max(samples, 1) * samples / (blocks * 120 or 1)
    print(
        f"      30 days extrapolated: {per_s / 8:.0f} B per GPU-second, {per_s * 30 * DAY_S / 2**30:.2f} GiB"
    )
    for name, url in targets.items():
        db = open_database(url)
        db.update_rollups()
        db.seal(min_rows=1)
        sizes = sqlite_bytes(db, work) if name == "SQLite" else postgres_bytes(db)
        report_bytes(name, db, sizes, args.minutes * 60)
        if name == "SQLite":
            print("[3] charts")
            chart_times(db, prom_url, end, min(900.0, args.minutes * 60 - 60))
        db.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument(
        "--postgres", default=None, help="a PostgreSQL URL for a second collector (empty database)"
    )
    ap.add_argument("--servers", type=int, default=1, help="simulated SGLang servers (the first's 8 GPUs)")
    ap.add_argument("--cpu-only", action="store_true", help="print [4] only (no bytes, no charts)")
    ap.add_argument("--no-day", dest="day", action="store_false", help="skip [5], the 24-hour chart")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spectower-vs-prometheus-"))
    procs, bases, dcgm_url = start_servers(args.servers)
    prom, prom_url = start_prometheus(work, bases, dcgm_url)
    targets = {"SQLite": str(work / "spectower.db")} | (
        {"PostgreSQL": args.postgres} if args.postgres else {}
    )
    collectors = {
        k: start_collector(v, bases, dcgm_url, work / f"collect-{k}.log") for k, v in targets.items()
    }
    try:
        time.sleep(10)  # start-up (imports, inventory, first /server_info) not counted
        pids = {**{f"spectower collect ({k})": p.pid for k, p in collectors.items()}, "Prometheus": prom.pid}
        print(f"run: {args.minutes:g} min at 1 s, {args.servers} SGLang server(s) (simulator, "
              f"{8 if args.servers == 1 else 2} concurrent requests each) + 8 GPUs (dcgm)")  # fmt: skip
        cpu = measure_cpu(pids, args.minutes * 60 - 10)
        for p in collectors.values():
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)
        end = time.time()
        time.sleep(2)
        if not args.cpu_only:
            report_stores(args, work, targets, prom_url, end)
        print("[4] CPU over the run: " + ", ".join(f"{k} {100 * v:.2f} % of a core" for k, v in cpu.items()))
        if args.day and not args.cpu_only:
            day_chart(work)
    finally:
        for p in (*collectors.values(), prom, *procs):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
    print(f"files in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
