"""A sweep as storage rows: one ``BenchRun`` and one ``BenchPoint`` per (concurrency, mode).

Points use SGLang's benchmark-client names; what has no column (std/p95 figures, the steady windows, the
knob value, where the accept length came from) goes to ``extra_json`` so nothing measured is lost.
"""

from __future__ import annotations

import json
import math
from typing import Any

from spectower.collectors.bench.sweep import PointResult, SweepResult
from spectower.storage.models import BenchPoint, BenchRun

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


def to_models(result: SweepResult) -> tuple[BenchRun, list[BenchPoint]]:
    cfg = result.config
    cross = result.crossover()
    info = result.server_info
    params = cfg.params() | {
        "interrupted": result.interrupted,
        "knob_before": result.knob_before,
        "knob_restored": result.knob_restored,
        "max_running_requests": result.max_running_requests,
        "crossover_status": cross.status if cross else None,
    }
    run = BenchRun(
        created_at=result.started_at,
        source=SOURCE,
        tag=cfg.tag,
        server_url=cfg.server,
        backend=backend_name(cfg.api),
        dataset_name=dataset_name(cfg.api),
        served_model_name=info.get("served_model_name"),
        sglang_version=info.get("version"),
        server_info_json=json.dumps(info, default=str),
        gpu_inventory_json=json.dumps(result.gpu_inventory) if result.gpu_inventory is not None else None,
        params_json=json.dumps(params),
        crossover=cross.value if cross else None,
        crossover_lo=cross.lo if cross else None,
        crossover_hi=cross.hi if cross else None,
        best_max_bs=result.best_max_bs(),
    )
    ratios = {r.concurrency: r for r in result.ratios()}
    points = [_point(p, ratios.get(p.concurrency)) for p in result.points]
    return run, points


def _point(p: PointResult, ratio: Any) -> BenchPoint:
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
        spec_on=p.mode == "on",
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
