"""GPUs through NVML (nvidia-ml-py, module ``pynvml``), nvitop style.

Every NVML call goes through ``NvmlSampler._call``: "not supported" and friends become a missing value
(``None`` plus a reason in ``GpuReading.missing``), a lost GPU (GPU_IS_LOST, UNKNOWN, RESET_REQUIRED,
GPU_NOT_FOUND) marks that one GPU ``lost`` while the others go on, and no NVML library at all raises
``NvmlUnavailableError`` with a clear message from ``start()`` so the daemon turns the GPU source off
instead of crashing.

Only the standard library and nvidia-ml-py are imported here: the same module is run on the lent GPU
machine to record the test fixture (``collectors/gpu/record_run.py``).

PCIe traffic comes from the cumulative byte-counter FIELDS (NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES), turned into
rates between samples: ``nvmlDeviceGetPcieThroughput`` blocks ~20 ms per call, per GPU.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from ..rates import CounterRates
from .reading import GpuFacts, GpuReading, ProcessReading

log = logging.getLogger(__name__)

MIB = 1024.0 * 1024.0
UINT_MAX = 0xFFFFFFFF
# A scopeId of UINT_MAX asks NVML for the NVLink counter summed over all links.
NVLINK_ALL_LINKS = UINT_MAX
# The PCIe byte-counter fields are 32-bit on the H200 with driver 580.159.04 (recorded fixture: the values
# wrap at 2**32, every ~0.5 s at 8 GB/s host->device). More than one wrap between two reads cannot be
# seen, so the daemon also polls just these two fields every DEFAULT_PCIE_POLL_S (``poll_pcie``) and keeps
# an unwrapped running total: correct up to 2**32 B / 0.1 s ~ 43 GB/s per direction. A saturated PCIe Gen5
# x16 link (~63 GB/s) would still alias; lower the poll period on hosts that move that much.
PCIE_COUNTER_MODULUS = float(2**32)
DEFAULT_PCIE_POLL_S = 0.1
# Power limit can be changed at runtime (nvidia-smi -pl): re-read the cached facts this often.
DEFAULT_FACTS_REFRESH_S = 60.0

FI_PCIE_TX = int(getattr(pynvml, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 197))
FI_PCIE_RX = int(getattr(pynvml, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 198))
FI_NVLINK_TX = int(getattr(pynvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138))  # KiB, cumulative
FI_NVLINK_RX = int(getattr(pynvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139))
DEFAULT_FIELDS: tuple[tuple[int, int], ...] = (
    (FI_PCIE_TX, 0),
    (FI_PCIE_RX, 0),
    (FI_NVLINK_TX, NVLINK_ALL_LINKS),
    (FI_NVLINK_RX, NVLINK_ALL_LINKS),
)

# Errors that mean "this GPU is gone": mark it lost, keep sampling the others.
LOST_CODES = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        getattr(pynvml, "NVML_ERROR_GPU_NOT_FOUND", 28),
    }
)
# Errors at nvmlInit that mean "no usable NVML on this host".
UNAVAILABLE_CODES = frozenset(
    {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
)


class _Unwrapped:
    """A wrapping hardware counter made monotonic: each read adds (new - old) mod modulus."""

    def __init__(self, modulus: float) -> None:
        self.modulus = modulus
        self.last_raw: float | None = None
        self.total = 0.0

    def feed(self, raw: float) -> float:
        if self.last_raw is None:
            self.total = raw
        else:
            self.total += (raw - self.last_raw) % self.modulus
        self.last_raw = raw
        return self.total


class NvmlUnavailableError(RuntimeError):
    """NVML cannot be used on this host (no library, no driver, mismatch): the GPU source stays off."""


class GpuLostError(Exception):
    def __init__(self, call: str, code: int) -> None:
        super().__init__(f"{call}: {_error_name(code)}")
        self.call = call
        self.code = code


class _NotAvailable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _error_name(code: int) -> str:
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == code:
            return name.removeprefix("NVML_ERROR_").lower()
    return f"nvml_error_{code}"


def _bytes_to_mib(value: float | None) -> float | None:
    return None if value is None else float(value) / MIB


def field_value(fv: Any) -> float | int | None:
    """The number in one ``c_nvmlFieldValue_t`` (by its valueType), or None if that field failed."""
    if int(fv.nvmlReturn) != pynvml.NVML_SUCCESS:
        return None
    kind = int(fv.valueType)
    v = fv.value
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(v.uiVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return int(v.ulVal)
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return int(v.ullVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(v.sllVal)
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return int(v.siVal)
    if kind == getattr(pynvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6):
        return int(v.usVal)
    return None


@dataclass
class _Device:
    index: int
    handle: Any
    facts: GpuFacts
    facts_ts: float
    temperature_call: str | None = None  # which temperature call works on this GPU (found once)
    lost: bool = False
    proc_names: dict[int, str | None] = field(default_factory=dict)


class NvmlSampler:
    """Samples every (or the chosen) local GPU. Blocking calls: run ``sample`` in a worker thread."""

    source = "nvml"

    def __init__(
        self,
        host: str | None = None,
        indices: Sequence[int] | None = None,
        fields: Sequence[tuple[int, int]] = DEFAULT_FIELDS,
        clock: Callable[[], float] = time.time,
        facts_refresh_s: float = DEFAULT_FACTS_REFRESH_S,
        record: bool = False,
    ) -> None:
        self.host = host or socket.gethostname()
        self._indices = list(indices) if indices is not None else None
        self._fields = list(fields)
        self._clock = clock
        self._facts_refresh_s = facts_refresh_s
        self._devices: list[_Device] = []
        self._rates = CounterRates()
        self._unwrapped: dict[tuple[int, str], _Unwrapped] = {}
        # Field reads and their unwrapping happen under one lock: a poll and a sample must feed the
        # unwrapper in the order NVML answered them.
        self._pcie_lock = threading.Lock()
        self._started = False
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        # When recording, every read's plain value (or error) per GPU per sample, for the test fixture.
        self.record = record
        self.last_raw: dict[int, dict[str, Any]] = {}

    # -- the one wrapper ------------------------------------------------------------------------------
    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(pynvml, name, None)
        if fn is None:
            raise _NotAvailable("function_not_found")
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            code = int(getattr(exc, "value", pynvml.NVML_ERROR_UNKNOWN))
            if code in LOST_CODES:
                raise GpuLostError(name, code) from exc
            raise _NotAvailable(_error_name(code)) from exc

    def _read(self, dev: _Device, reading: GpuReading | None, key: str, getter: Callable[[], Any]) -> Any:
        """One read of one value: missing → None (reason noted); lost propagates."""
        try:
            value = getter()
        except _NotAvailable as exc:
            if reading is not None:
                reading.missing[key] = exc.reason
            if self.record:
                self.last_raw.setdefault(dev.index, {})[key] = {"error": exc.reason}
            return None
        except GpuLostError as exc:
            if self.record:
                self.last_raw.setdefault(dev.index, {})[key] = {"error": _error_name(exc.code)}
            raise
        if self.record:
            self.last_raw.setdefault(dev.index, {})[key] = value
        return value

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> list[GpuFacts]:
        """nvmlInit and the GPU inventory. Raises NvmlUnavailableError with a clear reason."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            code = int(getattr(exc, "value", pynvml.NVML_ERROR_UNKNOWN))
            raise NvmlUnavailableError(
                f"NVML is not usable on this host ({_error_name(code)}: {exc}); the NVML GPU source is off"
            ) from exc
        except OSError as exc:  # a broken libnvidia-ml.so can fail at dlopen with an OSError
            raise NvmlUnavailableError(f"NVML library could not be loaded ({exc}); GPU source off") from exc
        self._started = True
        self.driver_version = self._system_str("nvmlSystemGetDriverVersion")
        cuda = self._system_value("nvmlSystemGetCudaDriverVersion_v2") or self._system_value(
            "nvmlSystemGetCudaDriverVersion"
        )
        self.cuda_version = f"{int(cuda) // 1000}.{(int(cuda) % 1000) // 10}" if cuda else None
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            raise NvmlUnavailableError(f"NVML cannot count GPUs ({exc}); the NVML GPU source is off") from exc
        wanted = self._indices if self._indices is not None else list(range(count))
        self._devices = []
        for index in wanted:
            if not 0 <= index < count:
                raise NvmlUnavailableError(f"GPU index {index} does not exist (this host has {count})")
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as exc:
                log.warning("GPU %d: no handle (%s); it is skipped", index, exc)
                continue
            dev = _Device(index=index, handle=handle, facts=GpuFacts(self.host, index, ""), facts_ts=0.0)
            try:
                dev.facts = self._read_facts(dev)
            except GpuLostError as exc:
                dev.lost = True
                dev.facts = GpuFacts(self.host, index, f"lost-{index}")
                log.warning("GPU %d is lost at start (%s)", index, exc)
            dev.facts_ts = self._clock()
            self._devices.append(dev)
        return self.facts()

    def close(self) -> None:
        if self._started:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._started = False

    def facts(self) -> list[GpuFacts]:
        return [d.facts for d in self._devices]

    def _system_str(self, name: str) -> str | None:
        v = self._system_value(name)
        if isinstance(v, bytes):
            return v.decode(errors="replace")
        return None if v is None else str(v)

    def _system_value(self, name: str) -> Any:
        try:
            return self._call(name)
        except (_NotAvailable, GpuLostError):
            return None

    def _read_facts(self, dev: _Device) -> GpuFacts:
        h = dev.handle

        def text(name: str) -> str | None:
            v = self._read(dev, None, name, lambda: self._call(name, h))
            return v.decode(errors="replace") if isinstance(v, bytes) else v

        uuid = text("nvmlDeviceGetUUID") or f"index-{dev.index}"
        mem = self._read(dev, None, "memory", lambda: self._memory(h))
        limit_mw = self._read(
            dev, None, "power_limit_mw", lambda: self._call("nvmlDeviceGetEnforcedPowerLimit", h)
        )
        return GpuFacts(
            host=self.host,
            index=dev.index,
            uuid=uuid,
            name=text("nvmlDeviceGetName"),
            memory_total_mib=_bytes_to_mib(mem["total"]) if mem else None,
            power_limit_w=float(limit_mw) / 1000.0 if limit_mw is not None else None,
            driver_version=self.driver_version,
            cuda_version=self.cuda_version,
            source=self.source,
        )

    # -- per-value getters (plain Python values, JSON-able for the fixture) ---------------------------
    def _memory(self, h: Any) -> dict[str, int]:
        m = self._call("nvmlDeviceGetMemoryInfo", h)
        return {"used": int(m.used), "total": int(m.total)}

    def _utilization(self, h: Any) -> dict[str, int]:
        u = self._call("nvmlDeviceGetUtilizationRates", h)
        return {"gpu": int(u.gpu), "memory": int(u.memory)}

    def _temperature(self, dev: _Device) -> int:
        # The non-deprecated call first; an older driver/binding without it falls back once, for good.
        order = (
            [dev.temperature_call]
            if dev.temperature_call
            else ["nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"]
        )
        last: _NotAvailable | None = None
        for name in order:
            try:
                value = int(self._call(name, dev.handle, pynvml.NVML_TEMPERATURE_GPU))
            except _NotAvailable as exc:
                last = exc
                continue
            dev.temperature_call = name
            return value
        raise last or _NotAvailable("not_supported")

    def _clock_events(self, h: Any) -> int:
        try:
            return int(self._call("nvmlDeviceGetCurrentClocksEventReasons", h))
        except _NotAvailable as exc:
            if exc.reason != "function_not_found":
                raise
            return int(self._call("nvmlDeviceGetCurrentClocksThrottleReasons", h))

    def _fields_raw(self, h: Any) -> list[list[Any]]:
        values = self._call("nvmlDeviceGetFieldValues", h, self._fields)
        out: list[list[Any]] = []
        for fv in values:
            out.append(
                [int(fv.fieldId), int(fv.scopeId), int(fv.timestamp), int(fv.nvmlReturn), field_value(fv)]
            )
        return out

    def _processes(self, h: Any) -> list[list[Any]]:
        merged: dict[int, int | None] = {}
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs = self._call(name, h)
            except _NotAvailable:
                continue
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                pid = int(p.pid)
                if used is not None or pid not in merged:
                    merged[pid] = int(used) if used is not None else None
        return [[pid, used] for pid, used in sorted(merged.items())]

    # -- sampling -------------------------------------------------------------------------------------
    def sample(self) -> list[GpuReading]:
        """One reading per GPU. Never raises for one GPU's trouble."""
        if not self._started:
            raise NvmlUnavailableError("NVML sampler not started")
        self.last_raw = {}
        out: list[GpuReading] = []
        for dev in self._devices:
            out.append(self._sample_one(dev))
        return out

    def _sample_one(self, dev: _Device) -> GpuReading:
        ts = self._clock()
        facts = dev.facts
        reading = GpuReading(host=self.host, index=dev.index, uuid=facts.uuid, ts=ts)
        try:
            if ts - dev.facts_ts >= self._facts_refresh_s or dev.lost:
                dev.facts = facts = self._read_facts(dev)
                reading.uuid = facts.uuid
                dev.facts_ts = ts
            self._fill(dev, reading)
            if dev.lost:
                log.warning("GPU %d (%s) answers again", dev.index, facts.uuid)
            dev.lost = False
        except GpuLostError as exc:
            if not dev.lost:
                log.warning("GPU %d (%s) is lost: %s", dev.index, facts.uuid, exc)
            dev.lost = True
            # A lost GPU reports nothing: keep only the marker, drop partial values and rate baselines.
            reading = GpuReading(host=self.host, index=dev.index, uuid=facts.uuid, ts=ts, lost=True)
            reading.missing["all"] = _error_name(exc.code)
            self._rates.forget((dev.index, "pcie_tx"))
            self._rates.forget((dev.index, "pcie_rx"))
            with self._pcie_lock:
                self._unwrapped.pop((dev.index, "pcie_tx"), None)
                self._unwrapped.pop((dev.index, "pcie_rx"), None)
            self._rates.forget((dev.index, "nvlink_tx"))
            self._rates.forget((dev.index, "nvlink_rx"))
        return reading

    def _fill(self, dev: _Device, r: GpuReading) -> None:
        h = dev.handle
        facts = dev.facts
        util = self._read(dev, r, "utilization", lambda: self._utilization(h))
        if util is not None:
            r.gpu_util_pct = float(util["gpu"])
            r.mem_util_pct = float(util["memory"])
        mem = self._read(dev, r, "memory", lambda: self._memory(h))
        if mem is not None:
            r.memory_used_mib = _bytes_to_mib(mem["used"])
            r.memory_total_mib = _bytes_to_mib(mem["total"])
        else:
            r.memory_total_mib = facts.memory_total_mib
        power_mw = self._read(dev, r, "power_mw", lambda: self._call("nvmlDeviceGetPowerUsage", h))
        r.power_w = float(power_mw) / 1000.0 if power_mw is not None else None
        r.power_limit_w = facts.power_limit_w
        temp = self._read(dev, r, "temperature_c", lambda: self._temperature(dev))
        r.temperature_c = float(temp) if temp is not None else None
        sm = self._read(
            dev, r, "sm_clock", lambda: self._call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM)
        )
        r.sm_clock_mhz = float(sm) if sm is not None else None
        memclk = self._read(
            dev, r, "mem_clock", lambda: self._call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM)
        )
        r.mem_clock_mhz = float(memclk) if memclk is not None else None
        reasons = self._read(dev, r, "clock_event_reasons", lambda: self._clock_events(h))
        r.throttle_reasons = int(reasons) if reasons is not None else None
        with self._pcie_lock:
            fields = self._read(dev, r, "fields", lambda: self._fields_raw(h))
            if fields is not None:
                self._apply_fields(dev, r, fields)
        corrected = self._read(
            dev,
            r,
            "ecc_corrected",
            lambda: self._call(
                "nvmlDeviceGetTotalEccErrors",
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ),
        )
        r.ecc_corrected = int(corrected) if corrected is not None else None
        uncorrected = self._read(
            dev,
            r,
            "ecc_uncorrected",
            lambda: self._call(
                "nvmlDeviceGetTotalEccErrors",
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ),
        )
        r.ecc_uncorrected = int(uncorrected) if uncorrected is not None else None
        procs = self._read(dev, r, "processes", lambda: self._processes(h))
        if procs is not None:
            r.processes = [
                ProcessReading(
                    pid=pid, used_memory_mib=_bytes_to_mib(used), process_name=self._proc_name(dev, pid)
                )
                for pid, used in procs
            ]

    def _apply_fields(self, dev: _Device, r: GpuReading, fields: list[list[Any]]) -> None:
        by_id: dict[int, tuple[int, int, float | int | None]] = {}
        for field_id, _scope, ts_us, ret, value in fields:
            by_id[int(field_id)] = (int(ts_us), int(ret), value)
        for fid, key, attr, scale, modulus in (
            (FI_PCIE_TX, "pcie_tx", "pcie_tx_bytes_s", 1.0, PCIE_COUNTER_MODULUS),
            (FI_PCIE_RX, "pcie_rx", "pcie_rx_bytes_s", 1.0, PCIE_COUNTER_MODULUS),
            (FI_NVLINK_TX, "nvlink_tx", "nvlink_tx_bytes_s", 1024.0, None),  # NVLink data counters are KiB
            (FI_NVLINK_RX, "nvlink_rx", "nvlink_rx_bytes_s", 1024.0, None),
        ):
            entry = by_id.get(fid)
            if entry is None:
                continue
            ts_us, ret, value = entry
            if ret != pynvml.NVML_SUCCESS or value is None:
                r.missing[key] = _error_name(ret)
                continue
            # NVML stamps each field value (µs); prefer it to our clock so scheduling jitter cancels out.
            ts = ts_us / 1e6 if ts_us > 0 else r.ts
            counter = float(value)
            if modulus is not None:
                counter = self._unwrapped.setdefault((dev.index, key), _Unwrapped(modulus)).feed(counter)
            rate = self._rates.update((dev.index, key), ts, counter)
            setattr(r, attr, rate * scale if rate is not None else None)

    def poll_pcie(self) -> None:
        """Read only the PCIe byte counters (cheap) so that the 32-bit counters are seen before they wrap
        twice; the daemon calls this every DEFAULT_PCIE_POLL_S between samples."""
        for dev in self._devices:
            if dev.lost:
                continue
            with self._pcie_lock:
                try:
                    values = self._call(
                        "nvmlDeviceGetFieldValues", dev.handle, [(FI_PCIE_TX, 0), (FI_PCIE_RX, 0)]
                    )
                except (_NotAvailable, GpuLostError):
                    continue  # the next full sample says what is wrong
                for fv in values:
                    v = field_value(fv)
                    key = "pcie_tx" if int(fv.fieldId) == FI_PCIE_TX else "pcie_rx"
                    if v is not None:
                        self._unwrapped.setdefault((dev.index, key), _Unwrapped(PCIE_COUNTER_MODULUS)).feed(
                            float(v)
                        )

    def _proc_name(self, dev: _Device, pid: int) -> str | None:
        if pid in dev.proc_names:
            return dev.proc_names[pid]
        name: str | None = None
        try:
            import psutil  # optional: absent on a bare host, pids of other namespaces fail

            name = psutil.Process(pid).name()
        except Exception:
            name = None
        dev.proc_names[pid] = name
        return name
