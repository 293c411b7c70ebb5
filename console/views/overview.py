"""Overview (live): per server the numbers an operator reads first, then per-GPU small multiples."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from spectower.console import charts, data, estimate, settings
from spectower.console.views import common
from spectower.storage import Database

OVERVIEW_MAX_POINTS = 300  # each overview line: at most this many buckets
GPU_MAX_POINTS = 120  # each GPU small multiple: at most this many buckets
GPU_METRICS = {
    "gpu_util_pct": ("Utilisation", "%"),
    "memory_used_mib": ("Memory used", "MiB"),
    "power_w": ("Power", "W"),
    "temperature_c": ("Temperature", "°C"),
}


def render() -> None:
    st.title("Overview")
    eng = common.engine()
    if common.no_data_notice(eng) or eng is None:
        return
    st.fragment(run_every=settings.refresh_s())(_live)()


def _live() -> None:
    eng = common.store()
    win = common.window()
    servers = data.servers(eng)
    st.caption(
        f"Live · refreshes every {settings.refresh_s():g} s · range {win.label} · {common.clock(win.t1)}"
    )
    for _, server in servers.iterrows():
        with st.container(border=True):
            server_panel(eng, server, win)
    gpu_panel(eng, win)


def server_panel(eng: Database, server: pd.Series, win: common.Window) -> None:
    latest = data.latest_engine(eng, int(server["id"]))
    model = server.get("served_model_name") or "model ?"
    version = server.get("sglang_version") or "?"
    st.subheader(f"{server['url']}")
    st.caption(f"{model} · SGLang {version} · {server.get('speculative_algorithm') or 'no speculation'}")
    if latest is None:
        st.info("No engine samples from this server yet.")
        return
    stale = common.is_stale(latest["ts"])
    if stale:
        common.stale_banner(server["url"], latest["ts"])
    max_running = None if pd.isna(server.get("max_running_requests")) else int(server["max_running_requests"])
    knob = latest.get("spec_max_bs")
    knob_int = None if knob is None else int(knob)
    setter = data.last_setter(eng, str(server["url"]))
    who = f"set by {setter['actor']} {common.ago(setter['ts'])}" if setter else "never set through spectower"

    def show(v: float | None, digits: int = 1, unit: str = "") -> str:
        return "—" if stale else common.fmt(v, digits, unit)

    top = st.columns([2.2, 1, 1, 1])
    with top[0]:
        caption = (
            f"last known {common.fmt(latest['output_tok_s'], 0)} tok/s" if stale else "output, all DP ranks"
        )
        common.big_number("Output tok/s", common.fmt(latest["output_tok_s"], 0), caption, stale=stale)
    with top[1]:
        label = estimate.knob_label(knob_int, max_running)
        common.big_number("Speculation", label.upper() if not stale else label, who, stale=stale)
    top[2].metric("Running requests", show(latest["num_running_reqs"], 0))
    top[3].metric("Queued requests", show(latest["num_queue_reqs"], 0))
    row = st.columns(6)
    row[0].metric("Accept length", show(latest["spec_accept_length"], 2))
    row[1].metric("Accept rate", show(latest["spec_accept_rate"], 2))
    row[2].metric("Active steps", show(latest["spec_num_steps"], 0))
    row[3].metric(
        "Knob (spec_max_bs)",
        "—" if stale or knob_int is None else str(knob_int),
        help=f"max_running_requests = {max_running}",
    )
    row[4].metric("Gen throughput (SGLang)", show(latest["gen_throughput"], 0))
    row[5].metric("Token usage", show(latest["token_usage"], 2))
    lat = pd.DataFrame(
        {
            name: [common.fmt(_ms(latest.get(f"{key}_{p}_s")), 0, "ms") for p in ("p50", "p90", "p99")]
            for name, key in (("TTFT", "ttft"), ("ITL", "itl"), ("End-to-end", "e2e"))
        },
        index=["p50", "p90", "p99"],
    )
    left, right = st.columns([1, 3])
    with left:
        st.markdown("**Latency**" + (" (stale)" if stale else ""))
        st.dataframe(lat, width="stretch")
    with right:
        series = data.engine_series(
            eng,
            int(server["id"]),
            win.t0,
            win.t1,
            ["output_tok_s", "num_running_reqs", "num_queue_reqs"],
            OVERVIEW_MAX_POINTS,
        )
        fig = charts.timeseries(
            series, {"output_tok_s": "output tok/s"}, "Output tok/s", "tok/s", stale=stale, height=230
        )
        st.plotly_chart(fig, width="stretch", key=f"ov_tok_{server['id']}")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def gpu_panel(eng: Database, win: common.Window) -> None:
    st.subheader("GPUs")
    gpus = data.latest_gpu(eng)
    if gpus.empty:
        st.info(
            "No GPU source is collected. Add `--gpu nvml` (on the GPU host) or `--gpu dcgm=URL` to "
            "`spectower collect` to see utilisation, memory, power and temperature here."
        )
        return
    newest = gpus["ts"].max()
    if common.is_stale(newest):
        common.stale_banner("GPU samples", None if pd.isna(newest) else float(newest))
    labels = {int(r.gpu_id): f"{r.host} #{r.gpu_index}" for r in gpus.itertuples()}
    names = {name: metric for metric, (name, _) in GPU_METRICS.items()}
    chosen = st.radio("GPU metric", list(names), horizontal=True, key="ov_gpu_metric")
    metric = names[chosen]
    series = data.gpu_series(eng, list(labels), win.t0, win.t1, [metric], GPU_MAX_POINTS)
    fig = charts.gpu_grid(series, metric, labels, chosen, GPU_METRICS[metric][1])
    st.plotly_chart(fig, width="stretch", key="ov_gpu_grid")
