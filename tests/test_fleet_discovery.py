"""A fleet named once: `[fleets.NAME]` in spectower.toml, checked key by key (one line naming the key), and
discovered from a REAL simulated SGLang router's worker list and from a REAL Prometheus' scrape targets."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.control import fleet as fleets
from spectower.control.fleet import FleetError
from spectower.storage.locate import DemoMarker

from benchmarks.simulator_process import SimulatorProcess
from tests.conftest import REPO_ROOT, SPECTOWER_CLI, dead_url, free_port

# SGLang's router, "Worker Management APIs", GET /workers: the keys of each worker.
ROUTER_WORKER_KEYS = ("id", "url", "model_id", "priority", "cost", "worker_type", "is_healthy", "load",
                      "connection_mode")  # fmt: skip


def write_config(folder: Path, text: str) -> dict[str, str]:
    (folder / "spectower.toml").write_text(text)
    return {"XDG_CONFIG_HOME": str(folder / "user-config")}


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            'servers = ["http://a:1"]\nrouter = "http://r:2"',
            "give exactly one of servers, router, prometheus",
        ),
        ('servers = ["ftp://a:1"]', "fleets.prod.servers must be an http(s) URL, got 'ftp://a:1'"),
        ("servers = []", "fleets.prod.servers: must be a non-empty list of URLs"),
        ('servers = ["http://a:1"]\nport = 3', "fleets.prod: unknown key 'port'"),
        ('prometheus = "http://p:9090"', 'fleets.prod.job: a prometheus fleet needs job = "NAME"'),
        ('router = "http://r:1"\njob = "x"', "fleets.prod.job: only a prometheus fleet has a job"),
        ("router = 5", "fleets.prod.router: must be a URL in quotes, got 5"),
    ],
)
def test_a_bad_fleet_table_is_one_line_naming_the_key(table: str, said: str, tmp_path: Path) -> None:
    env = write_config(tmp_path, f"[fleets.prod]\n{table}\n")
    with pytest.raises(FleetError) as caught:
        fleets.named("prod", cwd=tmp_path, env=env)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("spectower.toml: fleets.prod")


def test_servers_and_fleet_together_each_once_in_order(tmp_path: Path) -> None:
    env = write_config(tmp_path, '[fleets.a]\nservers = ["http://h1:1/", "http://h2:2"]\n')
    got = fleets.resolve(["http://h2:2", "http://h3:3"], "a", cwd=tmp_path, env=env)
    assert got.replicas == ("http://h1:1", "http://h2:2", "http://h3:3") and got.name == "a"
    with pytest.raises(FleetError, match=r"--fleet b: no \[fleets.b\].*known: a"):
        fleets.resolve([], "b", cwd=tmp_path, env=env)
    with pytest.raises(FleetError, match="--server must be an http"):
        fleets.resolve(["localhost:30000"], None, cwd=tmp_path, env=env)


def test_the_running_demos_fleet_is_found_after_the_config_files(tmp_path: Path) -> None:
    env = write_config(tmp_path, '[fleets.mine]\nservers = ["http://h1:1"]\n')
    marker = DemoMarker(tmp_path / "user-config" / "spectower" / "demo.json")
    assert (
        marker.claim(tmp_path / "demo.db", {"demo": {"servers": ["http://d:1"]}, "mine": {"router": 1}})
        is None
    )
    try:
        assert fleets.named("demo", cwd=tmp_path, env=env).replicas == ("http://d:1",)
        assert fleets.named("mine", cwd=tmp_path, env=env).replicas == ("http://h1:1",)  # the file wins
    finally:
        marker.release()
    with pytest.raises(FleetError, match="--fleet demo"):
        fleets.named("demo", cwd=tmp_path, env=env)  # no demo runs now


@pytest.fixture(scope="module")
def two_sims() -> Iterator[list[SimulatorProcess]]:
    with SimulatorProcess() as a, SimulatorProcess(profile="llama31-8b-1x-h100") as b:
        yield [a, b]


@pytest.mark.integration
def test_the_simulated_router_lists_its_workers_and_the_fleet_finds_them(
    two_sims: list[SimulatorProcess], tmp_path: Path
) -> None:
    down = dead_url()
    workers = [two_sims[0].base_url, down, two_sims[1].base_url]
    port = free_port()
    argv = [
        *SPECTOWER_CLI,
        "sim",
        "router",
        "--port",
        str(port),
        *[a for w in workers for a in ("--worker-url", w)],
    ]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    router = f"http://127.0.0.1:{port}"
    try:
        listing = _wait_for(lambda: httpx.get(f"{router}/workers", timeout=2).json(), proc)
        assert listing["total"] == 3
        assert listing["stats"] == {"prefill_count": 0, "decode_count": 0, "regular_count": 3}
        first = listing["workers"][0]
        assert set(first) == set(ROUTER_WORKER_KEYS)
        assert [w["url"] for w in listing["workers"]] == workers and first["connection_mode"] == "Http"
        healthy = _wait_for(lambda: _healthy_after_probe(router), proc)
        assert healthy == [True, False, True]  # the health checker found the down one
        env = write_config(tmp_path, f'[fleets.gw]\nrouter = "{router}"\n')
        got = fleets.named("gw", cwd=tmp_path, env=env)
        assert got.replicas == tuple(workers) and f"router {router}/workers" in got.source
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
        answer = httpx.post(f"{router}/generate", json=body, timeout=30)
        assert answer.status_code == 200 and "text" in answer.json()  # routed to a healthy replica
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    with pytest.raises(
        FleetError, match=r"^router: http://127\.0\.0\.1:\d+/workers did not answer within 5 s"
    ):
        fleets.named("gw", cwd=tmp_path, env=env)


def _healthy_after_probe(router: str) -> list[bool]:
    flags = [w["is_healthy"] for w in httpx.get(f"{router}/workers", timeout=2).json()["workers"]]
    if all(flags):
        raise AssertionError("not probed yet")
    return flags


def _wait_for(read: Any, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, "the router exited"
        try:
            return read()
        except (httpx.HTTPError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.integration
def test_a_prometheus_fleet_is_the_active_targets_of_its_job(
    two_sims: list[SimulatorProcess], tmp_path: Path
) -> None:
    from tests.test_prometheus import PROMETHEUS

    port = free_port()
    sglang = ", ".join(f'"127.0.0.1:{s.port}"' for s in two_sims)
    dcgm = f"127.0.0.1:{two_sims[0].gpu_metrics_port}"
    (tmp_path / "prometheus.yml").write_text(
        f"global: {{scrape_interval: 1s}}\nscrape_configs:\n"
        f"  - job_name: sglang\n    static_configs: [{{targets: [{sglang}]}}]\n"
        f"  - job_name: dcgm\n    static_configs: [{{targets: [{dcgm!r}]}}]\n"
    )
    argv = [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", "--log.level=warn",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        env = write_config(tmp_path, f'[fleets.p]\nprometheus = "http://127.0.0.1:{port}"\njob = "sglang"\n')
        got = _wait_for(lambda: _named_or_retry("p", tmp_path, env), proc)
        # not the dcgm job's target; sorted (Prometheus lists its targets in no fixed order)
        assert got.replicas == tuple(sorted(s.base_url for s in two_sims))
        env = write_config(tmp_path, f'[fleets.p]\nprometheus = "http://127.0.0.1:{port}"\njob = "vllm"\n')
        with pytest.raises(FleetError, match="has no active target of job 'vllm'"):
            fleets.named("p", cwd=tmp_path, env=env)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _named_or_retry(name: str, cwd: Path, env: dict[str, str]) -> Any:
    try:
        return fleets.named(name, cwd=cwd, env=env)
    except FleetError as exc:  # Prometheus not up yet, or its targets not synced yet
        raise AssertionError(str(exc)) from None


@pytest.mark.integration
def test_collect_fleet_collects_every_replica(two_sims: list[SimulatorProcess], tmp_path: Path) -> None:
    from tests.conftest import db_rows

    urls = ", ".join(f'"{s.base_url}"' for s in two_sims)
    env = write_config(tmp_path, f"[fleets.pair]\nservers = [{urls}]\n")
    db = tmp_path / "c.db"
    argv = [
        *SPECTOWER_CLI,
        "collect",
        "--fleet",
        "pair",
        "--db",
        str(db),
        "--duration",
        "3s",
        "--interval",
        "1s",
    ]
    done = subprocess.run(
        argv, cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rows = db_rows(db, "SELECT url FROM server WHERE id IN (SELECT DISTINCT server_id FROM engine_sample)")
    assert sorted(r[0] for r in rows) == sorted(s.base_url for s in two_sims)


def test_prometheus_targets_come_sorted_whatever_order_prometheus_lists_them() -> None:
    # Prometheus answers /api/v1/targets from a map: the same targets in another order on the next call
    def targets(order: list[str]) -> dict[str, Any]:
        active = [{"labels": {"job": "sglang"}, "scrapeUrl": f"http://{where}/metrics"} for where in order]
        active.append({"labels": {"job": "dcgm"}, "scrapeUrl": "http://10.0.0.9:9400/metrics"})
        return {"status": "success", "data": {"activeTargets": active}}

    seen = []
    for order in (["10.0.0.2:30000", "10.0.0.1:30000"], ["10.0.0.1:30000", "10.0.0.2:30000"]):
        body = targets(order)
        transport = httpx.MockTransport(lambda request, body=body: httpx.Response(200, json=body))
        seen.append(fleets.prometheus_targets("http://prom:9090", "sglang", transport=transport))
    assert seen[0] == seen[1] == ["http://10.0.0.1:30000", "http://10.0.0.2:30000"]
