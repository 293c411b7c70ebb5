"""The GPUs behind a benchmarked server, kept with the run so two runs compare stack against stack.

Two sources: NVML on this host (when the server runs here), or the server host's dcgm-exporter
``/metrics`` (its labels name each GPU; driver and CUDA versions are not in dcgm-exporter's labels).
"""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

DCGM_MEMORY_USED = "DCGM_FI_DEV_FB_USED"
DCGM_MEMORY_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_POWER_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"  # not in dcgm-exporter's default metric list
DCGM_POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
DCGM_ANY = "DCGM_FI_DEV_GPU_UTIL"


def nvml_inventory() -> list[dict[str, Any]] | None:
    """The GPUs NVML sees on this host, or None where there is no NVML (no driver, no GPU)."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda_raw = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda = f"{cuda_raw // 1000}.{(cuda_raw % 1000) // 10}"
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append(
                {
                    "index": i,
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                    "name": _text(pynvml.nvmlDeviceGetName(h)),
                    "memory_total_mib": pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**20,
                    "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
                    "driver_version": driver,
                    "cuda_version": cuda,
                    "source": "nvml",
                }
            )
        return out or None
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def dcgm_inventory(url: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """One entry per ``gpu`` label of a dcgm-exporter ``/metrics``; raises ConnectionError/ValueError."""
    try:
        resp = httpx.get(url, timeout=timeout)
    except httpx.HTTPError as exc:
        raise ConnectionError(f"--gpu-metrics {url}: unreachable ({exc})") from None
    if resp.status_code != 200:
        raise ConnectionError(f"--gpu-metrics {url}: HTTP {resp.status_code}")
    gpus: dict[str, dict[str, Any]] = {}
    values: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            if not sample.name.startswith("DCGM_FI_") or "gpu" not in sample.labels:
                continue
            idx = sample.labels["gpu"]
            entry = gpus.setdefault(idx, {"index": int(idx) if idx.isdigit() else idx, "source": "dcgm"})
            entry.setdefault("uuid", sample.labels.get("UUID"))
            entry.setdefault("name", sample.labels.get("modelName"))
            if sample.labels.get("DCGM_FI_DRIVER_VERSION"):
                entry.setdefault("driver_version", sample.labels["DCGM_FI_DRIVER_VERSION"])
            values[(idx, sample.name)] = sample.value
    if not gpus:
        raise ValueError(f"--gpu-metrics {url}: no DCGM_FI_* samples with a 'gpu' label")
    for idx, entry in gpus.items():
        used, free = values.get((idx, DCGM_MEMORY_USED)), values.get((idx, DCGM_MEMORY_FREE))
        if used is not None and free is not None:
            entry["memory_total_mib"] = used + free
        if (idx, DCGM_POWER_LIMIT) in values:
            entry["power_limit_w"] = values[(idx, DCGM_POWER_LIMIT)]
        if (idx, DCGM_POWER_USAGE) in values:
            entry["power_usage_w"] = values[(idx, DCGM_POWER_USAGE)]
    return [gpus[k] for k in sorted(gpus, key=lambda k: (len(k), k))]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
