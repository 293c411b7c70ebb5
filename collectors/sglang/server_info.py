"""SGLang ``/server_info`` → ``ServerInfo``: server facts, per-rank state and the spectower knob.

``/server_info`` is the flat, resolved server args plus ``internal_states`` (one dict per DP rank, with
runtime overrides applied). The spectower plugin adds ``internal_states[i]["spectower"] = {plugin_version,
spec_max_bs, batches_drafted, batches_gated}``. Secrets (``api_key``, ``admin_api_key``, key passwords,
``--api-key`` in ``launch_command``) are redacted before anything is kept.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from spectower.storage.bench_serving import effective_server_info
from spectower.storage.models import int_or_none
from spectower.storage.redact import redact

# Fields that change on their own while the server runs: left out of the hash that decides whether a
# new snapshot is stored (so a snapshot is written when the configuration changes, not every scrape).
VOLATILE_KEYS = frozenset(
    {
        "internal_states",
        "last_gen_throughput",
        "avg_spec_accept_length",
        "memory_usage",
        "status",
        "load",
        "timestamp",
    }
)


class ServerInfoError(ValueError):
    """/server_info answered something that is not a server_info object."""


@dataclass
class RankState:
    dp_rank: int
    speculative_num_steps: int | None = None  # the active adaptive tier (runtime override applied)
    avg_spec_accept_length: float | None = None  # cumulative since start / flush
    last_gen_throughput: float | None = None
    spec_max_bs: int | None = None
    batches_drafted: int | None = None
    batches_gated: int | None = None
    plugin_version: str | None = None


@dataclass
class ServerInfo:
    version: str | None
    served_model_name: str | None
    launch_command: str | None
    max_running_requests: int | None
    speculative_algorithm: str | None
    speculative_num_steps: int | None
    speculative_adaptive: bool | None
    decode_log_interval: int | None
    tp_size: int | None
    dp_size: int | None
    enable_metrics: bool | None
    enable_metrics_for_all_schedulers: bool | None
    startup_fingerprint: str | None
    ranks: list[RankState] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # the redacted document
    info_hash: str = ""

    @property
    def knob(self) -> int | None:
        """The spectower knob if every rank agrees, else None (see ``ranks`` for the per-rank values)."""
        values = {r.spec_max_bs for r in self.ranks}
        return values.pop() if len(values) == 1 else None


def _int(v: Any) -> int | None:
    # range-checked here, where it enters: spec_max_bs 1e20 is not a value any database column holds
    return int_or_none(v)


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        try:
            f = float(v)
        except OverflowError:  # an integer beyond float range
            return None
        return f if math.isfinite(f) else None
    return None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _stable_hash(info: dict[str, Any]) -> str:
    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in VOLATILE_KEYS}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o

    blob = json.dumps(strip(info), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def parse_server_info(doc: Any) -> ServerInfo:
    """Parse a decoded /server_info JSON document. Raises ServerInfoError for anything else."""
    if not isinstance(doc, dict):
        raise ServerInfoError(f"/server_info: expected a JSON object, got {type(doc).__name__}")
    # a PD router answers {"prefill": [...], "decode": [...]}: the decode workers' facts and ranks
    engine = effective_server_info(doc)
    if "internal_states" not in engine and "version" not in engine:
        raise ServerInfoError(
            "/server_info: neither 'version' nor 'internal_states' present (nor a PD router's decode workers)"
        )
    info = redact(doc)  # the document as it came (redacted) is what is kept
    facts = redact(engine)
    states = facts.get("internal_states")
    if states is not None and not isinstance(states, list):
        raise ServerInfoError("/server_info: 'internal_states' is not a list")
    ranks: list[RankState] = []
    for i, st in enumerate(states or []):
        if not isinstance(st, dict):
            raise ServerInfoError(f"/server_info: internal_states[{i}] is not an object")
        raw_knob = st.get("spectower")
        knob: dict[str, Any] = raw_knob if isinstance(raw_knob, dict) else {}
        ranks.append(
            RankState(
                dp_rank=_int(st.get("dp_rank")) if _int(st.get("dp_rank")) is not None else i,  # type: ignore[arg-type]
                speculative_num_steps=_int(st.get("speculative_num_steps")),
                avg_spec_accept_length=_float(st.get("avg_spec_accept_length")),
                last_gen_throughput=_float(st.get("last_gen_throughput")),
                spec_max_bs=_int(knob.get("spec_max_bs")),
                batches_drafted=_int(knob.get("batches_drafted")),
                batches_gated=_int(knob.get("batches_gated")),
                plugin_version=_str(knob.get("plugin_version")),
            )
        )
    startup = facts.get("startup_time")
    return ServerInfo(
        version=_str(facts.get("version")),
        served_model_name=_str(facts.get("served_model_name")),
        launch_command=_str(facts.get("launch_command")),
        max_running_requests=_int(facts.get("max_running_requests")),
        speculative_algorithm=_str(facts.get("speculative_algorithm")),
        speculative_num_steps=_int(facts.get("speculative_num_steps")),
        speculative_adaptive=_bool(facts.get("speculative_adaptive")),
        decode_log_interval=_int(facts.get("decode_log_interval")),
        tp_size=_int(facts.get("tp_size")),
        dp_size=_int(facts.get("dp_size")),
        enable_metrics=_bool(facts.get("enable_metrics")),
        enable_metrics_for_all_schedulers=_bool(facts.get("enable_metrics_for_all_schedulers")),
        startup_fingerprint=json.dumps(startup, sort_keys=True) if startup is not None else None,
        ranks=ranks,
        info=info,
        info_hash=_stable_hash(info),
    )
