"""collectors/bench/gpu_inventory.py: a run's GPU inventory keeps every fact, null where the source could
not read it (a stored run then says "not readable" for it, as the inventory before the collector's readers
did), never a missing key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from spectower.collectors.bench import gpu_inventory
from spectower.collectors.gpu import nvml
from spectower.collectors.gpu.reading import GpuFacts

FACT_KEYS = {
    "index", "uuid", "name", "memory_total_mib", "power_limit_w", "driver_version", "cuda_version", "source"
}  # fmt: skip


class _SamplerReadingOnlyTheUuid:
    """NvmlSampler's shape: a GPU whose name, memory, power limit and versions NVML could not read."""

    def start(self) -> list[GpuFacts]:
        return [GpuFacts(host="h", index=0, uuid="GPU-0")]

    def close(self) -> None:
        pass


def test_nvml_facts_it_could_not_read_are_null(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "NvmlSampler", _SamplerReadingOnlyTheUuid)
    assert gpu_inventory.nvml_inventory() == [
        {"index": 0, "uuid": "GPU-0", "name": None, "memory_total_mib": None, "power_limit_w": None,
         "driver_version": None, "cuda_version": None, "source": "nvml"}
    ]  # fmt: skip


# One GPU that reports only its utilisation: no modelName, driver label, framebuffer or power series.
BARE_PAGE = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 7\n'
FULL_PAGE = (
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",modelName="NVIDIA H200",DCGM_FI_DRIVER_VERSION="570.1"} 50\n'
    'DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b"} 1000\n'
    'DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-b"} 140000\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b"} 300.5\n'
)


def test_dcgm_facts_the_page_lacks_are_null(monkeypatch: pytest.MonkeyPatch) -> None:
    def page(*_args: Any, **_kwargs: Any) -> httpx.Response:
        return httpx.Response(200, text=BARE_PAGE + FULL_PAGE)

    monkeypatch.setattr(gpu_inventory, "request_bounded_sync", page)
    bare, full = gpu_inventory.dcgm_inventory("http://gpu-host:9400/metrics")
    assert set(bare) == set(full) == FACT_KEYS | {"power_usage_w"}
    assert bare == {"index": 0, "uuid": "GPU-a", "source": "dcgm"} | dict.fromkeys(
        FACT_KEYS - {"index", "uuid", "source"} | {"power_usage_w"}
    )
    assert (full["name"], full["driver_version"], full["memory_total_mib"], full["power_usage_w"]) == (
        "NVIDIA H200", "570.1", 141000.0, 300.5
    )  # fmt: skip
    assert full["power_limit_w"] is None and full["cuda_version"] is None  # not in dcgm-exporter's page
