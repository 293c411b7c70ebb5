"""SGLang ``/metrics`` → one ``MetricsSnapshot``: the values spectower uses, per DP rank.

Reads every label set SGLang has used, 0.5.1 to 0.5.23:
- old releases: ``model_name`` only (no rank labels) → everything is DP rank 0;
- 0.5.1+: scheduler series carry ``tp_rank, pp_rank`` (+``moe_ep_rank``, +``dp_rank`` under DP, +``pid`` on a
  few in 0.5.17, +``priority``, +extra labels); tokenizer series carry ``model_name, engine_type``
  (+``is_streaming``).

Ranks: scheduler series are grouped by ``dp_rank`` (absent = 0). Inside one DP group only one scheduler
(the lowest ``tp_rank, pp_rank, moe_ep_rank``) is read: with ``--enable-metrics-for-all-schedulers`` every
TP rank repeats the same batch, and summing them would count each token tp_size times. Under DP attention
the reporting scheduler of DP rank 1 is not TP rank 0, which is why this picks per group, not "tp_rank=0".
Tokenizer series (no rank labels at all) are server-wide: they are summed over their other labels
(``is_streaming``) and reported on DP rank 0 only, so a sum over ranks stays right.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...storage.integers import int_or_none
from ..promtext import PerLabelSet, PromSample, parse_prometheus_text

PREFIX = "sglang:"
SCHEDULER_RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank")

GAUGES = (
    "num_running_reqs",
    "num_queue_reqs",
    "gen_throughput",
    "token_usage",
    "cache_hit_rate",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_steps",
    "spec_num_draft_tokens",
    "max_total_num_tokens",
)
# counter sample name (without prefix) -> key; realtime_tokens_total is split by its ``mode`` label.
COUNTERS = (
    "realtime_tokens_total",
    "generation_tokens_total",
    "prompt_tokens_total",
    "num_requests_total",
    "spec_verify_calls_total",
)
# histogram family (without prefix) -> our name. Older releases call ITL time_per_output_token_seconds.
HISTOGRAMS = {
    "time_to_first_token_seconds": "ttft",
    "inter_token_latency_seconds": "itl",
    "e2e_request_latency_seconds": "e2e",
}
HISTOGRAM_FALLBACKS = {"time_per_output_token_seconds": "itl_legacy"}


@dataclass
class RankMetrics:
    dp_rank: int
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)  # "realtime_tokens_total:decode", ...
    histograms: dict[str, dict[float, float]] = field(default_factory=dict)  # name -> le -> cumulative


@dataclass
class MetricsSnapshot:
    ranks: dict[int, RankMetrics]
    model_name: str | None = None
    # Changes when the server restarts (startup phase durations are measured anew each start).
    startup_fingerprint: tuple[tuple[str, float], ...] | None = None
    reporting_schedulers: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    sample_count: int = 0

    def rank(self, dp_rank: int) -> RankMetrics:
        if dp_rank not in self.ranks:
            self.ranks[dp_rank] = RankMetrics(dp_rank)
        return self.ranks[dp_rank]


def _int_label(labels: Mapping[str, str], key: str) -> int:
    raw = labels.get(key)
    if raw is None or raw == "":
        return 0
    try:
        value = int(raw)
    except ValueError:
        return 0
    return value if int_or_none(value, lo=0) is not None else 0  # a rank no column holds: rank 0


def _is_scheduler(labels: Mapping[str, str]) -> bool:
    return "dp_rank" in labels or any(k in labels for k in SCHEDULER_RANK_LABELS)


def _sched_key(labels: Mapping[str, str]) -> tuple[int, int, int]:
    return (_int_label(labels, "tp_rank"), _int_label(labels, "pp_rank"), _int_label(labels, "moe_ep_rank"))


def _rank(labels: Mapping[str, str]) -> tuple[int, tuple[int, int, int] | None]:
    """(DP rank, scheduler key) of a sample's labels; the key is None for a tokenizer (server-wide) series."""
    if _is_scheduler(labels):
        return _int_label(labels, "dp_rank"), _sched_key(labels)
    return 0, None


_rank_of = PerLabelSet(_rank)


def _families() -> frozenset[str]:
    names = {f"{PREFIX}{g}" for g in GAUGES}
    names |= {f"{PREFIX}{c}" for c in COUNTERS} | {f"{PREFIX}{c.removesuffix('_total')}" for c in COUNTERS}
    names |= {f"{PREFIX}{h}" for h in (*HISTOGRAMS, *HISTOGRAM_FALLBACKS)}
    names.add(f"{PREFIX}startup_time_seconds")
    return frozenset(names)


FAMILIES = _families()


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse one scrape (only the families spectower reads). Raises MetricsParseError for a bad body."""
    return snapshot_from_samples(parse_prometheus_text(text, families=FAMILIES))


def snapshot_from_samples(samples: list[PromSample]) -> MetricsSnapshot:
    ours = [s for s in samples if s.name.startswith(PREFIX)]
    snap = MetricsSnapshot(ranks={}, sample_count=len(ours))

    # 1. Which scheduler reports for each DP group: the lowest (tp, pp, ep) seen in it.
    ranked = [(s, *_rank_of(s.labels)) for s in ours]
    for _s, dp, key in ranked:
        if key is not None:
            cur = snap.reporting_schedulers.get(dp)
            if cur is None or key < cur:
                snap.reporting_schedulers[dp] = key

    startup: list[tuple[str, float]] = []
    for s, dp, key in ranked:
        short = s.name[len(PREFIX) :]
        labels = s.labels
        if snap.model_name is None and labels.get("model_name"):
            snap.model_name = labels["model_name"]
        if short == "startup_time_seconds":
            startup.append((labels.get("phase", ""), s.value))
            continue
        if key is not None and key != snap.reporting_schedulers.get(dp):
            continue  # another TP/PP/EP rank of the same DP group: the same numbers again
        _take(snap, short, s, dp, key is None)

    for r in snap.ranks.values():
        legacy = r.histograms.pop("itl_legacy", None)
        if legacy is not None and "itl" not in r.histograms:
            r.histograms["itl"] = legacy
    snap.startup_fingerprint = tuple(sorted(startup)) if startup else None
    if not snap.ranks:
        snap.ranks[0] = RankMetrics(0)
    return snap


_GAUGE_NAMES = frozenset(GAUGES)
_COUNTER_NAMES = frozenset(COUNTERS)
_BUCKET_NAMES = {f"{fam}_bucket": name for fam, name in (*HISTOGRAMS.items(), *HISTOGRAM_FALLBACKS.items())}


def _take(snap: MetricsSnapshot, short: str, s: PromSample, dp: int, server_wide: bool) -> None:
    if s.type == "gauge" and short in _GAUGE_NAMES:
        # A gauge is per scheduler; old releases (no rank labels) are rank 0 either way.
        snap.rank(dp).gauges[short] = s.value
        return
    if short in _COUNTER_NAMES and s.type in ("counter", "untyped", "unknown"):
        key = short
        if short == "realtime_tokens_total":
            key = f"{short}:{s.labels.get('mode', '')}"
        r = snap.rank(dp)
        r.counters[key] = r.counters.get(key, 0.0) + s.value  # sum over is_streaming etc.
        return
    if s.type == "histogram":
        name = _BUCKET_NAMES.get(short)
        if name is None:
            return
        le_raw = s.labels.get("le")
        if le_raw is None:
            return
        try:
            le = float(le_raw)
        except ValueError:
            return
        if math.isnan(le):
            return
        hist = snap.rank(dp).histograms.setdefault(name, {})
        hist[le] = hist.get(le, 0.0) + s.value  # sum over is_streaming: bounds are shared
