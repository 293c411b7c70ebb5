"""GPUs: per-GPU history (utilisation, memory, power, temperature, clocks, links), health, processes."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from .. import charts, data, gpu_grid, settings
from . import common

GPU_PAGE_MAX_POINTS = 300
# NVML clock-event reasons worth an operator's attention (nvmlClocksEventReason* bits).
THROTTLE_BITS = {
    0x2: "applications clocks",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "HW power brake",
}
HISTORY = {
    "Utilisation": ({"gpu_util_pct": "SM %", "mem_util_pct": "memory bw %"}, "%"),
    "Memory": ({"memory_used_mib": "used", "memory_total_mib": "total"}, "MiB"),
    "Power": ({"power_w": "power", "power_limit_w": "limit"}, "W"),
    "Temperature": ({"temperature_c": "temperature"}, "°C"),
    "Clocks": ({"sm_clock_mhz": "SM", "mem_clock_mhz": "memory"}, "MHz"),
    "PCIe": ({"pcie_tx_bytes_s": "tx", "pcie_rx_bytes_s": "rx"}, "B/s"),
    "NVLink": ({"nvlink_tx_bytes_s": "tx", "nvlink_rx_bytes_s": "rx"}, "B/s"),
}


def throttle_text(mask: float | int | None) -> str:
    if mask is None or pd.isna(mask):
        return "—"
    names = [name for bit, name in THROTTLE_BITS.items() if int(mask) & bit]
    return ", ".join(names) if names else "none"


def render() -> None:
    st.title("GPUs")
    db = common.page_database("GPU samples", needs_server=False)
    if db is None:
        return
    inventory = data.latest_gpu(db)
    if inventory.empty:
        st.info(
            "No GPU source is collected yet. Add `--gpu nvml` (on the GPU host) or `--gpu dcgm=URL` to the "
            "collector, e.g.:"
        )
        st.code(settings.collect_hint().replace("--gpu nvml", "--gpu nvml"), language="bash", wrap_lines=True)
        return
    labels = short_labels(inventory)
    names = sorted({str(n) for n in inventory["name"].dropna()})
    hosts = sorted({str(h) for h in inventory["host"].dropna()})
    st.caption(f"{len(labels)} GPUs on {', '.join(hosts)}: {', '.join(names) or 'model not reported'}")
    # compact: one short chip per GPU (the model is said once above), all picked by default
    chosen = st.pills(
        "GPUs", list(labels), selection_mode="multi", default=list(labels), format_func=lambda i: labels[i],
        key="gpu_ids",
    )  # fmt: skip
    st.fragment(run_every=settings.refresh_s() * 2)(common.shows_database_errors(_live))(tuple(chosen or ()))


def short_labels(inventory: pd.DataFrame) -> dict[int, str]:
    """``#3`` on one host, ``host #3`` when there are several."""
    one_host = inventory["host"].nunique() <= 1
    return {
        int(r.gpu_id): f"#{r.gpu_index}" if one_host else f"{r.host} #{r.gpu_index}"
        for r in inventory.itertuples()
    }


def _live(gpu_ids: tuple[int, ...]) -> None:
    db = common.store()
    win = common.window()
    inventory = data.latest_gpu(db)
    inventory = inventory[inventory["gpu_id"].isin(gpu_ids)]
    if inventory.empty:
        st.info("Pick at least one GPU.")
        return
    now_rows = []
    for r in inventory.itertuples():
        stale = common.is_stale(r.ts)
        now_rows.append(
            {
                "GPU": f"{r.host} #{r.gpu_index}",
                "source": r.source,
                "status": "LOST" if bool(r.lost) else ("STALE" if stale else "ok"),
                "last sample": common.ago(r.ts),
                "util %": None if stale else common.rounded(r.gpu_util_pct, 0),
                "mem used MiB": None if stale else common.rounded(r.memory_used_mib, 0),
                "power W": None if stale else common.rounded(r.power_w, 1),
                "temp °C": None if stale else common.rounded(r.temperature_c, 0),
                "throttle": throttle_text(r.throttle_reasons),
                "ECC corr/uncorr": f"{_i(r.ecc_corrected)}/{_i(r.ecc_uncorrected)}",
                "XID": _i(r.xid_errors),
            }
        )
    now = pd.DataFrame(now_rows)
    if (now["status"] != "ok").any():
        bad = ", ".join(now[now["status"] != "ok"]["GPU"])
        st.error(f"**STALE / LOST GPUs: {bad}** — their values are blanked, not drawn as current.")
    st.dataframe(now, width="stretch", hide_index=True)

    labels = short_labels(inventory)
    # one metric group at a time: each chart is one small multiple per GPU, and only what is looked at is read
    name = st.radio("History", list(HISTORY), horizontal=True, key="gpu_metric")
    metrics, unit = HISTORY[name]
    series = data.gpu_series(db, list(labels), win.t0, win.t1, list(metrics), GPU_PAGE_MAX_POINTS)
    for metric, label in metrics.items():
        if series.empty or metric not in series or series[metric].isna().all():
            st.caption(f"{name} · {label}: the GPU source does not report it.")
            continue
        x_range = charts.data_window(win.t0, win.t1, inventory["first_seen"].min(), series)
        fig = gpu_grid.gpu_grid(series, metric, labels, f"{name} · {label}", unit, x_range)
        cols = ["gpu_id", "ts", metric, f"{metric}_min", f"{metric}_max"]
        frame = series[cols].assign(gpu=series["gpu_id"].map(labels))
        common.chart(fig, frame, f"gpu_{metric}", f"gpu-{metric}")
    if (inventory["xid_errors"].fillna(0) > 0).any():
        st.error("XID errors reported (see the table's XID column): check `dmesg` on the GPU host.")
    procs = data.gpu_processes(db, list(labels), win.t0)
    st.subheader("Processes")
    if procs.empty:
        st.caption(
            "The GPU source reports no per-process memory in this range (`--gpu nvml` on the GPU host does; "
            "DCGM and Prometheus do not)."
        )
    else:
        st.dataframe(
            process_table(procs, inventory, labels), width="stretch", hide_index=True,
            column_config={
                "GPU memory": st.column_config.NumberColumn(format="%.0f MiB"),
                "share of GPU": st.column_config.ProgressColumn(format="%.1f %%", min_value=0, max_value=100),
            },
        )  # fmt: skip
        st.caption(
            f"Per-process GPU memory as NVML reports it (newest sample {common.ago(procs['ts'].max())}); "
            "the source records PID, process name and memory, not user, SM % or CPU."
        )


def process_table(procs: pd.DataFrame, inventory: pd.DataFrame, labels: dict[int, str]) -> pd.DataFrame:
    """nvitop's process list from what storage keeps: per GPU, each PID's memory and its share of the GPU,
    biggest first."""
    total = inventory.set_index("gpu_id")["memory_total_mib"]
    out = pd.DataFrame(
        {
            "GPU": procs["gpu_id"].map(labels),
            "PID": procs["pid"].astype(int),
            "process": procs["process_name"].fillna("?"),
            "GPU memory": procs["used_memory_mib"],
            "share of GPU": 100.0 * procs["used_memory_mib"] / procs["gpu_id"].map(total),
            "_gpu": procs["gpu_id"],
        }
    )
    return out.sort_values(["_gpu", "GPU memory"], ascending=[True, False]).drop(columns="_gpu")


def _i(v: float | int | None) -> str:
    return "—" if v is None or pd.isna(v) else str(int(v))
