"""Two saved runs side by side: per concurrency figures, and what differs in their stacks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...storage import queries
from ...storage.database import Database
from ...storage.models import BenchPoint, BenchRun

# server_info keys that change from one launch to the next without changing the stack.
VOLATILE_KEYS = frozenset(
    {
        "internal_states",
        "startup_time",
        "status",
        "version",
        "port",
        "host",
        "nccl_port",
        "random_seed",
        "kv_events",
        "launch_command",
        "dist_init_addr",
        "file_storage_path",
        "crash_dump_folder",
    }
)
GPU_KEYS = ("name", "memory_total_mib", "power_limit_w", "driver_version", "cuda_version")


class RunNotFound(LookupError):
    pass


@dataclass
class LoadedRun:
    run: BenchRun
    points: list[BenchPoint]

    @property
    def server_info(self) -> dict[str, Any]:
        return _json(self.run.server_info_json) or {}

    @property
    def gpus(self) -> list[dict[str, Any]]:
        return _json(self.run.gpu_inventory_json) or []


@dataclass
class Comparison:
    a: LoadedRun
    b: LoadedRun
    rows: list[dict[str, Any]] = field(default_factory=list)
    stack: list[dict[str, Any]] = field(default_factory=list)  # {"what", "a", "b"}

    def to_json(self) -> dict[str, Any]:
        def head(r: LoadedRun) -> dict[str, Any]:
            return {
                "id": r.run.id,
                "tag": r.run.tag,
                "server_url": r.run.server_url,
                "created_at": r.run.created_at,
                "sglang_version": r.run.sglang_version,
                "crossover": r.run.crossover,
                "crossover_lo": r.run.crossover_lo,
                "crossover_hi": r.run.crossover_hi,
                "best_max_bs": r.run.best_max_bs,
                "crossover_vs_plain": (_json(r.run.params_json) or {}).get("crossover_vs_plain"),
            }

        return {"a": head(self.a), "b": head(self.b), "rows": self.rows, "stack_differences": self.stack}


def load_run(db: Database, run_id: int) -> LoadedRun:
    try:
        run = queries.bench_run(db, run_id)
    except LookupError:
        raise RunNotFound(f"RUN {run_id}: no such benchmark run in {db.url}") from None
    return LoadedRun(run, queries.bench_points(db, run_id))


def point_tok_s(p: BenchPoint) -> float | None:
    """The steady-state throughput where a sweep measured it, else SGLang's output_throughput."""
    extra = _json(p.extra_json) or {}
    for key in ("steady_output_throughput",):
        value = extra.get(key)
        if isinstance(value, int | float):
            return float(value)
    return p.output_throughput


# A level of a run: ("C", max_concurrency) for closed-loop points, ("rate", request_rate) for open-loop ones
# (bench_serving's request-rate sweeps), so runs of either kind can be compared.
Level = tuple[str, float]


def _by_level(run: LoadedRun) -> dict[Level, dict[str, BenchPoint]]:
    out: dict[Level, dict[str, BenchPoint]] = {}
    for p in run.points:
        if p.concurrency is not None:
            level: Level = ("C", p.concurrency)
        elif p.request_rate is not None:
            level = ("rate", p.request_rate)
        else:
            continue
        key = "on" if p.spec_on else "off" if p.spec_on is False else _mode(p)
        out.setdefault(level, {})[key] = p
    return out


def level_label(level: Level) -> str:
    kind, value = level
    return f"{value:g}" if kind == "C" else f"{value:g} req/s"


def _mode(p: BenchPoint) -> str:
    """``plain`` for a sweep's --plain-server row (spec_on NULL, extra_json mode), else ``?``."""
    extra = _json(p.extra_json) or {}
    return "plain" if extra.get("mode") == "plain" else "?"


def _side(points: dict[str, BenchPoint]) -> dict[str, Any]:
    on, off, plain = points.get("on"), points.get("off"), points.get("plain")
    on_tok, off_tok = (point_tok_s(on) if on else None), (point_tok_s(off) if off else None)
    plain_tok = point_tok_s(plain) if plain else None
    ref = on or off or points.get("?")
    return {
        "tok_s": point_tok_s(ref) if ref else None,  # whatever the point's speculation state
        "on_tok_s": on_tok,
        "off_tok_s": off_tok,
        "plain_tok_s": plain_tok,
        "ratio": on_tok / off_tok if on_tok and off_tok else None,
        "off_plain": off_tok / plain_tok if off_tok and plain_tok else None,
        "on_plain": on_tok / plain_tok if on_tok and plain_tok else None,
        "ratio_ci": [on.ratio_ci_lo, on.ratio_ci_hi] if on and on.ratio_ci_lo is not None else None,
        "median_ttft_ms": {k: p.median_ttft_ms for k, p in points.items()},
        "median_itl_ms": {k: p.median_itl_ms for k, p in points.items()},
        "median_e2e_latency_ms": {k: p.median_e2e_latency_ms for k, p in points.items()},
        "accept_length": on.accept_length if on else (ref.accept_length if ref else None),
    }


def compare_runs(a: LoadedRun, b: LoadedRun) -> Comparison:
    comp = Comparison(a, b)
    la, lb = _by_level(a), _by_level(b)
    for level in sorted(set(la) | set(lb)):
        kind, value = level
        comp.rows.append(
            {
                "concurrency": value if kind == "C" else None,
                "request_rate": value if kind == "rate" else None,
                "level": level_label(level),
                "a": _side(la.get(level, {})),
                "b": _side(lb.get(level, {})),
            }
        )
    comp.stack = stack_differences(a, b)
    return comp


def stack_differences(a: LoadedRun, b: LoadedRun) -> list[dict[str, Any]]:
    diffs: list[dict[str, Any]] = []
    if a.run.sglang_version != b.run.sglang_version:
        diffs.append({"what": "sglang version", "a": a.run.sglang_version, "b": b.run.sglang_version})
    ia, ib = a.server_info, b.server_info
    for key in sorted((set(ia) | set(ib)) - VOLATILE_KEYS):
        va, vb = ia.get(key), ib.get(key)
        if va != vb:
            diffs.append({"what": f"launch flag {key}", "a": va, "b": vb})
    ga, gb = a.gpus, b.gpus
    if len(ga) != len(gb):
        diffs.append({"what": "gpu count", "a": len(ga), "b": len(gb)})
    for key in GPU_KEYS:
        sa = sorted({str(g.get(key)) for g in ga if g.get(key) is not None})
        sb = sorted({str(g.get(key)) for g in gb if g.get(key) is not None})
        if sa != sb:
            diffs.append({"what": f"gpu {key}", "a": ", ".join(sa) or None, "b": ", ".join(sb) or None})
    return diffs


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
