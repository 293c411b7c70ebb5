"""The virtual GPUs' dcgm-exporter endpoint: names, labels, and readings that follow the load."""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.sim_fidelity import TokenClock, stream_worker
from tests.simulator_process import SimulatorFactory

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


def test_readings_follow_the_load(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(profile="llama31-8b-1x-h100")
    time.sleep(2.5)
    idle = _read(sim.gpu_metrics_url)

    async def load() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            stop = time.monotonic() + 6.0
            await asyncio.gather(
                *(stream_worker(client, sim.base_url, 5000, TokenClock(), stop, {}) for _ in range(32))
            )

    asyncio.run(load())
    busy = _read(sim.gpu_metrics_url)
    g = "0"
    assert idle["DCGM_FI_DEV_GPU_UTIL"][g] == 0
    assert busy["DCGM_FI_DEV_GPU_UTIL"][g] > 80
    assert busy["DCGM_FI_DEV_POWER_USAGE"][g] > idle["DCGM_FI_DEV_POWER_USAGE"][g] * 2
    assert busy["DCGM_FI_DEV_POWER_USAGE"][g] <= 700
    assert busy["DCGM_FI_DEV_GPU_TEMP"][g] > idle["DCGM_FI_DEV_GPU_TEMP"][g]
    assert busy["DCGM_FI_DEV_FB_USED"][g] > idle["DCGM_FI_DEV_FB_USED"][g]
    assert busy["DCGM_FI_PROF_PCIE_TX_BYTES"][g] > 0 == idle["DCGM_FI_PROF_PCIE_TX_BYTES"][g]
    assert busy["DCGM_FI_DEV_XID_ERRORS"][g] == 0
