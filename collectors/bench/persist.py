"""A sweep as storage rows: one ``BenchRun`` and one ``BenchPoint`` per (concurrency, mode); a replay
(`bench replay`) as one run and one open-loop point (``replay_to_models``).

Points use SGLang's benchmark-client names; what has no column (std/p95 figures, the steady windows, the
knob value, where the accept length came from) goes to ``extra_json`` so nothing measured is lost.

``extra_json["mode"]`` is ``on``, ``off`` (the knob at 0) or ``plain`` (``--plain-server``, a server without
speculation). A plain row has ``spec_on`` NULL: it is neither side of the knob, and a reader that pairs
``spec_on`` true/false rows (the on/off speedup) must not take it for the knob-off side. Every row of a level
carries that level's ``ratio_off_plain`` / ``ratio_on_plain`` (with ``_lo`` / ``_hi``) in ``extra_json``, and
the run's ``params_json`` the plain server, its facts and ``crossover_vs_plain``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ...storage.models import BenchPoint, BenchRun
from .ratio import Crossover, RatioPoint
from .replay import ReplayResult
from .stats import request_figures
from .sweep import PLAIN, PointResult, SweepResult

SOURCE = "sweep"
_COLUMNS = {
    name
    for name in BenchPoint.model_fields
    if name
    not in {
        "id",
        "run_id",
        "concurrency",
        "spec_on",
        "ratio_ci_lo",
        "ratio_ci_hi",
        "extra_json",
        "request_rate",
        "duration_s",
        "accept_length",
    }
}


def backend_name(api: str) -> str:
    return "sglang" if api == "generate" else "sglang-oai"


def dataset_name(api: str) -> str:
    return "random-ids" if api == "generate" else "random"


def _measured_run(
    source: str, result: SweepResult | ReplayResult, dataset: str, params: dict[str, Any], **more: Any
) -> BenchRun:
    """The run of a measurement this client made (a sweep or a replay): the columns both fill the same way
    (when, what measured it, against which server, what that server said it is, the parameters: the
    config's, whether it was interrupted, the server's max_running_requests, then ``params``), ``more`` the
    columns only one of them has."""
    cfg, info = result.config, result.server_info
    shared = {"interrupted": result.interrupted, "max_running_requests": result.max_running_requests}
    return BenchRun(
        created_at=result.started_at,
        source=source,
        tag=cfg.tag,
        server_url=cfg.server,
        backend=backend_name(cfg.api),
        dataset_name=dataset,
        served_model_name=info.get("served_model_name"),
        sglang_version=info.get("version"),
        server_info_json=json.dumps(info, default=str),
        params_json=json.dumps(cfg.params() | shared | params),
        **more,
    )


def to_models(result: SweepResult) -> tuple[BenchRun, list[BenchPoint]]:
    cfg = result.config
    cross = result.crossover()
    params = {
        "knob_before": result.knob_before,
        "knob_restored": result.knob_restored,
        # the knob's per-slice moves live in the run, not the audit (two audit rows per sweep)
        "knob_found": result.knob_found,
        "knob_note": result.knob_note,
        "knob_moves": result.knob_moves,
        "crossover_status": cross.status if cross else None,
        "prefill": result.prefill.to_json() if result.prefill is not None else None,
    }
    if cfg.plain_server is not None:
        plain_info = result.plain_server_info or {}
        params["plain_server_info"] = {k: plain_info.get(k) for k in PLAIN_INFO_KEYS}
        params["crossover_vs_plain"] = _crossover_json(result.crossover_vs_plain())
    run = _measured_run(
        SOURCE,
        result,
        dataset_name(cfg.api),
        params,
        gpu_inventory_json=json.dumps(result.gpu_inventory) if result.gpu_inventory is not None else None,
        crossover=cross.value if cross else None,
        crossover_lo=cross.lo if cross else None,
        crossover_hi=cross.hi if cross else None,
        best_max_bs=result.best_max_bs(),
    )
    ratios = {r.concurrency: r for r in result.ratios()}
    vs_plain = {
        "ratio_off_plain": {r.concurrency: r for r in result.ratios("off", PLAIN)},
        "ratio_on_plain": {r.concurrency: r for r in result.ratios("on", PLAIN)},
    }
    points = []
    for p in result.points:
        point = _point(p, ratios.get(p.concurrency))
        extra = json.loads(point.extra_json or "{}")
        for name, by_level in vs_plain.items():
            r = by_level.get(p.concurrency)
            if r is not None:
                extra.update({name: r.ratio, f"{name}_lo": r.lo, f"{name}_hi": r.hi})
        point.extra_json = json.dumps(extra, default=str)
        points.append(point)
    return run, points


# What a run keeps of --plain-server's /server_info (the full one of --server is server_info_json).
PLAIN_INFO_KEYS = (
    "served_model_name",
    "model_path",
    "version",
    "max_running_requests",
    "tp_size",
    "dp_size",
    "speculative_algorithm",
)


def _crossover_json(cross: Crossover | None) -> dict[str, Any] | None:
    if cross is None:
        return None
    return {"status": cross.status, "value": cross.value, "lo": cross.lo, "hi": cross.hi}


def _point(p: PointResult, ratio: RatioPoint | None) -> BenchPoint:
    figures = p.figures
    columns = {k: _finite(figures.get(k)) for k in _COLUMNS if k in figures}
    extra = {k: v for k, v in figures.items() if k not in _COLUMNS}
    extra.update(
        {
            "mode": p.mode,
            "knob_value": p.knob_value,
            "accept_length_source": p.accept_length_source,
            "started_at": p.started_at,
        }
    )
    if ratio is not None:
        extra["ratio"] = ratio.ratio
    extra.pop("request_rate", None)
    return BenchPoint(
        concurrency=float(p.concurrency),
        spec_on=None if p.mode == PLAIN else p.mode == "on",
        request_rate=None,  # closed loop: no arrival rate (SGLang's client writes inf)
        duration_s=figures.get("duration"),
        accept_length=p.accept_length,
        ratio_ci_lo=ratio.lo if ratio is not None else None,
        ratio_ci_hi=ratio.hi if ratio is not None else None,
        extra_json=json.dumps(extra, default=str),
        **columns,
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


REPLAY_SOURCE = "replay"


def replay_to_models(result: ReplayResult) -> tuple[BenchRun, list[BenchPoint]]:
    """A replay as one run (source ``replay``) and one open-loop point: ``concurrency`` NULL,
    ``request_rate`` the offered arrivals per second, bench_serving's latency columns, and the open-loop
    figures (goodput, the SLO, shed and cut requests) in ``extra_json``; the run's ``params_json`` keeps the
    trace, its speedup and rate scale, and the knob the server had."""
    cfg = result.config
    figures = result.figures()
    params = {"knob": result.knob, "goodput_rps": figures["goodput_rps"]}
    run = _measured_run(REPLAY_SOURCE, result, f"trace:{Path(cfg.trace).name}", params)
    columns = request_figures([r for r in result.records if not r.aborted], result.span_s)
    extra = {k: v for k, v in columns.items() if k not in _COLUMNS}
    extra.update({k: v for k, v in figures.items() if k not in _COLUMNS})
    extra["mode"] = "replay"
    knob, top = result.knob, result.max_running_requests
    point = BenchPoint(
        concurrency=None,  # open loop: no concurrency is held
        spec_on=None if knob is None or (top is not None and 0 < knob < top) else knob > 0,
        request_rate=_finite(figures.get("offered_rps")),
        duration_s=result.span_s,
        extra_json=json.dumps(extra, default=str),
        **{k: _finite(v) for k, v in columns.items() if k in _COLUMNS},
    )
    return run, [point]
