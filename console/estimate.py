"""Speedup curves and crossovers from benchmark points (pure functions, no I/O).

The live estimate is not here: it is ``control.speedup.estimate`` over the engine's decode counters
(``console.data.live_speedup``), the one the policy and ``spectower control get`` use. Both use the sweep's
rule for the crossover (collectors/bench/ratio.py ``fit_ratios`` + ``first_fall``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..collectors.bench.ratio import first_fall, fit_ratios
from ..control.speedup import SpeedupEstimate


def bench_speedup(points: pd.DataFrame) -> pd.DataFrame:
    """One run's points -> ``concurrency, tok_s_on, tok_s_off, speedup`` (rows where both sides exist)."""
    cols = ["concurrency", "tok_s_on", "tok_s_off", "speedup", "ci_lo", "ci_hi"]
    if points.empty or "spec_on" not in points:
        return pd.DataFrame(columns=cols)
    p = points.dropna(subset=["concurrency", "output_throughput", "spec_on"])
    on = p[p["spec_on"].astype(bool)].groupby("concurrency")["output_throughput"].mean()
    off = p[~p["spec_on"].astype(bool)].groupby("concurrency")["output_throughput"].mean()
    both = pd.concat([on.rename("tok_s_on"), off.rename("tok_s_off")], axis=1).dropna()
    both = both[both["tok_s_off"] > 0]
    both["speedup"] = both["tok_s_on"] / both["tok_s_off"]
    # the sweep's interval on the ratio at each level (stored on its points; imports have none)
    for side in ("lo", "hi"):
        col = f"ratio_ci_{side}"
        ci = p.groupby("concurrency")[col].mean() if col in p else pd.Series(dtype=float)
        both[f"ci_{side}"] = ci.reindex(both.index).astype(float)
    return both.reset_index().rename(columns={"index": "concurrency"})[cols].sort_values("concurrency")


def crossover(
    concurrency: Sequence[float], speedup: Sequence[float], weights: Sequence[float] | None = None
) -> float | None:
    """Where speedup falls through 1.0, None if it never does (or is below 1.0 from the start).

    The sweep's rule (collectors/bench/ratio.py), so a run without a stored crossover (an import) and a
    sweep's are comparable: fit a non-increasing curve to the speedups first (``weights``: how much each
    point counts), then interpolate linearly in log(concurrency) where the fit crosses 1.0. Without the
    fit, one noisy point below 1.0 at low load would be reported as the crossover."""
    cs, fitted = _fitted(concurrency, speedup, weights)
    return first_fall(cs, fitted)


def crossover_label(
    concurrency: Sequence[float], speedup: Sequence[float], weights: Sequence[float] | None = None
) -> str:
    """The crossover as an operator reads it: ``15.2``, ``< 16`` (speculation loses at every load seen),
    ``> 57`` (it wins at every load seen) or ``—`` (nothing measured)."""
    cs, fitted = _fitted(concurrency, speedup, weights)
    if not fitted:
        return "—"
    x = first_fall(cs, fitted)
    if x is not None:
        return f"{x:.1f}"
    if fitted[0] < 1.0:
        return f"< {cs[0]:.0f}"
    return f"> {cs[-1]:.0f}"


def _fitted(
    concurrency: Sequence[float], speedup: Sequence[float], weights: Sequence[float] | None
) -> tuple[list[float], list[float]]:
    """The measured concurrencies in order and the fitted speedups there (positive, non-NaN points)."""
    w = [1.0] * len(speedup) if weights is None else list(weights)
    rows = sorted(
        (float(c), float(s), float(wt))
        for c, s, wt in zip(concurrency, speedup, w, strict=True)
        if not math.isnan(s) and s > 0 and wt > 0
    )
    return [c for c, _, _ in rows], fit_ratios([s for _, s, _ in rows], [wt for _, _, wt in rows])


def interpolate(x: float, xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Linear interpolation inside the measured range; None outside it or with no points."""
    pairs = sorted(zip(xs, ys, strict=True))
    if not pairs or x < pairs[0][0] or x > pairs[-1][0]:
        return None
    for (x0, y0), (x1, y1) in itertools.pairwise(pairs):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return float(pairs[-1][1])


def ratio_interval_text(lo: float, hi: float) -> str:
    """A speedup's interval as ``lo-hi`` at two decimals, more for a bound that two would round onto
    break-even (1.00) from either side: "paying off (95 % 1.00-1.08)" read as undecided where the bound was
    1.004, and the verdict beside it said "is"."""
    return f"{_off_one(lo)}-{_off_one(hi)}"


def _off_one(x: float) -> str:
    digits = 2
    while x != 1.0 and f"{x:.{digits}f}" == f"{1.0:.{digits}f}" and digits < 6:
        digits += 1
    return f"{x:.{digits}f}"


def knob_label(max_bs: int | None, max_running: int | None) -> str:
    """How an operator reads the knob (``control.knob.knob_mode``'s rule): off, on, ``threshold N``, or
    unknown."""
    from ..control.knob_state import knob_mode

    mode = knob_mode(max_bs, max_running)
    return f"threshold {max_bs}" if mode == "threshold" else mode


# a policy's set reason: "move the ceiling 16 -> 4: crossover ~5.3 (1.6-8.8), speedup per bin ..."
_DECISION_CROSSOVER = re.compile(r": crossover ([^,;]+)")


def knob_setter(setter: Mapping[str, Any] | None, knob: int | None) -> tuple[str, str | None] | None:
    """Who set the knob that reads ``knob`` now (``setter``: the newest confirmed set, ``data.last_setter``)
    and, for a policy's set, the crossover its decision read; None where the newest set is not what the
    knob reads (set outside spectower since, or by the launch). A policy scores what each choice served:
    a drafted bin's gated steps (the drain after a burst, explored batches) count against drafting, so
    its crossover can sit well below the live curve's, which compares drafted steps with gated ones."""
    if setter is None or knob is None or setter.get("new_max_bs") is None:
        return None
    if int(setter["new_max_bs"]) != knob:
        return None
    actor = str(setter.get("actor") or "?")
    reason = str(setter.get("reason") or "")
    found = _DECISION_CROSSOVER.search(reason) if actor.startswith("policy:") else None
    return actor, (found.group(1).strip() if found else None)


def live_crossover_metric(est: SpeedupEstimate) -> tuple[str, str]:
    """The live estimate's label (``control.speedup``: "~24 (16-32)", "> 4 (pays at every load seen)",
    "~3 (no 95 % interval yet: ...)", "not enough data") as a metric's short value and the caption under
    it: a metric's value never wraps, and the whole label ran over the next column of a 1280 px page."""
    if est.status == "no_data":
        return "—", est.label
    value, _, note = est.label.partition(" (")
    note = note.removesuffix(")")
    has_interval = est.status == "found" and est.crossover_lo is not None and est.crossover_hi is not None
    return value, (f"95 % interval {note}" if has_interval and note else note)
