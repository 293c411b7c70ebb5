"""The GPUs behind a benchmarked server, kept with the run so two runs compare stack against stack.

Two sources, read by the collector's own readers: NVML on this host (when the server runs here), or the
server host's dcgm-exporter ``/metrics`` (its labels name each GPU and, where the exporter adds it, the
driver version; the CUDA version is not among them).
"""

from __future__ import annotations

from typing import Any

import httpx

from ..gpu.dcgm import parse_dcgm
from ..gpu.reading import GpuFacts
from ..http import BoundedReadError, is_loopback_url, request_bounded_sync

DCGM_READ_S = 5.0  # one read of the exporter's page, all of it
DCGM_MAX_BYTES = 16 * 1024 * 1024


def _entry(facts: GpuFacts) -> dict[str, Any]:
    """One GPU as a run keeps it (``gpu_inventory_json``). Every fact is there, None (null) where the source
    could not read it, so a stored run says "not readable" for it rather than leaving the key out."""
    return {
        "index": facts.index, "uuid": facts.uuid, "name": facts.name,
        "memory_total_mib": facts.memory_total_mib, "power_limit_w": facts.power_limit_w,
        "driver_version": facts.driver_version, "cuda_version": facts.cuda_version, "source": facts.source,
    }  # fmt: skip


def nvml_inventory() -> list[dict[str, Any]] | None:
    """The GPUs NVML sees on this host, or None where there is no NVML (no driver, no GPU): the collector's
    NVML sampler's inventory (collectors/gpu/nvml.py, the one NVML wrapper)."""
    from ..gpu.nvml import NvmlSampler, NvmlUnavailableError

    sampler = NvmlSampler()
    try:
        facts = sampler.start()
    except NvmlUnavailableError:
        return None
    finally:
        sampler.close()
    return [_entry(f) for f in facts] or None


def dcgm_inventory(url: str, timeout: float = DCGM_READ_S) -> list[dict[str, Any]]:
    """One entry per GPU of a dcgm-exporter ``/metrics`` (the collector's DCGM parser); raises
    ConnectionError/ValueError naming ``--gpu-metrics``."""
    try:
        with httpx.Client() as client:
            resp = request_bounded_sync(client, "GET", url, timeout_s=timeout, max_bytes=DCGM_MAX_BYTES)
    except (httpx.HTTPError, BoundedReadError) as exc:
        raise ConnectionError(f"--gpu-metrics {url}: unreachable ({exc})") from None
    if resp.status_code != 200:
        raise ConnectionError(f"--gpu-metrics {url}: HTTP {resp.status_code}")
    try:
        readings, facts = parse_dcgm(resp.text, 0.0, url)
    except ValueError as exc:
        raise ValueError(f"--gpu-metrics {url}: not a dcgm-exporter page ({exc})") from None
    if not facts:
        raise ValueError(f"--gpu-metrics {url}: no DCGM_FI_* samples with a 'gpu' label")
    # The exporter's page also gives the power drawn now (NVML's inventory reads no sample): null when the
    # page has none for that GPU.
    power = {(r.host, r.index): r.power_w for r in readings}
    ordered = sorted(facts, key=lambda f: f.index)
    return [{**_entry(f), "power_usage_w": power.get((f.host, f.index))} for f in ordered]


def server_inventory(server_url: str, gpu_metrics: str | None) -> list[dict[str, Any]] | None:
    """The GPUs behind ``server_url``: its host's dcgm-exporter when ``gpu_metrics`` names it, else NVML when
    the server runs on this host, else unknown (None). A sweep keeps this with its run; ``control auto``
    compares it with the runs' to find what is known for the server's stack."""
    if gpu_metrics:
        return dcgm_inventory(gpu_metrics)
    return nvml_inventory() if is_loopback_url(server_url) else None
