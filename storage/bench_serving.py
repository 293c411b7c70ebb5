"""SGLang bench_serving result files (JSON Lines) <-> BenchRun / BenchPoint.

Reads every key-set version the client has written (2024's 18 keys without percentiles or server_info
up to 0.5.x with ``server_info``, ``--output-details`` arrays, ``tag``). Of the non-strict tokens Python's
json module writes, a figure may hold only one: ``"request_rate": Infinity``, the client's own value for
"no arrival-rate limit" (its ``--request-rate`` default, in every closed-loop file). Any other NaN or
+-Infinity is no measurement: the file is refused, naming the line and the field (``server_info`` and
``spectower_run`` are facts, not figures, and are not checked).

Lossless by construction: a key that maps to a BenchPoint column is stored there; every other key,
and every value a column cannot hold exactly (an int in a float column, a string), is kept in
``extra_json`` with the original key order (``SOURCE_KEYS``). ``point_to_line`` rebuilds the exact line.
A plain bench_serving file is one run; the files of one import are read and checked first, then written
in one transaction (a file that cannot be imported leaves nothing written). A line that cannot be read
is reported with its line number and the others still import. A value of the wrong type (``"fast"`` as
a throughput, ``[1, 2]``, a negative count) is named per line in ``ImportResult.warnings`` (kept in
``extra_json``, its column left empty).

spectower's own export adds ``spectower_run`` to each line of a sweep (and of every run when several
are exported to one file): the run's id, source, time, server URL, parameters, crossover and best knob.
Import restores those, and a file holding several runs comes back as as many runs.

A PD router's ``server_info`` (``{"prefill": [...], "decode": [...]}``) is read through its decode workers
(``effective_server_info``): they run the speculation, and they report version and model.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from . import models, queries
from .database import Database
from .files import FileReadError, parse_json_text, read_text_capped
from .redact import redact

# bench_serving key -> BenchPoint column
POINT_KEYS: dict[str, str] = {
    "max_concurrency": "concurrency",
    "request_rate": "request_rate",
    "completed": "completed",
    "duration": "duration_s",
    "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    "request_throughput": "request_throughput",
    "input_throughput": "input_throughput",
    "output_throughput": "output_throughput",
    "total_throughput": "total_throughput",
    **{
        f"{stat}_{metric}_ms": f"{stat}_{metric}_ms"
        for metric in ("ttft", "tpot", "itl", "e2e_latency")
        for stat in ("mean", "median", "p90", "p99")
    },
    "accept_length": "accept_length",
    # written by spectower's own export, so a sweep survives export -> import
    "spectower_spec_on": "spec_on",
    "spectower_ratio_ci_lo": "ratio_ci_lo",
    "spectower_ratio_ci_hi": "ratio_ci_hi",
}
RUN_KEYS: tuple[str, ...] = ("tag", "backend", "dataset_name", "server_info")
RUN_META_KEY = "spectower_run"  # a line's run facts, written by spectower's export
# columns no valid result holds a negative value in
NON_NEGATIVE_COLUMNS = frozenset(
    {"completed", "total_input_tokens", "total_output_tokens", "duration_s", "concurrency", "request_rate",
     "request_throughput", "input_throughput", "output_throughput", "total_throughput", "accept_length"}
    | {c for c in POINT_KEYS.values() if c.endswith("_ms")}
)  # fmt: skip
INT_COLUMNS = frozenset({"completed", "total_input_tokens", "total_output_tokens"})
BOOL_COLUMNS = frozenset({"spec_on"})
SOURCE_KEYS = "spectower_source_keys"  # in extra_json: the key order of the source line
# Keys that say "this is a bench_serving result line" (every version has at least one).
SIGNATURE_KEYS = frozenset({"completed", "duration", "output_throughput", "request_throughput"})
# Facts about the server and about spectower's run, not measurements: not checked for NaN / Infinity.
NOT_FIGURE_KEYS = frozenset({"server_info", RUN_META_KEY})
# Far above any result file (an --output-details line of 10,000 requests is tens of MiB); past it the
# file is the wrong one (a device such as /dev/zero would otherwise be read for ever).
MAX_BENCH_FILE_BYTES = 1 << 30

# The key order of a 0.5.x result line (docs/sglang-reference.md §6), for points spectower measured itself.
V05_KEY_ORDER: tuple[str, ...] = (
    "tag", "backend", "dataset_name", "request_rate", "max_concurrency", "sharegpt_output_len",
    "random_input_len", "random_output_len", "random_range_ratio", "server_info", "duration", "completed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "input_throughput",
    "output_throughput", "total_throughput",
    *(f"{s}_{m}_ms" for m in ("e2e_latency", "ttft", "tpot", "itl")
      for s in ("mean", "median", "p90", "p99")),
    "accept_length",
)  # fmt: skip
# A sweep's parameters under bench_serving's names (a sweep's prompts and outputs are exactly these
# lengths): its exported lines carry them, as the client's own lines do.
SWEEP_PARAM_KEYS = {"random_input_len": "input_len", "random_output_len": "output_len"}


class BenchImportError(ValueError):
    """A bench_serving file could not be imported at all (unreadable, no result line, a NaN or infinite
    figure); the message names the file (and the line and field)."""


@dataclass
class ImportResult:
    path: str
    run_id: int | None = None  # the first run of the file
    points: int = 0
    line_errors: list[tuple[int, str]] = field(default_factory=list)  # lines skipped, and why
    duplicate_of: int | None = None  # the run this exact file was already imported as
    run_ids: list[int] = field(default_factory=list)  # every run of the file (several: a spectower export)
    warnings: list[tuple[int, str]] = field(default_factory=list)  # values not taken, per line


def effective_server_info(info: Any) -> Any:
    """The server_info whose facts describe the serving engine. A PD router answers
    ``{"prefill": [worker infos], "decode": [worker infos]}`` (no version, model or speculation of its
    own): the decode workers run the speculation, so their first one's facts are taken, with the
    ``internal_states`` of every decode worker (one per DP rank, in order). Anything else: as is."""
    if not isinstance(info, dict) or "version" in info or "internal_states" in info:
        return info
    decode = info.get("decode")
    workers = [w for w in decode if isinstance(w, dict)] if isinstance(decode, list) else []
    if not workers:
        return info
    merged = dict(workers[0])
    states: list[Any] = []
    for w in workers:
        ws = w.get("internal_states")
        if isinstance(ws, list):
            states.extend(ws)
    if len(workers) > 1:  # ranks of several workers: numbered across them, so they stay apart
        states = [{**st, "dp_rank": i} if isinstance(st, dict) else st for i, st in enumerate(states)]
    if states:
        merged["internal_states"] = states
    merged["pd_decode_workers"] = len(workers)
    if isinstance(info.get("prefill"), list):
        merged["pd_prefill_workers"] = len(info["prefill"])
    return merged


def value_warning(key: str, column: str, v: Any) -> str | None:
    """Why a line's value does not go into its column (None: it does, or it is simply absent)."""
    if v is None:
        return None
    if column in BOOL_COLUMNS:
        return None if isinstance(v, bool) else f"{key}: {v!r} is not true/false"
    if not _is_number(v):
        return f"{key}: {_shown(v)} is not a number"
    if column in INT_COLUMNS and not (isinstance(v, int) or (math.isfinite(v) and float(v).is_integer())):
        return f"{key}: {v!r} is not a whole number"
    if column in NON_NEGATIVE_COLUMNS and v < 0:
        return f"{key}: {v!r} is negative"
    return None


def non_finite_figure(obj: dict[str, Any]) -> str | None:
    """The first NaN or +-Infinity among a result line's figures, as ``"key path: token"``
    (``"mean_ttft_ms: NaN"``, ``"itls[3][0]: -Infinity"``); None when every figure is finite.
    ``request_rate: Infinity`` is the client's "no arrival-rate limit", not a bad figure."""
    # depth-first in key order, with a stack of its own: json.loads already went as deep as Python's
    # recursion limit allows, a recursive walk could not
    todo: list[tuple[str, Any]] = [
        (key, v)
        for key, v in reversed(obj.items())
        if key not in NOT_FIGURE_KEYS and not (key == "request_rate" and v == math.inf)
    ]
    while todo:
        where, v = todo.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return f"{where}: {_shown(v)}"
        if isinstance(v, dict):
            todo.extend((f"{where}.{k}", x) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            todo.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def _shown(v: Any) -> str:
    text = json.dumps(v, allow_nan=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _split_value(column: str, v: Any) -> tuple[Any, bool]:
    """(value for the column, whether the original must also be kept in extra_json)."""
    if v is None:
        return None, False
    if column in BOOL_COLUMNS:
        return (v, False) if isinstance(v, bool) else (None, True)
    if not _is_number(v):
        return None, True
    if column in NON_NEGATIVE_COLUMNS and v < 0:
        return None, True  # completed: -5 is no count (named in ImportResult.warnings)
    if column in INT_COLUMNS:
        # beyond every backend's INTEGER (or not whole): kept in extra_json only
        fits = models.int_or_none(v, lo=0, hi=models.INT32_MAX)
        if fits is None:
            return None, True
        return fits, not isinstance(v, int)
    if isinstance(v, float) and math.isnan(v):
        return None, True  # SQLite stores NaN as NULL
    return float(v), not isinstance(v, float)


def line_to_point(obj: dict[str, Any], run_values: dict[str, Any]) -> models.BenchPoint:
    """One parsed result line -> BenchPoint (run_id unset). ``run_values``: the run's tag, backend,
    dataset_name and server_info; a line that differs from them keeps its own in extra_json."""
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {SOURCE_KEYS: list(obj)}
    for key, v in obj.items():
        if key == RUN_META_KEY:
            continue  # the run's facts: restored on the run, written again by the export
        column = POINT_KEYS.get(key)
        if column is not None:
            values[column], keep = _split_value(column, v)
            if keep:
                extra[key] = v
        elif key in RUN_KEYS:
            if v != run_values.get(key):
                extra[key] = v
        else:
            extra[key] = v
    if "spec_on" not in values or values["spec_on"] is None:
        info = effective_server_info(obj.get("server_info"))  # the line's own: without one, nothing
        if isinstance(info, dict) and "speculative_algorithm" in info:
            values["spec_on"] = info["speculative_algorithm"] not in (None, "", "NONE")
    return models.BenchPoint(**values, extra_json=json.dumps(extra, allow_nan=True))


def run_meta(run: models.BenchRun) -> dict[str, Any]:
    """The run facts a bench_serving line has no key for (``spectower_run`` of an exported line)."""
    return {
        "id": run.id,
        "source": run.source,
        "created_at": run.created_at,
        "server_url": run.server_url,
        "served_model_name": run.served_model_name,
        "sglang_version": run.sglang_version,
        "params": json.loads(run.params_json) if run.params_json else None,
        "gpu_inventory": json.loads(run.gpu_inventory_json) if run.gpu_inventory_json else None,
        "crossover": run.crossover,
        "crossover_lo": run.crossover_lo,
        "crossover_hi": run.crossover_hi,
        "best_max_bs": run.best_max_bs,
    }


def point_to_line(point: models.BenchPoint, run: models.BenchRun) -> dict[str, Any]:
    """BenchPoint -> one bench_serving result line (the original line for imported points)."""
    extra: dict[str, Any] = json.loads(point.extra_json) if point.extra_json else {}
    order: list[str] | None = extra.pop(SOURCE_KEYS, None)
    run_values = run_level_values(run)
    reverse = {c: k for k, c in POINT_KEYS.items()}

    def value(key: str) -> Any:
        if key in extra:
            return extra[key]
        if key in POINT_KEYS:
            return getattr(point, POINT_KEYS[key])
        if key in run_values:
            return run_values[key]
        return None

    if order is not None:
        return {k: value(k) for k in order}
    # a point spectower measured: the 0.5.x key set, plus what only spectower knows
    params = json.loads(run.params_json) if run.params_json else {}
    line: dict[str, Any] = {}
    for key in V05_KEY_ORDER:
        if key in params and key not in POINT_KEYS:
            line[key] = params[key]
        elif SWEEP_PARAM_KEYS.get(key) in params:
            line[key] = params[SWEEP_PARAM_KEYS[key]]
        else:
            line[key] = value(key)
    for column in ("spec_on", "ratio_ci_lo", "ratio_ci_hi"):
        if getattr(point, column) is not None:
            line[reverse[column]] = getattr(point, column)
    line.update({k: v for k, v in extra.items() if k not in line})
    return line


def run_level_values(run: models.BenchRun) -> dict[str, Any]:
    return {
        "tag": run.tag,
        "backend": run.backend,
        "dataset_name": run.dataset_name,
        "server_info": json.loads(run.server_info_json) if run.server_info_json else None,
    }


def parse_lines(text: str) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
    """(line number, object) for every readable result line, and (line number, why) for the others."""
    good: list[tuple[int, dict[str, Any]]] = []
    bad: list[tuple[int, str]] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            # accepts NaN / Infinity / -Infinity (import_files says which may stay); deep nesting and huge
            # integers are one reason each, as for every file a user names
            obj = parse_json_text(raw, jsonl_line=True)
        except FileReadError as exc:
            bad.append((n, str(exc)))
            continue
        if not isinstance(obj, dict):
            bad.append((n, f"a JSON {type(obj).__name__}, not an object"))
            continue
        if not SIGNATURE_KEYS & obj.keys():
            bad.append((n, f"not a bench_serving result (none of {', '.join(sorted(SIGNATURE_KEYS))})"))
            continue
        good.append((n, obj))
    return good, bad


def _json_text(v: Any) -> str | None:
    return None if v is None else json.dumps(v, allow_nan=True)


def _num(v: Any) -> float | None:
    return float(v) if _is_number(v) and math.isfinite(v) else None


def build_run(
    lines: list[dict[str, Any]], *, source: str, sha256: str | None, created_at: float
) -> tuple[models.BenchRun, list[models.BenchPoint]]:
    first = lines[0]
    info = first.get("server_info") if isinstance(first.get("server_info"), dict) else None
    facts = effective_server_info(info) if info is not None else None
    raw_meta = first.get(RUN_META_KEY)
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    run_values = {k: first.get(k) for k in RUN_KEYS}
    run = models.BenchRun(
        created_at=_num(meta.get("created_at")) or created_at,
        source=_str(meta.get("source")) or source,
        tag=first.get("tag") if isinstance(first.get("tag"), str) else None,
        server_url=_str(meta.get("server_url")),
        backend=first.get("backend") if isinstance(first.get("backend"), str) else None,
        dataset_name=first.get("dataset_name") if isinstance(first.get("dataset_name"), str) else None,
        served_model_name=_str(meta.get("served_model_name"))
        or (_str(facts.get("served_model_name")) if facts else None),
        sglang_version=_str(meta.get("sglang_version")) or (_str(facts.get("version")) if facts else None),
        server_info_json=json.dumps(redact(info), allow_nan=True) if info is not None else None,
        params_json=_json_text(meta.get("params")),
        gpu_inventory_json=_json_text(meta.get("gpu_inventory")),
        crossover=_num(meta.get("crossover")),
        crossover_lo=_num(meta.get("crossover_lo")),
        crossover_hi=_num(meta.get("crossover_hi")),
        best_max_bs=models.int_or_none(meta.get("best_max_bs")),
        source_sha256=sha256,
    )
    # what the run columns hold is what a point's line is compared with
    stored = run_level_values(run)
    for key in RUN_KEYS:
        if run_values.get(key) != stored.get(key):
            stored[key] = object()  # unrepresentable at run level: every point keeps its own
    points = [line_to_point(obj, stored) for obj in lines]
    return run, points


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def import_file(db: Database, path: str | Path, *, allow_duplicate: bool = False) -> ImportResult:
    """Import one bench_serving JSONL file as one run (one transaction); see ``import_files``."""
    return import_files(db, [path], allow_duplicate=allow_duplicate)[0]


def import_files(
    db: Database, paths: Sequence[str | Path], *, allow_duplicate: bool = False
) -> list[ImportResult]:
    """Import bench_serving JSONL files (one run each, or the runs a spectower export holds), one result per
    path in order. Every file is read and checked before anything is written, and all of them are written
    in one transaction: a file that cannot be imported raises ``BenchImportError`` and nothing is written.
    A file whose bytes were imported before, or given twice, is not imported again (``duplicate_of``)
    unless ``allow_duplicate``."""
    now = time.time()
    results: list[ImportResult] = []
    to_write: list[tuple[ImportResult, list[tuple[models.BenchRun, list[models.BenchPoint]]]]] = []
    first_with_sha: dict[str, ImportResult] = {}
    repeats: list[tuple[ImportResult, ImportResult]] = []  # (a file given again, its first time here)
    for path in paths:
        p = Path(path)
        try:
            text = read_text_capped(p, MAX_BENCH_FILE_BYTES)
        except FileReadError as exc:
            raise BenchImportError(f"{p}: {exc}") from None
        # the file's bytes (strict UTF-8 encodes back to exactly what it decoded): what earlier imports hashed
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        result = ImportResult(path=str(p))
        results.append(result)
        if not allow_duplicate:
            with db.session() as s:
                br = models.BenchRun
                prior = s.exec(select(br.id).where(br.source_sha256 == sha).order_by(col(br.id))).first()
            if prior is not None:
                result.duplicate_of = prior
                continue
            if sha in first_with_sha:
                repeats.append((result, first_with_sha[sha]))
                continue
            first_with_sha[sha] = result
        to_write.append((result, _read_runs(p, text, sha, result, now)))
    ids = iter(db.save_bench_runs([run for _, runs in to_write for run in runs]) if to_write else [])
    for result, runs in to_write:
        result.run_ids = [next(ids) for _ in runs]
        result.run_id = result.run_ids[0]
        result.points = sum(len(points) for _, points in runs)
    for repeat, first in repeats:
        repeat.duplicate_of = first.run_id
    return results


def _read_runs(
    p: Path, text: str, sha: str, result: ImportResult, now: float
) -> list[tuple[models.BenchRun, list[models.BenchPoint]]]:
    """The runs of one file's text, its skipped lines and value warnings noted in ``result``; raises
    ``BenchImportError`` when the file cannot be imported."""
    good, bad = parse_lines(text)
    result.line_errors = bad
    if not good:
        why = f"; line {bad[0][0]}: {bad[0][1]}" if bad else " (the file is empty)"
        raise BenchImportError(f"{p}: no bench_serving result line could be read{why}")
    for n, obj in good:
        non_finite = non_finite_figure(obj)
        if non_finite is not None:
            raise BenchImportError(f"{p}: line {n}: {non_finite} is not a finite number")
        for key, v in obj.items():
            column = POINT_KEYS.get(key)
            warning = value_warning(key, column, v) if column is not None else None
            if warning is not None:
                result.warnings.append((n, f"{warning} (kept in the point's extra fields, not as {column})"))
    return [
        build_run([o for _, o in group], source=f"import:{p.name}", sha256=sha, created_at=now)
        for group in _group_runs(good)
    ]


def _group_runs(good: list[tuple[int, dict[str, Any]]]) -> list[list[tuple[int, dict[str, Any]]]]:
    """Lines per run: by ``spectower_run.id`` (a spectower export of several runs), in file order; lines
    without one form one run (a plain bench_serving file is one run)."""
    groups: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    for n, obj in good:
        meta = obj.get(RUN_META_KEY)
        key = ("run", json.dumps(meta.get("id"))) if isinstance(meta, dict) and "id" in meta else ("file",)
        groups.setdefault(key, []).append((n, obj))
    return list(groups.values())


def export_lines(db: Database, run_id: int, *, with_run: bool | None = None) -> list[dict[str, Any]]:
    """A run as bench_serving result lines (one per point, in stored order). ``with_run``: add
    ``spectower_run`` (the run facts) to every line; default: for runs spectower measured, not for
    imported files (whose lines come back byte for byte as they were)."""
    run = queries.bench_run(db, run_id)
    if with_run is None:
        with_run = not run.source.startswith("import:")
    lines = [point_to_line(pt, run) for pt in queries.bench_points(db, run_id)]
    if with_run:
        meta = run_meta(run)
        lines = [{**line, RUN_META_KEY: meta} for line in lines]
    return lines
