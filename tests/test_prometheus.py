"""spectower.collectors.prometheus against a REAL Prometheus (/usr/bin/prometheus) scraping the simulator: the
Prometheus source reads back what the direct scraper read, within one scrape."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.collectors.gpu.dcgm import parse_dcgm
from spectower.collectors.prometheus import PrometheusSource, PrometheusSourceError, instance_url
from spectower.collectors.sglang.metrics import parse_metrics

from benchmarks.simulator_process import SimulatorProcess, wait_until_ok
from tests.conftest import dead_url, free_port
from tests.test_daemon import Load

pytestmark = pytest.mark.integration
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SCRAPE_S = 1.0


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """A Prometheus scraping a simulator, shared by the module's tests (they only read what it scraped)."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is not installed (Debian package 'prometheus'; ./tests/run installs it)")
    tmp_path = tmp_path_factory.mktemp("prometheus")
    with SimulatorProcess(profile="glm5-nvfp4-8x-rtx-pro-6000", decode_log_interval=10) as sim:
        yield from _prometheus(tmp_path, sim)


def _prometheus(tmp_path: Path, sim: SimulatorProcess) -> Iterator[tuple[str, Any]]:
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        f"""global:
  scrape_interval: {SCRAPE_S:g}s
  evaluation_interval: {SCRAPE_S:g}s
scrape_configs:
  - job_name: sglang
    static_configs: [{{targets: ["127.0.0.1:{sim.port}"]}}]
  - job_name: dcgm
    static_configs: [{{targets: ["127.0.0.1:{sim.gpu_metrics_port}"]}}]
"""
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ok(f"{url}/-/ready", 60, proc, (tmp_path / "prometheus.log").read_text)
        yield url, sim
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _wait_for_series(src: PrometheusSource, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if src.sglang_samples() and src.dcgm()[0]:
            return
        time.sleep(0.5)
    pytest.fail("Prometheus never had the simulator's series")


def test_prometheus_reads_back_what_the_direct_scraper_read(prometheus: tuple[str, Any]) -> None:
    url, sim = prometheus
    load = Load(sim.base_url, concurrency=8)
    try:
        src = PrometheusSource(url, timeout_s=5)
        _wait_for_series(src)
        time.sleep(3 * SCRAPE_S)
        # Direct scrapes every 0.2 s around the query time.
        direct: list[tuple[float, float, float]] = []  # (ts, decode counter, max_total_num_tokens)
        t_end = time.time() + 3 * SCRAPE_S
        while time.time() < t_end:
            snap = parse_metrics(httpx.get(f"{sim.base_url}/metrics", timeout=5).text)
            r = snap.ranks[0]
            direct.append(
                (time.time(), r.counters["realtime_tokens_total:decode"], r.gauges["max_total_num_tokens"])
            )
            time.sleep(0.2)
        at = direct[-1][0]
        per_inst = src.sglang_samples(at=at)
        # Prometheus may have scraped between our last read and ``at``: one more read bounds it above.
        after = parse_metrics(httpx.get(f"{sim.base_url}/metrics", timeout=5).text)
        direct.append((time.time(), after.ranks[0].counters["realtime_tokens_total:decode"], direct[-1][2]))
        inst = f"127.0.0.1:{sim.port}"
        assert inst in per_inst
        prom_snap_ts, samples = per_inst[inst]
        from spectower.collectors.sglang.metrics import snapshot_from_samples

        prom = snapshot_from_samples(samples).ranks[0]
        c_prom = prom.counters["realtime_tokens_total:decode"]
        # Within one scrape: Prometheus's latest value lies between what we read one scrape (+slack) before
        # the query time and what we read at it.
        window = [c for ts, c, _ in direct if at - SCRAPE_S - 1.0 <= ts]
        assert min(window) <= c_prom <= max(window), (c_prom, window)
        assert at - prom_snap_ts <= SCRAPE_S + 1.0
        assert prom.gauges["max_total_num_tokens"] == direct[-1][2]

        # The derived readings: two collections one scrape apart give a throughput like the direct one's.
        b1 = src.collect_now()
        time.sleep(2 * SCRAPE_S)
        b2 = src.collect_now()
        assert instance_url(inst) in b1.engine and instance_url(inst) in b2.engine
        [r2] = b2.engine[instance_url(inst)].readings
        direct_rate = (direct[-1][1] - direct[0][1]) / (direct[-1][0] - direct[0][0])
        assert r2.output_tok_s is not None and r2.output_tok_s > 0
        assert 0.5 * direct_rate <= r2.output_tok_s <= 2.0 * direct_rate

        # DCGM through Prometheus: the same 8 GPUs as the exporter itself lists.
        prom_gpus, _prom_facts = src.dcgm()
        direct_gpus, _ = parse_dcgm(httpx.get(sim.gpu_metrics_url, timeout=5).text, time.time(), "x")
        assert sorted(g.uuid for g in prom_gpus) == sorted(g.uuid for g in direct_gpus)
        assert len(prom_gpus) == 8
        by_uuid = {g.uuid: g for g in direct_gpus}
        for g in prom_gpus:
            assert g.memory_total_mib == by_uuid[g.uuid].memory_total_mib
            assert g.host == "vm" or g.host == f"127.0.0.1:{sim.gpu_metrics_port}"

        # A range query with explicit start/end/step gives a reading per step.
        hist = src.engine_history(at - 4, at, 1.0)
        results = hist[instance_url(inst)]
        assert len(results) >= 4
        assert any(r.readings[0].output_tok_s for r in results[1:])
    finally:
        load.stop()


def test_unreachable_prometheus_is_a_clear_error() -> None:
    src = PrometheusSource(dead_url(), timeout_s=1)
    with pytest.raises(PrometheusSourceError, match="query failed"):
        src.collect_now()
    with pytest.raises(ValueError, match="end > start"):
        src.engine_history(10, 5, 1)


def test_daemon_with_prometheus_source(prometheus: tuple[str, Any], tmp_path: Path) -> None:
    from spectower.collectors.daemon import DaemonConfig

    from tests.test_daemon import rows, run_collector, wait_cycles

    url, sim = prometheus
    src = PrometheusSource(url, timeout_s=5)
    _wait_for_series(src)

    async def run(c: Any) -> None:
        await wait_cycles(c, "prometheus", 3)  # three reads through Prometheus, a second apart

    db_path = tmp_path / "prom.db"
    run_collector(DaemonConfig(prometheus=url, interval_s=1.0), db_path, run)
    assert rows(db_path, "select url from server") == [(f"http://127.0.0.1:{sim.port}",)]
    assert rows(db_path, "select count(*) from engine_sample")[0][0] >= 2
    assert rows(db_path, "select count(*) from gpu")[0][0] == 8


def test_one_odd_series_in_an_answer_is_skipped_the_rest_read() -> None:
    """A series Prometheus' API would not send (a proxy's, a broken one's) once failed the whole batch, every
    instance's, every cycle."""
    from spectower.collectors.prometheus import _by_instance

    name = "sglang:num_running_reqs"
    good = {"metric": {"__name__": name, "instance": "a:1"}, "value": [1700000000.5, "3"]}
    other = {"metric": {"__name__": name, "instance": "b:2"}, "value": [1700000001, "4"]}
    odd = [
        {"metric": {"__name__": "sglang:num_running_reqs", "instance": "c:3"}, "value": ["x", "3"]},
        {"metric": {"__name__": "sglang:num_running_reqs", "instance": "c:3"}, "value": [10**400, "3"]},
        {"metric": {"__name__": "sglang:num_running_reqs", "instance": "c:3"}, "value": [1.0, 10**400]},
        {"metric": {"__name__": 7, "instance": "c:3"}, "value": [1.0, "3"]},
        {"metric": "x", "value": [1.0, "3"]},
        "not a series",
    ]
    got = _by_instance([good, *odd, other], require_instance=True)
    assert sorted(got) == ["a:1", "b:2"]
    assert got["a:1"][0] == 1700000000.5 and got["a:1"][1][0].value == 3.0


@pytest.mark.parametrize("drip_headers", [False, True], ids=["body", "headers"])
def test_a_trickling_prometheus_answer_ends_at_the_deadline(drip_headers: bool) -> None:
    import requests
    from spectower.collectors.prometheus import BoundedSession

    from tests.drip_server import DripServer

    server = DripServer(body_len=100_000, gap_s=0.05, drip_headers=drip_headers)
    try:
        session = BoundedSession(deadline_s=0.5)
        start = time.monotonic()
        with pytest.raises(requests.exceptions.Timeout, match=r"no complete answer within 0\.5s"):
            session.get(server.url, timeout=5)  # a byte every 0.05 s: the 5 s read timeout never fires
        assert time.monotonic() - start < 3.0
    finally:
        server.close()
