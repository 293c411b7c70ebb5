"""Read and admin endpoints: ``/server_info``, ``/model_info``, ``/v1/loads``, health, ``/flush_cache``,
``/freeze_gc``, ``/metrics`` and the speculation knob ``/set_internal_state``.

The knob contract (docs/design.md, plugin/knob_contract.py): ``{"server_args": {"spectower_spec_max_bs": N,
"spectower_writer": W, ...}}`` answers one boolean per DP rank. The body is validated like SGLang's
``SetInternalStateReq`` (``server_args: Dict[str, Union[int, float]]``) so non-numbers get SGLang's 400; an
unknown key answers ``[false]`` for every rank ("Updating {key} is not supported."); a malformed spectower
key, or a write the knob's lock forbids, answers ``[false]``; nothing is applied unless every key is valid
and allowed. Ownership (locks, last writer) is the contract's ``KnobOwner``, as in the SGLang plugin.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client.core import GaugeMetricFamily
from pydantic import BaseModel

from ..plugin import gc_pauses, knob_contract
from . import knob_state
from .config import SGLANG_VERSION
from .engine import Engine, RankScheduler
from .errors import bad_request, read_json
from .exposition import exposition
from .http_metrics import HttpCounters
from .metrics import CONTENT_TYPE, build_registry, render
from .server_info import ServerInfo

logger = logging.getLogger("simulator")

# Keys SGLang 0.5.23's SchedulerInternalStateController accepts; the simulator stores them.
SGLANG_STATE_KEYS = (
    "pp_max_micro_batch_size",
    "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc",
    "dspark_force_budget_frac",
    "dspark_clear_info_records",
)
FLUSH_MESSAGE = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
FLUSH_FAILED = "Flush cache failed.\n"
FREEZE_GC_MESSAGE = "Garbage collection frozen.\n"  # SGLang's answer (entrypoints/http_server.py)
LOAD_SECTIONS = ("core", "memory", "spec", "lora", "disagg", "queues")


class SetInternalStateReq(BaseModel):
    """Mirror of SGLang's ``SetInternalStateReq`` body (numbers only), validated as SGLang's HTTP server
    validates it: pydantic's lax mode, so JSON ``true`` and ``"1"`` reach the knob's contract as 1, as they
    reach the plugin on a real server (strict types here would refuse what a real server applies:
    tests/test_sglang_plugin.py compares each raw value's answer with SGLang 0.5.23's)."""

    server_args: dict[str, int | float]


def build_router(engine: Engine, info: ServerInfo, http: HttpCounters) -> APIRouter:
    router = APIRouter()
    registry = build_registry(engine, http)

    @router.get("/health")
    @router.get("/health_generate")
    async def health() -> Response:
        return Response(status_code=200 if engine.ready else 503)

    @router.get("/ready")
    async def ready() -> Response:
        return Response(status_code=200 if engine.ready else 503)

    @router.get("/metrics")
    async def metrics() -> Response:
        return Response(render(registry), media_type=CONTENT_TYPE)

    _with_deprecated_alias(router, "/server_info", info.server_info)
    _with_deprecated_alias(router, "/model_info", info.model_info)

    @router.get("/v1/loads")
    async def loads(include: str | None = None, format: str = "json", dp_rank: int | None = None) -> Response:
        return _loads_response(engine, include, format, dp_rank)

    @router.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        ok = engine.flush_cache()
        return PlainTextResponse(FLUSH_MESSAGE if ok else FLUSH_FAILED, status_code=200 if ok else 400)

    @router.api_route("/freeze_gc", methods=["GET", "POST"])
    async def freeze_gc() -> Response:
        # SGLang moves the objects its tokenizer manager and scheduler hold now out of the collector's reach
        # (gc.freeze), so later long collections walk fewer of them; the simulator's one process does the same
        gc.freeze()
        gc_pauses.FROZEN.freeze_happened()  # as the plugin's hooks on SGLang's freeze handlers mark it
        return PlainTextResponse(FREEZE_GC_MESSAGE)

    @router.api_route("/set_internal_state", methods=["POST", "PUT"])
    async def set_internal_state(request: Request) -> Response:
        try:
            body = SetInternalStateReq.model_validate(await read_json(request))
        except ValueError as exc:  # not JSON, or pydantic's ValidationError (a ValueError)
            return bad_request(str(exc))
        return JSONResponse([_set_internal_state(engine, info, body.server_args)] * len(engine.ranks))

    return router


def _loads_response(engine: Engine, include: str | None, format: str, dp_rank: int | None) -> Response:
    """``GET /v1/loads``: each rank's load sections as JSON, or as Prometheus text."""
    started = time.perf_counter()
    sections = _parse_include(include)
    if sections is None:
        return bad_request(f"invalid include: {include!r} (choose from all, {', '.join(LOAD_SECTIONS)})")
    ranks = [r for r in engine.ranks if dp_rank is None or r.dp_rank == dp_rank]
    payload = [_load(engine, r, sections) for r in ranks]
    engine.tokenizer.get_loads.observe(time.perf_counter() - started)
    if format == "prometheus":
        return PlainTextResponse(_loads_prometheus(payload), media_type=CONTENT_TYPE)
    if format != "json":
        return bad_request(f"invalid format: {format!r} (json or prometheus)")
    return JSONResponse(
        {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": SGLANG_VERSION,
            "accelerator": engine.profile.gpus.name,
            "num_accelerators": engine.profile.gpus.count,
            "loads": payload,
        }
    )


def _set_internal_state(engine: Engine, info: ServerInfo, args: dict[str, int | float]) -> bool:
    """Judge ``server_args`` as SGLang and the plugin would, then apply all of it or nothing; every rank
    answers the same boolean."""
    owner = knob_state.owner_of(engine)
    knob_req: knob_contract.KnobRequest | None = None
    ok = True
    if knob_contract.ours(args) and not engine.profile.speculative:
        # a server without speculation has no knob: SGLang answers an unknown key with updated=False
        logger.warning("Updating %s is not supported.", knob_contract.KNOB_KEY)
        return False
    if knob_contract.ours(args):
        try:
            knob_req = knob_contract.parse_request(args)
        except knob_contract.ContractError as exc:
            logger.warning("spectower: %s refused: %s", knob_contract.KNOB_KEY, exc)
            owner.refuse(args, str(exc))
            return False
    staged: dict[str, int | float] = {}
    for key, value in args.items():
        if key.startswith(knob_contract.KEY_PREFIX):
            continue
        if key in SGLANG_STATE_KEYS:
            staged[key] = value
        else:
            logger.warning("Updating %s is not supported.", key)
            ok = False
    with owner.lock:  # judge, then apply everything or nothing
        if knob_req is not None:
            rest = sorted(k for k in args if not k.startswith(knob_contract.KEY_PREFIX))
            why = owner.check(knob_req) if ok else f"SGLang refused the other keys {rest}"
            if why is not None:
                logger.warning("spectower: %s write refused: %s", knob_req.writer_name, why)
                owner.refuse(args, why)
                return False
        if not ok:
            return False
        for key, value in staged.items():
            info.overrides[key] = value
            if key.startswith("speculative_accept_threshold"):
                for r in engine.ranks:
                    r.flush()
        if knob_req is not None:
            previous = knob_state.current_value(engine)
            knob_state.apply(engine, knob_req)  # the ceiling and the exploration share
            owner.commit(knob_req, previous)
    return True


def _parse_include(include: str | None) -> set[str] | None:
    if include is None or include == "":
        return {"core"}
    parts = {p.strip() for p in include.split(",") if p.strip()}
    if "all" in parts:
        return set(LOAD_SECTIONS)
    if not parts <= set(LOAD_SECTIONS):
        return None
    return parts | {"core"}


def _with_deprecated_alias(router: APIRouter, path: str, body: Callable[[], dict[str, Any]]) -> None:
    """``GET path``, and SGLang's older ``GET /get_<path>`` that answers the same after logging SGLang's
    deprecation warning."""
    alias = "/get_" + path.removeprefix("/")

    async def current() -> dict[str, Any]:
        return body()

    async def deprecated() -> dict[str, Any]:
        logger.warning(
            "Endpoint '%s' is deprecated and will be removed in a future version. Please use '%s' instead.",
            alias,
            path,
        )
        return body()

    router.add_api_route(path, current, methods=["GET"])
    router.add_api_route(alias, deprecated, methods=["GET"])


def _load(engine: Engine, r: RankScheduler, sections: set[str]) -> dict[str, Any]:
    g = r.gauges
    used = r.num_used_tokens
    total = engine.memory.max_total_num_tokens
    load: dict[str, Any] = {
        "timestamp": time.time(),
        "dp_rank": r.dp_rank,
        "num_running_reqs": len(r.running),
        "num_waiting_reqs": len(r.waiting),
        "num_waiting_uncached_tokens": sum(q.prompt_tokens for q in r.waiting),
        "num_used_tokens": used,
        "num_total_tokens": used + sum(q.prompt_tokens for q in r.waiting),
        "num_active_tokens": used,
        "max_total_num_tokens": total,
        "max_running_requests": engine.max_running_requests,
        "token_usage": used / total,
        "gen_throughput": r.current_gen_throughput(),
        "cache_hit_rate": g.cache_hit_rate,
        "utilization": min(1.0, len(r.running) / engine.max_running_requests),
        "total_prefill_uncached_tokens": r.total_prefill_tokens,
        "total_prefill_busy_us": int(r.total_prefill_busy_s * 1e6),
    }
    if "memory" in sections:
        mem = engine.memory
        load["memory"] = {
            "weight_gb": mem.weight_gb,
            "kv_cache_gb": mem.kv_cache_gb,
            "graph_gb": mem.graph_gb,
            "token_capacity": total,
        }
    if "spec" in sections and r.avg_spec_accept_length is not None:
        load["speculative"] = {"accept_length": r.avg_spec_accept_length, "accept_rate": g.spec_accept_rate}
    if "disagg" in sections:
        load["disaggregation"] = {
            "mode": "null",
            "prefill_bootstrap_queue_reqs": 0,
            "prefill_inflight_queue_reqs": 0,
            "decode_prealloc_queue_reqs": 0,
            "decode_transfer_queue_reqs": 0,
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": 0.0,
            "kv_transfer_latency_ms": 0.0,
        }
    if "queues" in sections:
        load["queues"] = {
            "waiting": len(r.waiting),
            "grammar": 0,
            "paused": 0,
            "retracted": 0,
            "prealloc_ready": 0,
        }
    return load


def _loads_prometheus(loads: list[dict[str, Any]]) -> bytes:
    """``/v1/loads?format=prometheus``: ``sglang_*`` gauges per ``dp_rank``; nested keys joined by ``_``
    (prometheus_client's exposition, as the simulated ``/metrics``)."""
    series: dict[str, list[tuple[int, float]]] = {}
    prefixes = {"speculative": "spec", "disaggregation": "disagg"}
    for load in loads:
        rank = load["dp_rank"]
        for key, value in load.items():
            if key == "dp_rank":
                continue
            if isinstance(value, dict):
                prefix = prefixes.get(key, key)
                for sub, v in value.items():
                    if isinstance(v, int | float) and not isinstance(v, bool):
                        series.setdefault(f"{prefix}_{sub}", []).append((rank, v))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                series.setdefault(key, []).append((rank, value))
    families = []
    for key, values in series.items():
        family = GaugeMetricFamily(f"sglang_{key}", f"/v1/loads {key}", labels=["dp_rank"])
        for rank, v in values:
            family.add_metric([str(rank)], float(v))
        families.append(family)
    return exposition(families)
