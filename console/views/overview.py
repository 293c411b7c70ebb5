"""Overview (live): per server the numbers an operator reads first, then per-GPU small multiples."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ...storage import Database
from .. import charts, data, estimate, gpu_grid, pause_marks, settings
from . import common

OVERVIEW_MAX_POINTS = 300  # each overview line: at most this many buckets
# each scrape interval's p50 and p99 (the collector's quantiles of its histograms' deltas)
LATENCY_COLUMNS = ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s")
GPU_MAX_POINTS = 120  # each GPU small multiple: at most this many buckets
GPU_METRICS = {
    "gpu_util_pct": ("Utilisation", "%"),
    "memory_used_mib": ("Memory used", "MiB"),
    "power_w": ("Power", "W"),
    "temperature_c": ("Temperature", "°C"),
}


ALL_SERVERS = "All servers"


def render() -> None:
    st.title("Overview")
    db = common.page_database()
    if db is None:
        return
    urls = list(data.servers(db)["url"])
    only = None
    if len(urls) > 1:  # the URL's ?server= narrows the page to one server
        key = "ov_server"
        if key not in st.session_state:
            wanted = st.query_params.get(common.SERVER_PARAM)
            st.session_state[key] = wanted if wanted in urls else ALL_SERVERS
        only = st.selectbox("Server", [ALL_SERVERS, *urls], key=key)
        if only == ALL_SERVERS:
            only = None
            st.query_params.pop(common.SERVER_PARAM, None)
        else:
            st.query_params[common.SERVER_PARAM] = only
    elif urls:
        st.query_params[common.SERVER_PARAM] = urls[0]
    st.fragment(run_every=settings.refresh_s())(common.shows_database_errors(_live))(only)


def _live(only: str | None = None) -> None:
    db = common.store()
    win = common.window()
    servers = data.servers(db)
    if only is not None:
        servers = servers[servers["url"] == only]
    mode = "pinned" if common.is_pinned() else f"Live · refreshes every {settings.refresh_s():g} s"
    st.caption(f"{mode} · range {win.label} · {common.clock(win.t0)} → {common.clock(win.t1)}")
    for _, server in servers.iterrows():
        with st.container(border=True):
            server_panel(db, server, win)
    gpu_panel(db, win)


def server_panel(db: Database, server: pd.Series, win: common.Window) -> None:
    latest = data.latest_engine(db, int(server["id"]))
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
    setter = data.last_setter(db, str(server["url"]))
    series, knob_sets = _server_series(db, server, win)
    pauses = data.server_pauses(db, int(server["id"]), win.t0, win.t1, min_seconds=pause_marks.MIN_MARKED_S)
    _numbers_now(server, latest, setter, stale)
    # one time axis for the server's four charts: the latency charts sit under the knob chart to be read
    # against it
    x_range = charts.data_window(win.t0, win.t1, server.get("first_seen"), series)
    _server_charts(server, series, knob_sets, x_range, stale, pauses)
    _latency_charts(server, series, x_range, stale, pauses)
    _latency_now(latest, stale)


def _server_series(db: Database, server: pd.Series, win: common.Window) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The server's throughput, requests and knob over the window, and the confirmed knob sets in it."""
    series = data.engine_series(
        db, int(server["id"]), win.t0, win.t1,
        ["output_tok_s", "prefill_tok_s", "num_running_reqs", "num_queue_reqs", "spec_max_bs",
         *LATENCY_COLUMNS],
        OVERVIEW_MAX_POINTS,
    )  # fmt: skip
    events = data.control_events(db, server_url=str(server["url"]), t0=win.t0)
    if not events.empty:
        events = events[
            (events["action"] == "set") & events["confirmed"].astype(bool) & (events["ts"] <= win.t1)
        ]
    return series, events


def _numbers_now(
    server: pd.Series, latest: dict[str, Any], setter: dict[str, Any] | None, stale: bool
) -> None:
    """The newest sample's figures: output, speculation and who set the knob, load, accept, KV cache."""
    max_running = None if pd.isna(server.get("max_running_requests")) else int(server["max_running_requests"])
    knob = latest.get("spec_max_bs")
    knob_int = None if knob is None else int(knob)
    who = f"set by {setter['actor']} {common.ago(setter['ts'])}" if setter else "never set through spectower"
    gated = None if stale else data.gated_reason(latest)

    def show(v: float | None, digits: int = 1, unit: str = "") -> str:
        if stale:
            return "—"
        return "no data" if v is None or pd.isna(v) else common.fmt(v, digits, unit)

    def spec(v: float | None, digits: int) -> str:
        return "gated" if gated and not stale else show(v, digits)

    top = st.columns([1.4, 1.4, 1, 1])
    with top[0]:
        caption = (
            f"last known {common.fmt(latest['output_tok_s'], 0)} tok/s" if stale
            else f"output, all DP ranks, last {data.NOW_RATE_WINDOW_S:.0f} s"
        )
        value = common.fmt(latest["output_tok_s"], 0) if latest["output_tok_s"] is not None else "no data"
        common.big_number("Output tok/s", value, caption, stale=stale)
    with top[1]:
        label = estimate.knob_label(knob_int, max_running)
        knob_text = "no reading" if knob_int is None else f"spec_max_bs = {knob_int}"
        common.big_number("Speculation", label.upper(), f"{knob_text} · {who}", stale=stale)
    top[2].metric("Running requests", show(latest["num_running_reqs"], 0), help=f"max {max_running}")
    top[3].metric("Queued requests", show(latest["num_queue_reqs"], 0))
    row = st.columns(6)
    row[0].metric("Input tok/s", show(latest["prefill_tok_s"], 0),
                  help=f"prefill tokens per second over the last {data.NOW_RATE_WINDOW_S:.0f} s")
    gate_help = f"Gated: {gated}; the accept figures apply only while drafting." if gated else None
    row[1].metric("Accept length", spec(latest["spec_accept_length"], 2), help=gate_help or "tokens per step")
    row[2].metric("Accept rate", spec(latest["spec_accept_rate"], 2), help=gate_help or "accepted / drafted")
    row[3].metric("Draft steps", show(latest["spec_num_steps"], 0), help="active speculative steps now")
    usage = latest.get("token_usage")
    row[4].metric(
        "KV cache used",
        show(None if usage is None else usage * 100.0, 1 if (usage or 0) >= 0.1 else 2, "%"),
        help="SGLang token_usage: the share of the KV cache's tokens in use",
    )
    row[5].metric("SGLang gen tok/s", show(latest["gen_throughput"], 0), help="SGLang's own gen_throughput")
    if gated:
        st.caption(f"Speculation is gated: {gated}. Accept length and rate apply only while drafting.")


def _server_charts(
    server: pd.Series,
    series: pd.DataFrame,
    knob_sets: pd.DataFrame,
    x_range: tuple[float, float],
    stale: bool,
    pauses: pd.DataFrame,
) -> None:
    """Throughput (with the server's pauses marked: a doubled latency's usual cause) beside requests and the
    knob (with its confirmed sets), each with its CSV."""
    sid = int(server["id"])
    max_running = None if pd.isna(server.get("max_running_requests")) else int(server["max_running_requests"])
    left, right = st.columns(2)
    with left:
        fig = charts.timeseries(
            series, {"output_tok_s": "output", "prefill_tok_s": "input (prefill)"}, "Throughput", "tok/s",
            stale=stale, height=260, x_range=x_range,
        )  # fmt: skip
        tok_cols = ["ts", *[c for c in series if c.startswith(("output_tok", "prefill_tok"))]]
        common.chart(pause_marks.mark_pauses(fig, pauses, stale),
                     lambda: pause_marks.with_pauses(series[tok_cols], pauses),
                     f"ov_tok_{sid}", f"throughput-server{sid}")  # fmt: skip
    with right:
        fig = charts.load_and_knob(series, knob_sets, max_running, x_range, stale=stale)
        knob_cols = ["ts", "num_running_reqs", "num_queue_reqs", "spec_max_bs"]
        common.chart(fig, lambda: _with_events(series[knob_cols], knob_sets), f"ov_knob_{sid}",
                     f"requests-knob-server{sid}")  # fmt: skip


def _latency_charts(
    server: pd.Series, series: pd.DataFrame, x_range: tuple[float, float], stale: bool, pauses: pd.DataFrame
) -> None:
    """TTFT and ITL over the window, p50 and p99 of each scrape interval (the band: the bucket's best and
    worst interval), the server's pauses marked: when latency doubled, and beside the knob chart above
    (the same time axis) whether the knob moved then."""
    sid = int(server["id"])
    ms = data.in_ms(series, LATENCY_COLUMNS)
    for column, (kind, title) in zip(st.columns(2), (("ttft", "TTFT"), ("itl", "ITL")), strict=True):
        with column:
            fig = charts.timeseries(ms, {f"{kind}_p50_ms": "p50", f"{kind}_p99_ms": "p99"}, title, "ms",
                                    stale=stale, height=240, x_range=x_range)  # fmt: skip
            common.chart(pause_marks.mark_pauses(fig, pauses, stale), ms.filter(regex=f"^(ts|{kind}_)"),
                         f"ov_{kind}_{sid}", f"{kind}-server{sid}")  # fmt: skip


def _latency_now(latest: dict[str, Any], stale: bool) -> None:
    lat = pd.DataFrame(
        {
            name: [common.fmt(data.to_ms(latest.get(f"{key}_{p}_s")), 0, "ms") for p in ("p50", "p90", "p99")]
            for name, key in (("TTFT", "ttft"), ("ITL", "itl"), ("End-to-end", "e2e"))
        },
        index=["p50", "p90", "p99"],
    )
    st.markdown("**Latency now**" + (" (stale)" if stale else ""))
    st.dataframe(lat, width="content")


def _with_events(series: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The requests/knob series with each knob change (who, old -> new, why) as extra rows."""
    if events.empty:
        return series
    ev = events[["ts", "actor", "old_max_bs", "new_max_bs", "reason"]].rename(
        columns={"actor": "knob_set_by", "old_max_bs": "knob_old", "new_max_bs": "knob_new", "reason": "why"}
    )
    return pd.concat([series, ev], ignore_index=True).sort_values("ts")


def gpu_panel(db: Database, win: common.Window) -> None:
    st.subheader("GPUs")
    gpus = data.latest_gpu(db)
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
    series = data.gpu_series(db, list(labels), win.t0, win.t1, [metric], GPU_MAX_POINTS)
    fig = gpu_grid.gpu_grid(series, metric, labels, chosen, GPU_METRICS[metric][1], (win.t0, win.t1))
    common.chart(fig, lambda: series.assign(gpu=series["gpu_id"].map(labels)), "ov_gpu_grid", f"gpu-{metric}")
