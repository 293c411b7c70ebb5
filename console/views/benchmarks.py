"""Benchmarks: runs, one run's curves, two runs compared, start a sweep, export and import."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from ...storage import Database
from .. import bench_io, data, estimate, settings, sweeps
from ..bench_charts import bench_curves, bench_speedups
from . import common

RUN_COLUMNS = [
    "id",
    "created_at",
    "source",
    "tag",
    "server_url",
    "served_model_name",
    "sglang_version",
    "points",
    "crossover",
    "best_max_bs",
]
SECTIONS = ("Runs", "Compare two runs", "Start a sweep", "Export / import")
STACK_KEYS = ("sglang_version", "served_model_name", "backend", "dataset_name", "server_url")


def render() -> None:
    st.title("Benchmarks")
    db = common.page_database("benchmark runs", needs_server=False)
    if db is None:
        return
    runs = data.bench_runs(db)
    # a section picker rather than st.tabs: tabs run every section on each rerun, this runs one
    section = st.radio(
        "Section", SECTIONS, horizontal=True, key="bench_section", label_visibility="collapsed"
    )
    if section == "Runs":
        _runs(db, runs)
    elif section == "Compare two runs":
        _compare(db, runs)
    elif section == "Start a sweep":
        servers = data.servers(db)
        sweeps.render_sweep_form(None if servers.empty else str(servers["url"].iloc[0]))
    else:
        _export(db, runs)
        _import(db)


def _label(runs: pd.DataFrame, rid: int) -> str:
    r = runs[runs["id"] == rid].iloc[0]
    tag = common.text_or(r["tag"], str(r["source"]))
    model = common.text_or(r["served_model_name"], "?")
    return f"#{rid} {tag} · {model} · {common.clock(r['created_at'])[:16]}"


def sweep_hint(db_url: str) -> str:
    """The command the empty page suggests: saved (--save) into the database this page reads."""
    return f"spectower bench sweep --server http://127.0.0.1:30000 --save --db {db_url}"


# The runs table's columns, short headers, sized so the table fits a 1280 px page (wider: it scrolls inside).
RUN_TABLE_CONFIG = {
    "id": st.column_config.NumberColumn("run", width="small", format="#%d"),
    "created_at": st.column_config.TextColumn("created (UTC)", width="medium"),
    "source": st.column_config.TextColumn("source", width="small"),
    "tag": st.column_config.TextColumn("tag", width="medium"),
    "server_url": st.column_config.TextColumn("server", width="medium"),
    "served_model_name": st.column_config.TextColumn("model", width="medium"),
    "sglang_version": st.column_config.TextColumn("SGLang", width="small"),
    "points": st.column_config.NumberColumn("points", width="small"),
    "crossover": st.column_config.NumberColumn("crossover", width="small", format="%.1f"),
    "best_max_bs": st.column_config.NumberColumn("best knob", width="small"),
}


def runs_table(runs: pd.DataFrame) -> pd.DataFrame:
    shown = runs[[c for c in RUN_COLUMNS if c in runs]].copy()
    shown["created_at"] = [common.clock(t)[:16] for t in shown["created_at"]]
    return shown


def _runs(db: Any, runs: pd.DataFrame) -> None:
    if runs.empty:
        st.info(
            "No benchmark runs yet. Start one under **Start a sweep** above, or import SGLang bench_serving "
            "JSONL files under **Export / import**."
        )
        # wrapped: a long --db ran off the block's right edge behind a scroll bar
        st.code(sweep_hint(settings.db_url()), language="bash", wrap_lines=True)
        return
    st.dataframe(runs_table(runs), width="stretch", hide_index=True, column_config=RUN_TABLE_CONFIG)
    rid = st.selectbox(
        "Run", list(runs["id"].astype(int)), format_func=lambda i: _label(runs, i), key="bench_run"
    )
    points = data.bench_points(db, [rid])
    curve = estimate.bench_speedup(points)
    stored = runs[runs["id"] == rid].iloc[0]["crossover"]
    cross = (
        float(stored)
        if not pd.isna(stored)
        else (
            estimate.crossover(list(curve["concurrency"]), list(curve["speedup"]))
            if not curve.empty
            else None
        )
    )
    c1, c2, c3 = st.columns(3)
    row = runs[runs["id"] == rid].iloc[0]
    interval = (
        f" The sweep's interval: {common.fmt(row['crossover_lo'], 1)} … {common.fmt(row['crossover_hi'], 1)}."
        if not pd.isna(row.get("crossover_lo"))
        else ""
    )
    c1.metric(
        "Crossover", common.fmt(cross, 1), help="concurrency where spec on stops beating spec off." + interval
    )
    c2.metric("Best speedup", "—" if curve.empty else f"×{curve['speedup'].max():.2f}")
    c3.metric("Points", str(len(points)))
    left, right = st.columns(2)
    with left:
        common.chart(bench_curves({f"#{rid}": points}), _point_columns(points), "bench_tok",
                     f"run{rid}-throughput")  # fmt: skip
    with right:
        common.chart(bench_speedups({f"#{rid}": curve}, {f"#{rid}": cross}), curve, "bench_speed",
                     f"run{rid}-speedup")  # fmt: skip
    if not curve.empty and curve["ci_lo"].isna().all():
        st.caption("This run stores no interval on its speedups (imported results have none; sweeps do).")
    lat = st.selectbox(
        "Latency",
        [
            "median_ttft_ms",
            "p99_ttft_ms",
            "median_itl_ms",
            "p99_itl_ms",
            "median_e2e_latency_ms",
            "p99_e2e_latency_ms",
        ],
        key="bench_lat",
    )
    common.chart(bench_curves({f"#{rid}": points}, lat), _point_columns(points, lat), "bench_latency",
                 f"run{rid}-{lat}")  # fmt: skip
    with st.expander("Points"):
        st.dataframe(points.drop(columns=["extra_json"], errors="ignore"), width="stretch", hide_index=True)


def _point_columns(points: pd.DataFrame, what: str = "output_throughput") -> pd.DataFrame:
    cols = [c for c in ("run_id", "concurrency", "request_rate", "spec_on", what) if c in points]
    return points[cols]


def _stack(run: pd.Series) -> dict[str, Any]:
    """The software/hardware stack a run was measured on, flattened for a side-by-side diff."""
    stack: dict[str, Any] = {k: run.get(k) for k in STACK_KEYS}
    for col, prefix in (
        ("server_info_json", "server"),
        ("gpu_inventory_json", "gpu"),
        ("params_json", "params"),
    ):
        raw = run.get(col)
        if isinstance(raw, str) and raw:
            try:
                stack.update(_flatten(json.loads(raw), prefix))
            except ValueError:
                stack[prefix] = raw
    return stack


def _flatten(obj: Any, prefix: str) -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}"))
        return out
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: json.dumps(obj) if isinstance(obj, list) else obj}


def stack_difference(a: pd.Series, b: pd.Series) -> pd.DataFrame:
    sa, sb = _stack(a), _stack(b)
    rows = [(k, sa.get(k), sb.get(k)) for k in sorted(set(sa) | set(sb)) if str(sa.get(k)) != str(sb.get(k))]
    return pd.DataFrame(rows, columns=["what", f"run #{a['id']}", f"run #{b['id']}"])


def _compare(db: Any, runs: pd.DataFrame) -> None:
    if len(runs) < 2:
        st.info("Comparing needs two runs; there are " + str(len(runs)) + ".")
        return
    ids = list(runs["id"].astype(int))
    c1, c2 = st.columns(2)
    a = c1.selectbox("Run A", ids, index=1, format_func=lambda i: _label(runs, i), key="cmp_a")
    b = c2.selectbox("Run B", ids, index=0, format_func=lambda i: _label(runs, i), key="cmp_b")
    points = data.bench_points(db, [a, b])
    pa, pb = points[points["run_id"] == a], points[points["run_id"] == b]
    ca, cb = estimate.bench_speedup(pa), estimate.bench_speedup(pb)
    xa = estimate.crossover(list(ca["concurrency"]), list(ca["speedup"])) if not ca.empty else None
    xb = estimate.crossover(list(cb["concurrency"]), list(cb["speedup"])) if not cb.empty else None
    m1, m2 = st.columns(2)
    m1.metric(f"Crossover A (#{a})", common.fmt(xa, 1))
    m2.metric(
        f"Crossover B (#{b})",
        common.fmt(xb, 1),
        delta=None if xa is None or xb is None else f"{xb - xa:+.1f}",
    )
    left, right = st.columns(2)
    with left:
        common.chart(bench_curves({f"A #{a}": pa, f"B #{b}": pb}), _point_columns(points), "cmp_tok",
                     f"runs{a}-{b}-throughput")  # fmt: skip
    with right:
        fig = bench_speedups({f"A #{a}": ca, f"B #{b}": cb}, {f"A #{a}": xa, f"B #{b}": xb})
        both = pd.concat([ca.assign(run=a), cb.assign(run=b)], ignore_index=True)
        common.chart(fig, both, "cmp_speed", f"runs{a}-{b}-speedup")
    st.markdown("**Stack difference** (what changed between the two runs)")
    diff = stack_difference(runs[runs["id"] == a].iloc[0], runs[runs["id"] == b].iloc[0])
    if diff.empty:
        st.caption("Same recorded stack.")
    else:
        st.dataframe(diff.astype(str), width="stretch", hide_index=True)


def _export(db: Any, runs: pd.DataFrame) -> None:
    st.subheader("Export")
    if runs.empty:
        st.caption("Nothing to export yet.")
        return
    ids = st.multiselect(
        "Runs",
        list(runs["id"].astype(int)),
        default=list(runs["id"].astype(int))[:1],
        format_func=lambda i: _label(runs, i),
        key="exp_runs",
    )
    fmt = st.radio("Format", bench_io.FORMATS, horizontal=True, key="exp_fmt")
    if ids:
        name = bench_io.export_name(ids, fmt)
        # deferred: the file is written only when the button is clicked, never on a page refresh
        st.download_button(
            f"Download {fmt}", lambda: bench_io.export_runs(db, ids, fmt)[0], name, bench_io.MIME[fmt],
            key="exp_dl", on_click="ignore",
        )  # fmt: skip


def _import(db: Database) -> None:
    st.subheader("Import SGLang bench_serving results")
    files = st.file_uploader(
        "bench_serving JSONL files (one result object per line)", type=["jsonl", "json"],
        accept_multiple_files=True, key="imp_files",
    )  # fmt: skip
    if files and st.button("Import", key="imp_go"):
        for f in files:
            try:
                got = bench_io.import_upload(db, f.name, f.getvalue())
            except ValueError as exc:
                st.error(f"{f.name}: {exc}")
                continue
            if got.duplicate_of is not None:
                st.info(f"{got.name}: already imported as run #{got.duplicate_of}; nothing written.")
                continue
            st.success(f"{got.name}: imported as run #{got.run_id} ({got.points} points)")
            for line, why in got.line_errors[:10]:
                st.warning(f"{got.name} line {line} skipped: {why}")
