"""collectors.gpu.nvml against real H200 readings, replayed through nvidia-ml-py's own functions and errors.

``tests/fixtures/nvml/h200_run.json`` was recorded by ``spectower.collectors.gpu.record_run`` on the lent H200
(driver 580.159.04) while a bf16 matmul + host->device copy loop ran: for each sample, every NVML read's
plain value. Here each ``pynvml.nvmlDeviceGet*`` is patched to hand those values back in pynvml's own
shapes (ctypes field-value structs, friendly objects, NVMLError subclasses), and the sampler's readings
are checked against the numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from spectower.collectors.gpu.nvml import (
    PCIE_COUNTER_MODULUS,
    NvmlSampler,
    NvmlUnavailableError,
)

FIXTURE = Path(__file__).parent / "fixtures" / "nvml" / "h200_run.json"
ERROR_CODES = {
    "not_supported": pynvml.NVML_ERROR_NOT_SUPPORTED,
    "gpu_is_lost": pynvml.NVML_ERROR_GPU_IS_LOST,
    "unknown": pynvml.NVML_ERROR_UNKNOWN,
}


class Replay:
    """Patches pynvml so that sample i answers what the real GPU answered at sample i."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.i = 0
        self.start_raw = doc["start_raw"]
        self.count = len(doc["facts"])
        mp = monkeypatch
        mp.setattr(pynvml, "nvmlInit", lambda: None)
        mp.setattr(pynvml, "nvmlShutdown", lambda: None)
        mp.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: doc["meta"]["driver_version"])
        mp.setattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", lambda: 13000)
        mp.setattr(pynvml, "nvmlDeviceGetCount", lambda: self.count)
        mp.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
        mp.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: self._start(h, "nvmlDeviceGetUUID"))
        mp.setattr(pynvml, "nvmlDeviceGetName", lambda h: self._start(h, "nvmlDeviceGetName"))
        mp.setattr(pynvml, "nvmlDeviceGetEnforcedPowerLimit", lambda h: self._start(h, "power_limit_mw"))
        mp.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(**self._raw(h, "memory")))
        mp.setattr(
            pynvml,
            "nvmlDeviceGetUtilizationRates",
            lambda h: SimpleNamespace(**self._raw(h, "utilization")),
        )
        mp.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda h: self._raw(h, "power_mw"))
        mp.setattr(pynvml, "nvmlDeviceGetTemperatureV", lambda h, s: self._raw(h, "temperature_c"))
        mp.setattr(
            pynvml,
            "nvmlDeviceGetClockInfo",
            lambda h, t: self._raw(h, "sm_clock" if t == pynvml.NVML_CLOCK_SM else "mem_clock"),
        )
        mp.setattr(
            pynvml, "nvmlDeviceGetCurrentClocksEventReasons", lambda h: self._raw(h, "clock_event_reasons")
        )
        mp.setattr(pynvml, "nvmlDeviceGetFieldValues", self._fields)
        mp.setattr(
            pynvml,
            "nvmlDeviceGetTotalEccErrors",
            lambda h, kind, counter: self._raw(
                h, "ecc_corrected" if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "ecc_uncorrected"
            ),
        )
        mp.setattr(
            pynvml,
            "nvmlDeviceGetComputeRunningProcesses",
            lambda h: [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self._raw(h, "processes")],
        )
        mp.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses", lambda h: [])

    def _value(self, v: Any) -> Any:
        if isinstance(v, dict) and set(v) == {"error"}:
            raise pynvml.NVMLError(ERROR_CODES[v["error"]])
        return v

    def _start(self, h: int, key: str) -> Any:
        return self._value(self.start_raw[str(h)][key])

    def _raw(self, h: int, key: str) -> Any:
        return self._value(self.doc["samples"][self.i]["raw"][str(h)][key])

    def _fields(self, h: int, ids: list[tuple[int, int]]) -> Any:
        recorded = {(f[0], f[1]): f for f in self._raw(h, "fields")}
        arr = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for k, (fid, scope) in enumerate(ids):
            _, _, ts_us, ret, value = recorded[(fid, scope)]
            arr[k].fieldId, arr[k].scopeId, arr[k].timestamp, arr[k].nvmlReturn = fid, scope, ts_us, ret
            arr[k].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            if value is not None:
                arr[k].value.ullVal = int(value)
        return arr


@pytest.fixture
def h200() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def _run(replay: Replay) -> list[Any]:
    clock_ts = [s["t"] for s in replay.doc["samples"]]
    sampler = NvmlSampler(host="h200", clock=lambda: clock_ts[min(replay.i, len(clock_ts) - 1)])
    facts = sampler.start()
    assert [f.name for f in facts] == ["NVIDIA H200"]
    out = []
    for i in range(len(replay.doc["samples"])):
        replay.i = i
        [reading] = sampler.sample()
        out.append(reading)
    sampler.close()
    return out


def test_h200_facts(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    Replay(monkeypatch, h200)
    sampler = NvmlSampler(host="h200")
    [f] = sampler.start()
    assert f.uuid == "GPU-d34c3f73-d1a4-a2b1-5017-63f3ecd6feec"
    assert f.memory_total_mib == 143771.0
    assert f.power_limit_w == 700.0
    assert f.driver_version == "580.159.04" and f.cuda_version == "13.0"


def test_h200_replay_idle_vs_load(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    replay = Replay(monkeypatch, h200)
    readings = _run(replay)
    assert len(readings) == 120
    idle = [r for r, s in zip(readings, h200["samples"], strict=True) if s["elapsed_s"] < 4]
    busy = [r for r, s in zip(readings, h200["samples"], strict=True) if 15 < s["elapsed_s"] < 50]
    assert idle and busy
    for r in idle:
        assert r.gpu_util_pct == 0.0 and r.sm_clock_mhz == 345.0
        assert 70 < r.power_w < 90 and r.temperature_c < 45
        assert r.throttle_reasons == 1  # GPU idle
    for r in busy:
        assert r.gpu_util_pct >= 99 and r.power_w > 650 and r.power_limit_w == 700.0
        assert r.throttle_reasons == 4  # software power cap
        assert 1400 <= r.sm_clock_mhz <= 1980 and r.mem_clock_mhz == 3201.0
        assert r.memory_used_mib == pytest.approx(2137.875)
        assert r.processes and r.processes[0].used_memory_mib == pytest.approx(1514.0)
        # 256 MiB host->device every ~33 ms: ~8 GB/s RX once the 32-bit counter's wrap is accounted for
        assert 6e9 < r.pcie_rx_bytes_s < 10e9
        assert 5e8 < r.pcie_tx_bytes_s < 9e8
    for r in readings:
        assert not r.lost
        assert r.ecc_corrected == 0 and r.ecc_uncorrected == 0
        assert r.nvlink_tx_bytes_s is None and r.missing["nvlink_tx"] == "not_supported"
        assert r.memory_total_mib == 143771.0


def test_pcie_rate_by_hand_matches(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    replay = Replay(monkeypatch, h200)
    readings = _run(replay)
    k = 40
    (_, _, t0, _, rx0), (_, _, t1, _, rx1) = (
        h200["samples"][k - 1]["raw"]["0"]["fields"][1],
        h200["samples"][k]["raw"]["0"]["fields"][1],
    )
    expected = ((rx1 - rx0) % PCIE_COUNTER_MODULUS) / ((t1 - t0) / 1e6)
    assert readings[k].pcie_rx_bytes_s == pytest.approx(expected)


def test_real_capture_nvml_samples(real_data: Path) -> None:
    # The earlier capture (170 readings during the SGLang load): the same field ids our sampler asks for.
    samples = json.loads((real_data / "sglang-0.5.17-h200/nvml_samples.json").read_text())
    assert len(samples) == 170
    first = samples[0]
    assert first["mem_total"] == 150754820096 and first["power_limit_mw"] == 700000
    ids = {f[0] for f in first["fields"]}
    assert {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES} <= ids
    from spectower.collectors.rates import CounterRates

    rates = CounterRates()
    out = []
    for s in samples:
        rx = next(f[2] for f in s["fields"] if f[0] == pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES)
        out.append(rates.update("rx", s["t"], rx, modulus=PCIE_COUNTER_MODULUS))
    assert out[0] is None and all(v is not None and v >= 0 for v in out[1:])
    assert max(s["util_gpu"] for s in samples) > 0


def test_not_supported_becomes_missing(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    replay = Replay(monkeypatch, h200)

    def not_supported(*a: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", not_supported)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", not_supported)
    sampler = NvmlSampler(host="h")
    sampler.start()
    replay.i = 30
    [r] = sampler.sample()
    assert r.power_w is None and r.missing["power_mw"] == "not_supported"
    assert r.pcie_rx_bytes_s is None and r.missing["fields"] == "not_supported"
    assert r.gpu_util_pct == 99.0 or r.gpu_util_pct == 100.0  # the rest still read


def test_temperature_falls_back_when_v_missing(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    replay = Replay(monkeypatch, h200)

    def no_function(*a: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetTemperatureV", no_function)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTemperature", lambda h, s: 55)
    sampler = NvmlSampler(host="h")
    sampler.start()
    replay.i = 0
    [r] = sampler.sample()
    assert r.temperature_c == 55.0


def test_lost_gpu_marked_others_continue(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    doc = json.loads(json.dumps(h200))
    # Two GPUs: GPU 1 replays GPU 0's values under another UUID.
    doc["facts"].append(dict(doc["facts"][0], index=1))
    doc["start_raw"]["1"] = dict(doc["start_raw"]["0"], nvmlDeviceGetUUID="GPU-second")
    for s in doc["samples"]:
        s["raw"]["1"] = s["raw"]["0"]
    replay = Replay(monkeypatch, doc)
    real_util = pynvml.nvmlDeviceGetUtilizationRates
    lost = {"on": False}

    def util(h: int) -> Any:
        if h == 1 and lost["on"]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return real_util(h)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", util)
    sampler = NvmlSampler(host="h")
    facts = sampler.start()
    assert [f.uuid for f in facts] == ["GPU-d34c3f73-d1a4-a2b1-5017-63f3ecd6feec", "GPU-second"]
    replay.i = 20
    a, b = sampler.sample()
    assert not a.lost and not b.lost
    lost["on"] = True
    replay.i = 21
    a, b = sampler.sample()
    assert not a.lost and a.gpu_util_pct is not None and a.power_w is not None
    assert b.lost and b.gpu_util_pct is None and b.power_w is None and b.missing["all"] == "gpu_is_lost"
    lost["on"] = False
    replay.i = 22
    a, b = sampler.sample()
    assert not b.lost and b.gpu_util_pct is not None  # it came back
    assert b.pcie_rx_bytes_s is None  # baseline dropped while lost: no rate across the loss


def test_unknown_error_is_lost_too(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    replay = Replay(monkeypatch, h200)

    def unknown(*a: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", unknown)
    sampler = NvmlSampler(host="h")
    sampler.start()
    replay.i = 5
    [r] = sampler.sample()
    assert r.lost


def test_no_library_clear_message() -> None:
    # On a host without an NVIDIA driver the real nvmlInit fails with LIBRARY_NOT_FOUND.
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has a working NVML")
    sampler = NvmlSampler(host="h")
    with pytest.raises(NvmlUnavailableError, match=r"NVML is not usable on this host .*GPU source is off"):
        sampler.start()


def test_driver_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    def init() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    with pytest.raises(NvmlUnavailableError, match="driver_not_loaded"):
        NvmlSampler().start()


def test_pcie_polling_sees_every_wrap(monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any]) -> None:
    # 12 GB/s host->device: 12 GB per 1 s sample is ~2.8 wraps of the 32-bit counter. Without polls the
    # rate aliases; with poll_pcie every 0.1 s (as the daemon does) it is exact.
    replay = Replay(monkeypatch, h200)
    state = {"t": 1000.0}
    rate = 12e9

    def fields(h: int, ids: list[tuple[int, int]]) -> Any:
        arr = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for k, (fid, scope) in enumerate(ids):
            arr[k].fieldId, arr[k].scopeId, arr[k].timestamp = fid, scope, int(state["t"] * 1e6)
            if fid == pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
                arr[k].nvmlReturn = 0
                arr[k].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                arr[k].value.ullVal = int(rate * state["t"]) % 2**32
            else:
                arr[k].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return arr

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", fields)
    for poll in (False, True):
        sampler = NvmlSampler(host="h")
        sampler.start()
        replay.i = 30
        state["t"] = 1000.0
        sampler.sample()
        for _ in range(10):
            state["t"] += 0.1
            if poll:
                sampler.poll_pcie()
        [r] = sampler.sample()
        if poll:
            assert r.pcie_rx_bytes_s == pytest.approx(rate, rel=1e-6)
        else:
            assert r.pcie_rx_bytes_s is not None and abs(r.pcie_rx_bytes_s - rate) > 1e9  # aliased


def test_daemon_nvml_source_writes_rows(
    monkeypatch: pytest.MonkeyPatch, h200: dict[str, Any], tmp_path: Path
) -> None:
    import asyncio
    import sqlite3

    from spectower.collectors.daemon import Collector, DaemonConfig
    from spectower.collectors.sink import StorageSink
    from spectower.storage import open_database

    replay = Replay(monkeypatch, h200)
    replay.i = 30  # under load
    db = open_database(str(tmp_path / "n.db"))
    collector = Collector(DaemonConfig(gpu="nvml", interval_s=0.5), StorageSink(db))

    def stored() -> int:
        con = sqlite3.connect(tmp_path / "n.db")
        try:
            return int(con.execute("select count(*) from gpu_sample").fetchone()[0])
        except sqlite3.OperationalError:  # not written yet
            return 0
        finally:
            con.close()

    async def main() -> None:
        task = asyncio.create_task(collector.run())
        # until the writer has stored 3 samples (a fixed 2 s once stored 2 on a loaded box), 60 s at most
        for _ in range(600):
            if stored() >= 3 or task.done():
                break
            await asyncio.sleep(0.1)
        collector.stop()
        await task

    asyncio.run(main())
    db.close()
    con = sqlite3.connect(tmp_path / "n.db")
    try:
        [(_host, uuid, name, mem, limit, source)] = con.execute(
            "select host, uuid, name, memory_total_mib, power_limit_w, source from gpu"
        ).fetchall()
        samples = con.execute(
            "select gpu_util_pct, power_w, temperature_c, throttle_reasons, lost from gpu_sample"
        ).fetchall()
        procs = con.execute("select pid, used_memory_mib from gpu_process_sample").fetchall()
    finally:
        con.close()
    assert (uuid, name, mem, limit, source) == (
        "GPU-d34c3f73-d1a4-a2b1-5017-63f3ecd6feec",
        "NVIDIA H200",
        143771.0,
        700.0,
        "nvml",
    )
    assert len(samples) >= 3
    assert all(u >= 99 and p > 650 and t >= 55 and th == 4 and lost == 0 for u, p, t, th, lost in samples)
    assert procs and all(pid == 425 and m == pytest.approx(1514.0) for pid, m in procs)
