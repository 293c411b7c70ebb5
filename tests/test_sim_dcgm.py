"""The virtual GPUs' dcgm-exporter endpoint: names, labels, and readings that follow the load."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.simulator_process import SimulatorFactory

POLL_TIMEOUT_S = 60.0  # generous for a loaded 2-core machine; the test returns once the readings show it

REQUIRED = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_XID_ERRORS",
}
LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}


def _read(url: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for s in fam.samples:
            assert set(s.labels) == LABELS, s
            out.setdefault(s.name, {})[s.labels["gpu"]] = s.value
    return out


def test_dcgm_names_labels_and_gpu_count(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(profile="glm5-nvfp4-8x-rtx-pro-6000")
    text = httpx.get(sim.gpu_metrics_url, timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(fams) >= REQUIRED
    for name in REQUIRED:
        assert fams[name].type == "gauge"
        assert len(fams[name].samples) == 8
    sample = fams["DCGM_FI_DEV_GPU_UTIL"].samples[0]
    assert sample.labels["modelName"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert sample.labels["device"] == "nvidia0" and sample.labels["UUID"].startswith("GPU-")
    assert len({s.labels["UUID"] for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples}) == 8
    readings = _read(sim.gpu_metrics_url)
    for gpu in readings["DCGM_FI_DEV_FB_USED"]:
        total = readings["DCGM_FI_DEV_FB_USED"][gpu] + readings["DCGM_FI_DEV_FB_FREE"][gpu]
        assert abs(total - 97887) <= 1


def _energy(readings: dict[str, dict[str, float]]) -> float:
    """GPU 0's energy counter: it grows from the first sample on (the sampler runs every second)."""
    name = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    return (readings.get(name) or readings[name + "_total"])["0"]


def _poll(
    url: str, ready: Callable[[dict[str, dict[str, float]]], bool], what: str
) -> dict[str, dict[str, float]]:
    """The exporter's readings once ``ready`` says so (polled; the sampler's own period sets the pace)."""
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while True:
        readings = _read(url)
        if ready(readings):
            return readings
        assert time.monotonic() < deadline, f"no {what} within {POLL_TIMEOUT_S} s: {readings}"
        time.sleep(0.2)


class _Load:
    """``clients`` streaming /generate clients in a thread of their own, until ``stop()``."""

    def __init__(self, base_url: str, clients: int) -> None:
        self.done = threading.Event()
        body = {
            "text": "load",
            "stream": True,
            "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True},
        }

        async def client(http: httpx.AsyncClient) -> None:
            while not self.done.is_set():
                async with http.stream("POST", f"{base_url}/generate", json=body) as resp:
                    async for _ in resp.aiter_raw():
                        if self.done.is_set():
                            return

        async def run() -> None:
            async with httpx.AsyncClient(timeout=30) as http:
                await asyncio.gather(*(client(http) for _ in range(clients)))

        self.errors: list[BaseException] = []

        def main() -> None:
            try:
                asyncio.run(run())
            except BaseException as exc:  # reported by stop()
                self.errors.append(exc)

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive() and not self.errors, self.errors


def test_readings_follow_the_load(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(profile="llama31-8b-1x-h100")
    g = "0"
    # idle: sampled at least once (the energy counter moved), nothing served yet
    idle = _poll(sim.gpu_metrics_url, lambda r: _energy(r) > 0, "first sample")
    load = _Load(sim.base_url, clients=32)
    try:
        # busy: the first sample that saw a busy second and has warmed the GPU past its idle temperature
        busy = _poll(
            sim.gpu_metrics_url,
            lambda r: (
                r["DCGM_FI_DEV_GPU_UTIL"][g] > 80
                and r["DCGM_FI_DEV_GPU_TEMP"][g] > idle["DCGM_FI_DEV_GPU_TEMP"][g]
            ),
            "busy reading",
        )
    finally:
        load.stop()
    assert idle["DCGM_FI_DEV_GPU_UTIL"][g] == 0
    assert busy["DCGM_FI_DEV_POWER_USAGE"][g] > idle["DCGM_FI_DEV_POWER_USAGE"][g] * 2
    assert busy["DCGM_FI_DEV_POWER_USAGE"][g] <= 700
    assert busy["DCGM_FI_DEV_FB_USED"][g] > idle["DCGM_FI_DEV_FB_USED"][g]
    assert busy["DCGM_FI_PROF_PCIE_TX_BYTES"][g] > 0 == idle["DCGM_FI_PROF_PCIE_TX_BYTES"][g]
    assert busy["DCGM_FI_DEV_XID_ERRORS"][g] == 0
