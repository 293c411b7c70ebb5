"""GPUs through a dcgm-exporter ``/metrics`` (hosts where NVML is not local) → ``GpuReading``s.

dcgm-exporter labels each series with ``gpu`` (index), ``UUID``, ``modelName``, ``Hostname`` (+ ``device``,
``pci_bus_id``, pod labels). Gauges map one to one; ``DCGM_FI_PROF_PCIE_*_BYTES`` are already rates
(bytes/s); ``DCGM_FI_DEV_PCIE_*_THROUGHPUT`` (KB/s) is the older fallback. The reading's host is the
``Hostname`` label when present, else the exporter's host:port.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import httpx

from ...storage.integers import int_or_none
from ..http import BoundedReadError, KeepAliveGets, get_bounded
from ..promtext import MetricsParseError, PerLabelSet, PromSample, parse_prometheus_text
from .reading import GpuFacts, GpuReading

DEFAULT_TIMEOUT_S = 5.0

# dcgm field -> (GpuReading attribute, scale)
FIELD_MAP: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mib", 1.0),  # MiB
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_bytes_s", 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_bytes_s", 1.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_bytes_s", 1.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_bytes_s", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", 1.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_corrected", 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_uncorrected", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": ("xid_errors", 1.0),
}
FALLBACKS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": ("pcie_tx_bytes_s", 1000.0),  # KB/s
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": ("pcie_rx_bytes_s", 1000.0),
}
INT_ATTRS = frozenset({"throttle_reasons", "ecc_corrected", "ecc_uncorrected", "xid_errors"})


class DcgmError(ConnectionError):
    """One scrape of a dcgm-exporter failed (connection, timeout, HTTP error, unparsable body)."""


def exporter_host(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or url


def _gpu(labels: Mapping[str, str]) -> tuple[str, int, str | None] | None:
    """(UUID, index, Hostname label) of a series' labels; None when they name no GPU (one GPU's odd label
    skips that GPU, not the whole scrape's rows)."""
    uuid = labels.get("UUID") or labels.get("uuid")
    gpu = labels.get("gpu")
    if not uuid or gpu is None:
        return None
    try:
        index = int_or_none(int(gpu), lo=0)  # a column of int32 on every backend: range-checked here
    except ValueError:
        return None
    return None if index is None else (uuid, index, labels.get("Hostname") or None)


_gpu_of = PerLabelSet(_gpu)


def readings_from_samples(
    samples: list[PromSample], ts: float, default_host: str
) -> tuple[list[GpuReading], list[GpuFacts]]:
    by_gpu: dict[tuple[str, str], GpuReading] = {}
    facts: dict[tuple[str, str], dict[str, object]] = {}
    fb_free: dict[tuple[str, str], float] = {}
    primary_seen: set[tuple[tuple[str, str], str]] = set()
    for s in samples:
        if not s.name.startswith("DCGM_FI_"):
            continue
        gpu = _gpu_of(s.labels)
        if gpu is None:
            continue
        uuid, index, hostname = gpu
        host = hostname or default_host
        key = (host, uuid)
        r = by_gpu.get(key)
        if r is None:
            r = by_gpu[key] = GpuReading(host=host, index=index, uuid=uuid, ts=ts)
            facts[key] = {"name": s.labels.get("modelName"), "driver": s.labels.get("DCGM_FI_DRIVER_VERSION")}
        if s.name == "DCGM_FI_DEV_FB_FREE":
            fb_free[key] = s.value
            continue
        if s.name in FIELD_MAP:
            attr, scale = FIELD_MAP[s.name]
            primary_seen.add((key, attr))
        elif s.name in FALLBACKS:
            attr, scale = FALLBACKS[s.name]
            if (key, attr) in primary_seen:
                continue
        else:
            continue
        value = s.value * scale
        if attr in INT_ATTRS:
            setattr(r, attr, int_or_none(value, lo=0))  # range-checked where it enters
        else:
            setattr(r, attr, float(value) if math.isfinite(value) else None)
    out_facts: list[GpuFacts] = []
    for key, r in by_gpu.items():
        if r.memory_used_mib is not None and key in fb_free:
            r.memory_total_mib = r.memory_used_mib + fb_free[key]
        name, driver = facts[key].get("name"), facts[key].get("driver")
        out_facts.append(
            GpuFacts(
                host=r.host,
                index=r.index,
                uuid=r.uuid,
                name=name if isinstance(name, str) else None,
                memory_total_mib=r.memory_total_mib,
                power_limit_w=r.power_limit_w,
                driver_version=driver if isinstance(driver, str) and driver else None,
                source="dcgm",
            )
        )
    order = sorted(by_gpu, key=lambda k: (k[0], by_gpu[k].index))
    return [by_gpu[k] for k in order], sorted(out_facts, key=lambda f: (f.host, f.index))


FAMILIES = frozenset({*FIELD_MAP, *FALLBACKS, "DCGM_FI_DEV_FB_FREE"})


def parse_dcgm(text: str, ts: float, default_host: str) -> tuple[list[GpuReading], list[GpuFacts]]:
    return readings_from_samples(parse_prometheus_text(text, families=FAMILIES), ts, default_host)


class DcgmScraper:
    source = "dcgm"

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient | KeepAliveGets,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url.rstrip("/")
        if not self.url.endswith("/metrics"):
            self.url += "/metrics"
        self._client = client
        self._timeout_s = timeout_s
        self._clock = clock
        self.host = exporter_host(url)

    async def scrape(self) -> tuple[list[GpuReading], list[GpuFacts]]:
        try:
            resp = await get_bounded(self._client, self.url, timeout_s=self._timeout_s)
        except BoundedReadError as exc:
            raise DcgmError(str(exc)) from None
        if resp.status_code != 200:
            raise DcgmError(f"{self.url}: HTTP {resp.status_code}")
        try:
            return parse_dcgm(resp.text, self._clock(), self.host)
        except MetricsParseError as exc:
            raise DcgmError(f"{self.url}: {exc}") from None
