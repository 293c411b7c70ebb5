"""From successive scrapes of one server to ``EngineReading``s (one per DP rank per scrape).

Counters become rates between scrapes, histograms become p50/p90/p99 of the bucket deltas. A restart is
detected two ways — a changed startup fingerprint (``startup_time_seconds`` phases in /metrics, or
``startup_time`` in /server_info) or any counter/bucket going down — and then every baseline is dropped:
the scrape after a restart has no rates (never a negative or double-counted one) and the next has them
again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..histograms import bucket_delta, quantile
from ..rates import CounterRates
from .loads import Loads
from .metrics import MetricsSnapshot
from .server_info import ServerInfo

QUANTILES = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"))
# EngineReading field -> /v1/loads rank field, for a server whose /metrics is off
_FROM_LOADS = {
    "num_running_reqs": "num_running_reqs",
    "num_queue_reqs": "num_waiting_reqs",
    "token_usage": "token_usage",
    "gen_throughput": "gen_throughput",
    "cache_hit_rate": "cache_hit_rate",
    "spec_accept_rate": "spec_accept_rate",
    "spec_accept_length": "spec_accept_length",
}


@dataclass
class EngineReading:
    """The ``EngineSample`` columns, without the storage ids (``server_id`` is added when stored)."""

    dp_rank: int
    ts: float
    num_running_reqs: float | None = None
    num_queue_reqs: float | None = None
    gen_throughput: float | None = None
    output_tok_s: float | None = None
    prefill_tok_s: float | None = None
    request_rate: float | None = None
    token_usage: float | None = None
    cache_hit_rate: float | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_num_steps: float | None = None
    spec_max_bs: int | None = None
    batches_drafted: int | None = None
    batches_gated: int | None = None
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    itl_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p90_s: float | None = None
    e2e_p99_s: float | None = None

    def as_row(self) -> dict[str, Any]:
        # every field is a plain value: a shallow copy is asdict's answer without its recursive deep copy
        return dict(vars(self))


@dataclass
class EngineDeriver:
    """Keeps the previous scrape of one server; ``derive`` turns the next one into readings."""

    rates: CounterRates = field(default_factory=CounterRates)
    prev_hist: dict[tuple[int, str], dict[float, float]] = field(default_factory=dict)
    prev_counters: dict[tuple[int, str], float] = field(default_factory=dict)
    fingerprints: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0

    def _restart(self) -> None:
        self.restarts += 1
        self.rates.forget()
        self.prev_hist.clear()
        self.prev_counters.clear()

    def note_fingerprint(self, source: str, fingerprint: Any) -> bool:
        """Record a startup fingerprint; True (and baselines dropped) when it changed = a restart."""
        if fingerprint is None:
            return False
        prev = self.fingerprints.get(source)
        changed = prev is not None and fingerprint != prev
        self.fingerprints[source] = fingerprint
        if changed:
            self._restart()
        return changed

    def note_metrics(self, snapshot: MetricsSnapshot) -> bool:
        """Look for a restart in a scrape of /metrics (a changed startup fingerprint, a counter or bucket
        that went down); True (and baselines dropped) when there is one."""
        restarts = self.restarts
        if snapshot.startup_fingerprint is not None:
            self.note_fingerprint("metrics", snapshot.startup_fingerprint)
        if self._went_down(snapshot):
            self._restart()
        return self.restarts > restarts

    def derive(
        self,
        ts: float,
        snapshot: MetricsSnapshot | None,
        info: ServerInfo | None = None,
        loads: Loads | None = None,
        *,
        noted: bool = False,
    ) -> list[EngineReading]:
        """Readings of one scrape (``noted``: ``note_metrics`` already looked at ``snapshot``)."""
        if snapshot is not None and not noted:
            self.note_metrics(snapshot)

        dp_ranks: set[int] = set()
        if snapshot is not None:
            dp_ranks |= set(snapshot.ranks)
        if info is not None:
            dp_ranks |= {r.dp_rank for r in info.ranks}
        if loads is not None:
            dp_ranks |= {r.dp_rank for r in loads.ranks}
        if not dp_ranks:
            dp_ranks = {0}

        out: list[EngineReading] = []
        for dp in sorted(dp_ranks):
            r = EngineReading(dp_rank=dp, ts=ts)
            if snapshot is not None and dp in snapshot.ranks:
                self._from_metrics(r, snapshot, dp, ts)
            if loads is not None:
                self._from_loads(r, loads, dp)
            if info is not None:
                self._from_info(r, info, dp)
            out.append(r)
        return out

    def _went_down(self, snapshot: MetricsSnapshot) -> bool:
        down = False
        for dp, rm in snapshot.ranks.items():
            for name, value in rm.counters.items():
                prev = self.prev_counters.get((dp, name))
                if prev is not None and value < prev:
                    down = True
            for hname, buckets in rm.histograms.items():
                prevb = self.prev_hist.get((dp, hname))
                if (
                    prevb is not None
                    and set(prevb) == set(buckets)
                    and any(buckets[le] < prevb[le] for le in buckets)
                ):
                    down = True
        return down

    def _from_metrics(self, r: EngineReading, snap: MetricsSnapshot, dp: int, ts: float) -> None:
        rm = snap.ranks[dp]
        g = rm.gauges
        r.num_running_reqs = g.get("num_running_reqs")
        r.num_queue_reqs = g.get("num_queue_reqs")
        r.gen_throughput = g.get("gen_throughput")
        r.token_usage = g.get("token_usage")
        r.cache_hit_rate = g.get("cache_hit_rate")
        r.spec_accept_length = g.get("spec_accept_length")
        r.spec_accept_rate = g.get("spec_accept_rate")
        r.spec_num_steps = g.get("spec_num_steps")

        rates: dict[str, float | None] = {}
        for name, value in rm.counters.items():
            rates[name] = self.rates.update((dp, name), ts, value)
            self.prev_counters[(dp, name)] = value
        if "realtime_tokens_total:decode" in rm.counters:
            r.output_tok_s = rates["realtime_tokens_total:decode"]
        elif "generation_tokens_total" in rm.counters:
            # Older releases (and the tokenizer side): finished-request tokens, lumpier but the same unit.
            r.output_tok_s = rates["generation_tokens_total"]
        if "realtime_tokens_total:prefill_compute" in rm.counters:
            r.prefill_tok_s = rates["realtime_tokens_total:prefill_compute"]
        elif "prompt_tokens_total" in rm.counters:
            r.prefill_tok_s = rates["prompt_tokens_total"]
        if "num_requests_total" in rm.counters:
            r.request_rate = rates["num_requests_total"]

        for hname, buckets in rm.histograms.items():
            delta = bucket_delta(buckets, self.prev_hist.get((dp, hname)))
            self.prev_hist[(dp, hname)] = dict(buckets)
            if delta is None:
                continue
            for q, label in QUANTILES:
                attr = f"{hname}_{label}_s"
                if hasattr(r, attr):
                    setattr(r, attr, quantile(q, delta))

    @staticmethod
    def _from_loads(r: EngineReading, loads: Loads, dp: int) -> None:
        for lr in loads.ranks:
            if lr.dp_rank != dp:
                continue
            # /v1/loads fills what /metrics did not give (a server without --enable-metrics).
            for name, loads_name in _FROM_LOADS.items():
                if getattr(r, name) is None:
                    setattr(r, name, getattr(lr, loads_name))

    @staticmethod
    def _from_info(r: EngineReading, info: ServerInfo, dp: int) -> None:
        for rs in info.ranks:
            if rs.dp_rank != dp:
                continue
            r.spec_max_bs = rs.spec_max_bs
            r.batches_drafted = rs.batches_drafted
            r.batches_gated = rs.batches_gated
            if r.spec_accept_length is None:
                r.spec_accept_length = rs.avg_spec_accept_length
            if r.spec_num_steps is None and rs.speculative_num_steps is not None:
                r.spec_num_steps = float(rs.speculative_num_steps)
