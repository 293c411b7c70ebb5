"""What a GPU source produces, independent of where it came from (NVML, dcgm-exporter, Prometheus).

Plain dataclasses, no storage import: the NVML sampler also runs on a bare GPU machine (the recording
script) where only the standard library and nvidia-ml-py exist. ``None`` always means "the source did not
report it", never zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class GpuFacts:
    """Slow-changing facts about one GPU (cached by the sources, refreshed rarely)."""

    host: str
    index: int
    uuid: str
    name: str | None = None
    memory_total_mib: float | None = None
    power_limit_w: float | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    source: str = "nvml"


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    used_memory_mib: float | None = None
    process_name: str | None = None


@dataclass
class GpuReading:
    """One sample of one GPU. Rates (PCIe, NVLink) are None on the first sample of a counter."""

    host: str
    index: int
    uuid: str
    ts: float
    lost: bool = False
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    pcie_tx_bytes_s: float | None = None
    pcie_rx_bytes_s: float | None = None
    nvlink_tx_bytes_s: float | None = None
    nvlink_rx_bytes_s: float | None = None
    throttle_reasons: int | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    xid_errors: int | None = None
    processes: list[ProcessReading] = field(default_factory=list)
    # Which NVML/DCGM reads failed and why ("not_supported", ...): kept for the health log, not stored.
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The GpuSample columns a reading fills (the storage mapping copies exactly these): every field but the
# identity (host, index, uuid, ts) and what is not a sample column (processes, missing).
_NOT_SAMPLE = frozenset({"host", "index", "uuid", "ts", "processes", "missing"})
SAMPLE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(GpuReading) if f.name not in _NOT_SAMPLE)
