"""The reference for the console's Speculation view: how it built the benchmark curves before they were
read once per refresh and cached per choice of runs (console/views/speculation.py ``_bench``), verbatim.
Used by tests only, to show the page shows exactly the same curves, crossovers and three-curve table."""

from __future__ import annotations

import json

import pandas as pd
from spectower.console import data, estimate
from spectower.storage import Database


def _bench_curves(
    db: Database, run_ids: tuple[int, ...]
) -> tuple[dict[str, pd.DataFrame], dict[str, float | None]]:
    curves: dict[str, pd.DataFrame] = {}
    crossovers: dict[str, float | None] = {}
    if not run_ids:
        return curves, crossovers
    points = data.bench_points(db, list(run_ids))
    runs = data.bench_runs(db).set_index("id")
    for rid in run_ids:
        curve = estimate.bench_speedup(points[points["run_id"] == rid])
        label = (
            f"#{rid} {runs.loc[rid, 'tag'] or runs.loc[rid, 'source']}" if rid in runs.index else f"#{rid}"
        )
        curves[label] = curve
        stored = runs.loc[rid, "crossover"] if rid in runs.index else None
        crossovers[label] = (
            float(stored)
            if stored is not None and not pd.isna(stored)
            else estimate.crossover(list(curve["concurrency"]), list(curve["speedup"]))
            if not curve.empty
            else None
        )
        vs_plain = _by_mode(points[points["run_id"] == rid])
        if {"on", "plain"} <= set(vs_plain.columns):
            both = vs_plain.dropna(subset=["on", "plain"])
            both = both[both["plain"] > 0]
            if not both.empty:
                curve = pd.DataFrame({"concurrency": both.index, "speedup": list(both["on"] / both["plain"])})
                curves[f"{label} on / plain"] = curve
                crossovers[f"{label} vs plain"] = estimate.crossover(
                    list(curve["concurrency"]), list(curve["speedup"])
                )
    return curves, crossovers


def _by_mode(points: pd.DataFrame) -> pd.DataFrame:
    """One run's output tok/s per concurrency (index) and mode (columns on, off, plain): a sweep's plain
    points (--plain-server) have spec_on NULL and ``mode: plain`` in extra_json."""
    if points.empty or "extra_json" not in points:
        return pd.DataFrame()
    modes = points["extra_json"].map(lambda t: json.loads(t).get("mode") if isinstance(t, str) else None)
    p = points.assign(mode=modes).dropna(subset=["concurrency", "output_throughput", "mode"])
    return p.pivot_table(index="concurrency", columns="mode", values="output_throughput", aggfunc="mean")


def _three_curves(db: Database, run_ids: tuple[int, ...]) -> pd.DataFrame:
    """Runs measured with a plain server: on / knob off / plain tok/s and off/plain, on/plain per level."""
    if not run_ids:
        return pd.DataFrame()
    points = data.bench_points(db, list(run_ids))
    rows = []
    for rid in run_ids:
        t = _by_mode(points[points["run_id"] == rid])
        if "plain" not in t.columns:
            continue
        for c, r in t.iterrows():
            on, off, plain = (r.get(m) for m in ("on", "off", "plain"))
            rows.append({"run": f"#{rid}", "concurrency": c, "on tok/s": on, "knob off tok/s": off,
                         "plain tok/s": plain, "off / plain": off / plain if plain else None,
                         "on / plain": on / plain if plain else None})  # fmt: skip
    return pd.DataFrame(rows)


def combine_ranks(df: pd.DataFrame) -> dict[str, object] | None:
    """console.data.latest_engine's combination of the ranks' newest samples as it was (pandas per column)."""
    if df.empty:
        return None
    newest = df[df["ts"] >= df["ts"].max() - data.LATEST_RANKS_WINDOW_S]
    row: dict[str, object] = {"ts": float(newest["ts"].max()), "dp_ranks": len(newest)}
    for col in data.ENGINE_COLUMNS:
        values = newest[col].dropna()
        if values.empty:
            row[col] = None
        elif col in data.ADDITIVE_ENGINE_COLUMNS:
            row[col] = float(values.sum())
        else:
            row[col] = float(values.mean())
    for col in ("batches_drafted", "batches_gated"):
        values = newest[col].dropna()
        row[col] = int(values.sum()) if not values.empty else None
    # accept: all tokens over all verify steps, over the ranks that made output and report an accept length
    usable = newest[(newest["output_tok_s"] > 0) & (newest["spec_accept_length"] > 0)]
    if not usable.empty:
        steps = usable["output_tok_s"] / usable["spec_accept_length"]
        row["spec_accept_length"] = float(usable["output_tok_s"].sum() / steps.sum())
        rated = usable["spec_accept_rate"].notna()
        if rated.any():
            row["spec_accept_rate"] = float((usable["spec_accept_rate"][rated] * steps[rated]).sum()
                                            / steps[rated].sum())  # fmt: skip
    return row
