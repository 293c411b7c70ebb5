"""SGLang ``/v1/loads`` in both formats (``format=json`` and ``format=prometheus``) → per-rank loads.

JSON: ``{"timestamp","version","accelerator","num_accelerators","loads":[{dp_rank, num_running_reqs,
num_waiting_reqs, token_usage, gen_throughput, cache_hit_rate, utilization, ..., "speculative":
{"accept_length","accept_rate"}}]}``. Prometheus: ``sglang_<field>{dp_rank="i"}`` gauges, nested objects
flattened (``sglang_spec_accept_length``, ``sglang_memory_kv_cache_gb``, ``sglang_queues_waiting``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...storage.integers import int_or_none
from ..promtext import parse_prometheus_text


class LoadsError(ValueError):
    """/v1/loads answered something that is not a loads document."""


@dataclass
class RankLoad:
    dp_rank: int
    num_running_reqs: float | None = None
    num_waiting_reqs: float | None = None
    num_used_tokens: float | None = None
    max_total_num_tokens: float | None = None
    max_running_requests: float | None = None
    token_usage: float | None = None
    gen_throughput: float | None = None
    cache_hit_rate: float | None = None
    utilization: float | None = None
    spec_accept_length: float | None = None  # cumulative, like /server_info's avg_spec_accept_length
    spec_accept_rate: float | None = None  # last window


@dataclass
class Loads:
    version: str | None
    accelerator: str | None
    num_accelerators: int | None
    ranks: list[RankLoad]


_NUMERIC = (
    "num_running_reqs",
    "num_waiting_reqs",
    "num_used_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer beyond float range
        return None
    return f if math.isfinite(f) else None


def parse_loads_json(doc: Any) -> Loads:
    if not isinstance(doc, dict) or not isinstance(doc.get("loads"), list):
        raise LoadsError("/v1/loads: expected an object with a 'loads' list")
    ranks: list[RankLoad] = []
    for i, item in enumerate(doc["loads"]):
        if not isinstance(item, dict):
            raise LoadsError(f"/v1/loads: loads[{i}] is not an object")
        dp = item.get("dp_rank", i)
        if isinstance(dp, bool) or not isinstance(dp, int) or int_or_none(dp, lo=0) is None:
            raise LoadsError(f"/v1/loads: loads[{i}].dp_rank is not a DP rank (an integer >= 0)")
        r = RankLoad(dp_rank=dp, **{k: _num(item.get(k)) for k in _NUMERIC})
        spec = item.get("speculative")
        if isinstance(spec, dict):
            r.spec_accept_length = _num(spec.get("accept_length"))
            r.spec_accept_rate = _num(spec.get("accept_rate"))
        ranks.append(r)
    n = doc.get("num_accelerators")
    return Loads(
        version=doc.get("version") if isinstance(doc.get("version"), str) else None,
        accelerator=doc.get("accelerator") if isinstance(doc.get("accelerator"), str) else None,
        num_accelerators=n if isinstance(n, int) and not isinstance(n, bool) else None,
        ranks=ranks,
    )


_PROMETHEUS_FAMILIES = frozenset(f"sglang_{f}" for f in (*_NUMERIC, "spec_accept_length", "spec_accept_rate"))


def parse_loads_prometheus(text: str) -> Loads:
    by_rank: dict[int, RankLoad] = {}
    for s in parse_prometheus_text(text, families=_PROMETHEUS_FAMILIES):
        if not s.name.startswith("sglang_") or "dp_rank" not in s.labels:
            continue
        try:
            dp = int(s.labels["dp_rank"])
        except ValueError:
            raise LoadsError(f"/v1/loads: dp_rank {s.labels['dp_rank']!r} is not an integer") from None
        if int_or_none(dp, lo=0) is None:
            raise LoadsError(f"/v1/loads: dp_rank {dp} is not a DP rank")
        r = by_rank.setdefault(dp, RankLoad(dp_rank=dp))
        field = s.name[len("sglang_") :]
        if field in _NUMERIC:
            setattr(r, field, s.value)
        elif field == "spec_accept_length":
            r.spec_accept_length = s.value
        elif field == "spec_accept_rate":
            r.spec_accept_rate = s.value
    return Loads(
        version=None, accelerator=None, num_accelerators=None, ranks=[by_rank[k] for k in sorted(by_rank)]
    )
