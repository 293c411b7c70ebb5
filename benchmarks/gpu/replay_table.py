"""Open-loop runs of one request trace under each knob policy, scored as issue #32 item 6 asks.

``measure_off.sh``'s ``policy`` phase with ``REPLAY_TRACE`` set replays the same trace (``spectower bench
replay --json``) once per policy and keeps each run's figures in ``replay-<policy>.json``. In open loop every
policy serves the same tokens once the queue drains, so the runs are compared by goodput (requests per second
that met the SLO) and latency, not tokens. The best fixed policy is the fixed one (always on, always off, a
threshold) with the most goodput; every run is set against it: its goodput ratio, its p99 TTFT ratio (the
item asks learn >= 0.98 and within 10 %) and its median end-to-end ratio.

A policy run more than once (``learn``, ``learn-2``: measure_off.sh names a repeat ``-2``) is listed run by
run and pooled in one row: the mean of its runs' ratios and their spread (lowest-highest). A fixed policy's
repeats are pooled the same way before the best is chosen, and the best is its runs' mean.

Intervals: a run whose --json carries its per-request records (collectors/bench/replay_records.py) gets a 95 %
interval on each ratio from a paired block bootstrap. The arrivals are cut into blocks of ``--block`` seconds
of scheduled arrival time (30 s: a burst stays in one block); a draw takes as many blocks as there are, with
replacement, the same blocks for every run (one trace, one seed: the same arrivals, paired by their index),
and recomputes each run's goodput (SLO-met requests of the drawn blocks over the run's span), p99 TTFT and
median end-to-end latency, so a ratio's interval keeps the two runs' shared bursts together. The bounds are
the 2.5th and 97.5th percentiles of ``--draws`` draws, seeded (``--seed``): the same files, the same table.
The interval says how much the ratio depends on which stretches of the trace were replayed, not how much a
second run on the same server would move (the repeats' spread says that). A run without records, or with
other arrivals than the best fixed policy's, prints "no interval" and why.

Each run's p99 TTFT tail is listed by stretch of arrivals, with the scheduler's stalls in each (from
``stalls-<policy>.json`` beside the run) and, given the launch's server log (``--server-log``: one log
covers every run of its launch), the pauses that log tells of (server_log.py): a process's Python held (the
plugin's watch; the launcher's show nowhere else) and the tokenizer manager's long garbage collections.

    python3 benchmarks/gpu/replay_table.py replay-learn.json replay-on.json ... [--json OUT.json]
        [--block 30] [--draws 2000] [--seed 1] [--server-log spec-server.log.gz]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from spectower.collectors.bench.replay_records import ReplayRecords, read_replay_records
from spectower.collectors.sglang.stalls import Stall, loop_report
from spectower.storage.files import parse_json_text, read_text_capped
from spectower.storage.request_traces import percentile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: the checkout, for its sibling
from benchmarks.gpu.server_log import (
    LauncherHold,
    holds_during,
    last_line_time,
    parse_server_log,
    read_log_lines,
)

MAX_REPLAY_BYTES = 32 * 1024 * 1024  # one run's --json: a few kB of figures, ~100 bytes a request of records
FIXED_PREFIXES = ("on", "off", "threshold")  # how measure_off.sh labels the fixed policies' runs
FIGURES = ("goodput_rps", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "output_tok_s", "completed", "failed")
# each ratio against the best fixed policy and the figure it divides
RATIOS = {"goodput_ratio": "goodput_rps", "ttft_p99_ratio": "ttft_p99_s", "e2e_p50_ratio": "e2e_p50_s"}
DEFAULT_BLOCK_S = 30.0
DEFAULT_DRAWS = 2000
DEFAULT_SEED = 1
LOW_Q, HIGH_Q = 2.5, 97.5  # a 95 % interval
FEW_BLOCKS = 10  # under it the block bootstrap's interval is too narrow to trust (see the tests)
MOST_UNDEFINED = 0.05  # of the draws: past it a ratio gets no interval (e.g. no goodput in the drawn blocks)
SAME_TIME_S = 1e-5  # two runs' scheduled times this close are one arrival (they are kept to the microsecond)
# The p99 TTFT's tail (``tail_stretches``): requests at or above it whose arrivals lie this close together are
# one stretch. A server that pauses makes every request arriving in the pause wait out the rest of it, so the
# tail comes in runs of arrivals a fraction of a second apart; 2 s keeps one pause in one stretch.
TAIL_GAP_S = 2.0
TAIL_STRETCHES_SHOWN = 4
# The prompt tokens scheduled in this many seconds before a tail stretch, set against the same sum before
# every arrival of the run: a pause a burst of prefill makes follows more prompt tokens than usual.
PRIOR_PROMPT_S = 3.0


@dataclass(frozen=True)
class ReplayRun:
    """One ``bench replay --json`` result: its figures, and its per-request records when it has them."""

    path: Path
    figures: dict[str, Any]
    records: ReplayRecords | None
    # the server's output stalls (plugin 0.4.7) from ``stalls-<policy>.json`` beside the run, every rank's,
    # and the run's zero on the wall clock (``started_at``) to set them against its requests; empty / None
    # where either is missing
    stalls: tuple[Stall, ...] = ()
    started_at: float | None = None


def read_stalls(replay_path: Path) -> tuple[Stall, ...]:
    """The server's stalls saved beside a run (``stalls-<policy>.json``: measure_off.sh's list of each rank's
    ``loop`` block after the run), or none when there is no such file; a malformed one is one line."""
    path = replay_path.with_name(replay_path.name.replace("replay-", "stalls-", 1))
    if not path.name.startswith("stalls-") or not path.is_file():
        return ()
    try:
        doc = parse_json_text(read_text_capped(path, MAX_REPLAY_BYTES))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(doc, list):
        raise ValueError(f"{path}: expected a list of each rank's loop block, got {type(doc).__name__}")
    reports = [loop_report(block) for block in doc]
    return tuple(stall for report in reports if report is not None for stall in report.recent)


def policy_of(path: Path) -> str:
    """``replay-threshold-16.json`` -> ``threshold-16``."""
    return path.stem.removeprefix("replay-")


def read_run(path: Path) -> ReplayRun:
    """One ``bench replay --json`` result; a figure or record field it lacks is one line naming the file."""
    try:
        doc = parse_json_text(read_text_capped(path, MAX_REPLAY_BYTES))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    missing = [key for key in FIGURES if not isinstance(doc, dict) or key not in doc]
    if missing:
        raise ValueError(f"{path}: not a bench replay --json result (missing {', '.join(missing)})")
    for key in FIGURES:  # a latency is null when nothing completed; goodput is always a number
        value = doc[key]
        if not (_is_number(value) or (value is None and key != "goodput_rps")):
            raise ValueError(f"{path}: {key}: expected a number{'' if key == 'goodput_rps' else ' or null'}, "
                             f"got {value!r}")  # fmt: skip
    records = None
    if "records" in doc:
        records = read_replay_records(doc["records"], str(path))
        span = doc.get("span_s")
        if not _is_number(span) or not span > 0:
            raise ValueError(f"{path}: span_s: expected the replay's span in seconds (> 0), got {span!r}")
    # the server's stalls are set against the requests by the replay's zero on the wall clock: none without it
    started_at = float(doc["started_at"]) if _is_number(doc.get("started_at")) else None
    stalls = read_stalls(path) if started_at is not None else ()
    return ReplayRun(path=path, figures=doc, records=records, stalls=stalls, started_at=started_at)


@dataclass(frozen=True)
class TailStretch:
    """Requests at or above a run's p99 TTFT whose arrivals follow each other within TAIL_GAP_S."""

    start_s: float  # the first one's scheduled arrival
    requests: int
    worst_ttft_s: float
    end_s: float = 0.0  # the last first token among them (scheduled arrival + TTFT)
    # prompt tokens scheduled in the PRIOR_PROMPT_S before its first arrival, and that sum's percentile among
    # the same sums before every arrival of the run (50: as usual; 100: the most of the run)
    prior_prompt_tokens: int = 0
    prior_prompt_pct: float = 0.0


def tail_stretches(records: ReplayRecords, gap_s: float = TAIL_GAP_S) -> list[TailStretch]:
    """Where a run's p99 TTFT comes from: the requests at or above it, in stretches of arrivals (TAIL_GAP_S),
    the stretch with the most of them first. A p99 rests on a run's slowest 1 %: two runs whose tails are one
    stretch each read the length of one stall each, which says more than their ratio. Requests without a
    TTFT (failed, shed) are left out, as the p99 leaves them out."""
    timed = sorted((s, t) for s, t in zip(records.scheduled_s, records.ttft_s, strict=True) if t is not None)
    if not timed:
        return []
    p99 = percentile([t for _, t in timed], 99)
    stretches: list[list[tuple[float, float]]] = []
    for arrival, ttft in timed:
        if ttft < p99:
            continue
        if stretches and arrival - stretches[-1][-1][0] <= gap_s:
            stretches[-1].append((arrival, ttft))
        else:
            stretches.append([(arrival, ttft)])
    prior = prior_prompt_tokens(records)
    usual = sorted(prior.values())

    def pct(tokens: int) -> float:
        return 100.0 * bisect.bisect_right(usual, tokens) / len(usual) if usual else 0.0

    found = []
    for group in stretches:
        before = prior.get(group[0][0], 0)
        found.append(TailStretch(group[0][0], len(group), max(t for _, t in group),
                                 max(a + t for a, t in group), before, pct(before)))  # fmt: skip
    return sorted(found, key=lambda s: (-s.requests, s.start_s))


def prior_prompt_tokens(records: ReplayRecords, window_s: float = PRIOR_PROMPT_S) -> dict[float, int]:
    """Per scheduled arrival, the prompt tokens of the requests scheduled in the ``window_s`` before it (its
    own included): the prefill the server had just been given."""
    sent = sorted((s, p) for s, p in zip(records.scheduled_s, records.prompt_tokens, strict=True)
                  if p is not None)  # fmt: skip
    out: dict[float, int] = {}
    total, first = 0, 0
    for s, tokens in sent:
        total += tokens
        while sent[first][0] < s - window_s:
            total -= sent[first][1]
            first += 1
        out[s] = total
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_fixed(policy: str) -> bool:
    return policy.split("-", 1)[0] in FIXED_PREFIXES


def repeat_groups(labels: Sequence[str]) -> dict[str, list[str]]:
    """Runs of one policy together: ``learn-2`` is a repeat of ``learn`` when ``learn`` is one of the runs
    (``threshold-16`` alone is not a repeat of anything)."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        repeat = re.fullmatch(r"(.+)-(\d+)", label)
        first = repeat[1] if repeat and int(repeat[2]) >= 2 and repeat[1] in labels else label
        groups.setdefault(first, []).append(label)
    return groups


def ratios_to(figures: dict[str, dict[str, Any]], reference: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each run's RATIOS against the mean of the ``reference`` runs' figures (None where either is missing
    or the reference is 0)."""
    out: dict[str, dict[str, Any]] = {label: {} for label in figures}
    for ratio, key in RATIOS.items():
        refs = [figures[label][key] for label in reference]
        ref = statistics.fmean(refs) if refs and None not in refs else None
        for label, figs in figures.items():
            value = figs[key]
            out[label][ratio] = value / ref if value is not None and ref else None
    return out


def pooled_mean(per_run: dict[str, dict[str, Any]], members: Sequence[str], ratio: str) -> float | None:
    values = [per_run[label][ratio] for label in members]
    return statistics.fmean(values) if values and None not in values else None


@dataclass(frozen=True)
class Blocked:
    """One run's requests by block of scheduled arrival time: per block the requests that met the SLO, and
    the TTFT and end-to-end latencies of those that completed (as ``open_loop_figures`` counts them), each
    block's in order: a draw's latencies are then a few sorted runs, which ``percentile``'s sort merges
    several times faster than it sorts them shuffled."""

    span_s: float
    met: list[int]
    ttft_s: list[list[float]]
    e2e_s: list[list[float]]

    def figures(self, draw: Sequence[int]) -> dict[str, float | None]:
        ttft = list(chain.from_iterable(self.ttft_s[b] for b in draw))
        e2e = list(chain.from_iterable(self.e2e_s[b] for b in draw))
        return {
            "goodput_rps": sum(self.met[b] for b in draw) / self.span_s,
            "ttft_p99_s": percentile(ttft, 99) if ttft else None,
            "e2e_p50_s": percentile(e2e, 50) if e2e else None,
        }


def cut_in_blocks(run: ReplayRun, starts: dict[int, int], blocks: int) -> Blocked:
    """``run``'s records by block (``starts``: the block of each arrival index)."""
    assert run.records is not None
    rec = run.records
    cut = Blocked(float(run.figures["span_s"]), [0] * blocks, [[] for _ in range(blocks)],
                  [[] for _ in range(blocks)])  # fmt: skip
    for i, index in enumerate(rec.index):
        block = starts[index]
        cut.met[block] += rec.slo_met[i]
        if rec.status[i] == "ok":
            if (ttft := rec.ttft_s[i]) is not None:
                cut.ttft_s[block].append(ttft)
            if (e2e := rec.e2e_s[i]) is not None:
                cut.e2e_s[block].append(e2e)
    for latencies in (*cut.ttft_s, *cut.e2e_s):
        latencies.sort()
    return cut


def same_arrivals(a: ReplayRecords, b: ReplayRecords) -> bool:
    return a.index == b.index and all(
        abs(x - y) <= SAME_TIME_S for x, y in zip(a.scheduled_s, b.scheduled_s, strict=True)
    )


@dataclass(frozen=True)
class Bootstrap:
    block_s: float = DEFAULT_BLOCK_S
    draws: int = DEFAULT_DRAWS
    seed: int = DEFAULT_SEED


Bounds = dict[str, tuple[float, float] | None]  # per ratio, its interval (None: undefined too often)


@dataclass(frozen=True)
class Intervals:
    runs: dict[str, Bounds]  # per run
    pools: dict[str, Bounds]  # per policy run more than once: the interval of its runs' mean
    blocks: int


def paired_intervals(
    runs: dict[str, ReplayRun], reference: Sequence[str], groups: dict[str, list[str]], boot: Bootstrap
) -> Intervals:
    """Each ratio's interval from ``boot``'s paired block bootstrap, per run and per policy run more than
    once. ``runs`` all have the reference's arrivals."""
    first = next(iter(runs.values())).records
    assert first is not None
    ids = sorted({int(t // boot.block_s) for t in first.scheduled_s})
    position = {block: n for n, block in enumerate(ids)}
    starts = {index: position[int(t // boot.block_s)]
              for index, t in zip(first.index, first.scheduled_s, strict=True)}  # fmt: skip
    cut = {label: cut_in_blocks(run, starts, len(ids)) for label, run in runs.items()}
    pools = {group: members for group, members in groups.items()
             if len(members) > 1 and set(members) <= set(runs)}  # fmt: skip
    by_run: dict[str, dict[str, list[float | None]]] = {label: {r: [] for r in RATIOS} for label in runs}
    by_pool: dict[str, dict[str, list[float | None]]] = {group: {r: [] for r in RATIOS} for group in pools}
    rng = random.Random(boot.seed)
    for _ in range(boot.draws):
        draw = [rng.randrange(len(ids)) for _ in ids]  # the same blocks for every run: paired
        per_run = ratios_to({label: blocked.figures(draw) for label, blocked in cut.items()}, reference)
        for ratio in RATIOS:
            for label in runs:
                by_run[label][ratio].append(per_run[label][ratio])
            for group, members in pools.items():
                by_pool[group][ratio].append(pooled_mean(per_run, members, ratio))

    def interval(samples: dict[str, dict[str, list[float | None]]]) -> dict[str, Bounds]:
        return {key: {ratio: bounds(values) for ratio, values in by.items()} for key, by in samples.items()}

    return Intervals(interval(by_run), interval(by_pool), len(ids))


def bounds(draws: Sequence[float | None]) -> tuple[float, float] | None:
    """The 95 % percentile interval of ``draws``; None when too many of them are undefined."""
    defined = [v for v in draws if v is not None]
    if not defined or len(draws) - len(defined) > MOST_UNDEFINED * len(draws):
        return None
    return percentile(defined, LOW_Q), percentile(defined, HIGH_Q)


def interval_runs(
    runs: dict[str, ReplayRun], reference: Sequence[str]
) -> tuple[dict[str, ReplayRun], dict[str, str]]:
    """The runs that can be paired with the reference's arrivals, and why each other run cannot."""
    ref_records = [runs[label].records for label in reference]
    if not reference or any(r is None for r in ref_records):
        why = "the best fixed policy's run has no per-request records" if reference else "no fixed policy"
        return {}, dict.fromkeys(runs, why)
    base = ref_records[0]
    assert base is not None
    paired: dict[str, ReplayRun] = {}
    why_not: dict[str, str] = {}
    for label, run in runs.items():
        if run.records is None:
            why_not[label] = "no per-request records"
        elif not same_arrivals(run.records, base):
            why_not[label] = f"other arrivals than {reference[0]}'s (trace, speedup, rate scale, seed)"
        else:
            paired[label] = run
    if set(reference) - set(paired):
        return {}, dict.fromkeys(runs, "the best fixed policy's runs have different arrivals")
    return paired, why_not


def table(
    runs: dict[str, ReplayRun],
    boot: Bootstrap | None = None,
    holds: Sequence[LauncherHold] | None = None,
    log_end: float | None = None,
) -> dict[str, Any]:
    """Per run and per pooled policy its ratios against the best fixed policy, with intervals where the
    records allow (see the module's docstring); each tail stretch with the server log's ``holds`` in it
    (``launcher_holds``) when a log was read, or ``beyond_log`` where it lies past the log's end
    (``log_end``)."""
    boot = boot or Bootstrap()
    groups = repeat_groups(list(runs))
    goodput = {group: statistics.fmean(runs[label].figures["goodput_rps"] for label in members)
               for group, members in groups.items() if is_fixed(group)}  # fmt: skip
    best = max(goodput, key=goodput.__getitem__) if goodput else None
    reference = groups[best] if best is not None else []
    figures = {label: {key: run.figures[key] for key in FIGURES} for label, run in runs.items()}
    points = ratios_to(figures, reference) if reference else {label: {} for label in runs}
    paired, why_not = interval_runs(runs, reference)
    found = paired_intervals(paired, reference, groups, boot) if paired else Intervals({}, {}, 0)
    rows = {label: {**figures[label], "against": best, **points[label], "intervals": found.runs.get(label),
                    "no_interval": why_not.get(label), "ttft_tail": _tail_json(runs[label], holds, log_end)}
            for label in runs}  # fmt: skip
    pooled: dict[str, dict[str, Any]] = {}
    for group, members in groups.items():
        if len(members) < 2 or not reference:
            continue
        row: dict[str, Any] = {"runs": members, "intervals": found.pools.get(group)}
        for ratio in RATIOS:
            values = [points[label][ratio] for label in members]
            row[ratio] = pooled_mean(points, members, ratio)
            row[f"{ratio}_spread"] = None if None in values else [min(values), max(values)]
        pooled[group] = row
    return {"against": best, "reference_runs": reference, "block_s": boot.block_s, "blocks": found.blocks,
            "draws": boot.draws, "seed": boot.seed, "runs": rows, "pooled": pooled}  # fmt: skip


def _tail_json(
    run: ReplayRun, holds: Sequence[LauncherHold] | None = None, log_end: float | None = None
) -> list[dict[str, Any]] | None:
    """The run's ``tail_stretches`` as JSON (None without per-request records)."""
    if run.records is None:
        return None
    # with a server log read, what it tells of in each stretch; a stretch past the log's end (``log_end``,
    # Unix s) is marked: the log cannot say it held no pause there
    return [{"start_s": round(s.start_s, 3), "requests": s.requests, "worst_ttft_s": round(s.worst_ttft_s, 4),
             "prior_prompt_tokens": s.prior_prompt_tokens, "prior_prompt_pct": round(s.prior_prompt_pct, 1),
             "server_stalls": server_stalls(run, s),
             **({} if holds is None else _holds_json(run, s, holds, log_end))}
            for s in tail_stretches(run.records)]  # fmt: skip


def _holds_json(
    run: ReplayRun, stretch: TailStretch, holds: Sequence[LauncherHold], log_end: float | None
) -> dict[str, Any]:
    if log_end is not None and run.started_at is not None and run.started_at + stretch.start_s > log_end:
        return {"launcher_holds": None, "beyond_log": True}
    return {"launcher_holds": launcher_holds(run, stretch, holds)}


def server_stalls(run: ReplayRun, stretch: TailStretch) -> list[dict[str, Any]]:
    """The server's own stalls (plugin 0.4.7) that overlap a tail stretch, from its first arrival to its
    last first token, on the run's clock: what the scheduler did while those requests waited."""
    if run.started_at is None:
        return []
    found = []
    for stall in run.stalls:
        begins, ends = stall.started - run.started_at, stall.at - run.started_at
        if begins <= stretch.end_s and ends >= stretch.start_s:
            found.append({"from_s": round(begins, 3), "seconds": round(stall.seconds, 4),
                          "cause": stall.cause(), "where": stall.where()})  # fmt: skip
    return sorted(found, key=lambda s: s["from_s"])


def launcher_holds(
    run: ReplayRun, stretch: TailStretch, holds: Sequence[LauncherHold]
) -> list[dict[str, Any]] | None:
    """The server log's pauses (server_log.py) that may overlap a tail stretch, on the run's clock; None for a
    run without its zero on the wall clock, which cannot be set against the log."""
    if run.started_at is None:
        return None
    zero = run.started_at
    return [{"kind": hold.kind, "from_s": round(hold.began - zero, 3), "seconds": round(hold.seconds, 4),
             "pid": hold.pid, "generation": hold.generation, "objects": hold.objects}
            for hold in holds_during(holds, zero + stretch.start_s, zero + stretch.end_s)]  # fmt: skip


def print_tails(scored: dict[str, Any]) -> None:
    """Per run with records: the stretches of arrivals its p99 TTFT's tail lies in, the largest first."""
    rows = {policy: row["ttft_tail"] for policy, row in sorted(scored["runs"].items()) if row["ttft_tail"]}
    if not rows:
        return
    print(f"ttft at or above the run's p99, by stretch of arrivals (within {TAIL_GAP_S:g} s): start s "
          f"x requests (worst ttft s; percentile of the prompt tokens scheduled in the {PRIOR_PROMPT_S:g} s "
          f"before, among those before every arrival), the largest {TAIL_STRETCHES_SHOWN}")  # fmt: skip
    for policy, tail in rows.items():
        shown = [f"{s['start_s']:.1f} x{s['requests']} ({s['worst_ttft_s']:.2f}; "
                 f"p{s['prior_prompt_pct']:.0f})" for s in tail[:TAIL_STRETCHES_SHOWN]]  # fmt: skip
        more = f", {len(tail) - TAIL_STRETCHES_SHOWN} more" if len(tail) > TAIL_STRETCHES_SHOWN else ""
        print(f"  {policy:14} {', '.join(shown)}{more}")  # indented: the ratio rows start with the policy
        for s in tail[:TAIL_STRETCHES_SHOWN]:
            for stall in s.get("server_stalls") or ():
                at = f", at {stall['where']}" if stall.get("where") else ""
                print(f"    {s['start_s']:.1f}: the server stalled {stall['seconds']:.2f} s from "
                      f"{stall['from_s']:.1f} s: {stall['cause']}{at}")  # fmt: skip
            for hold in s.get("launcher_holds") or ():
                print(f"    {s['start_s']:.1f}: {_hold_text(hold)}")
        print_hold_summary(policy, tail[:TAIL_STRETCHES_SHOWN])


def _hold_text(hold: dict[str, Any]) -> str:
    ends = hold["from_s"] + hold["seconds"]
    if hold["kind"] == "held":
        return f"pid {hold['pid']}'s Python was held {hold['seconds']:.2f} s to {ends:.1f} s"
    objects = "" if hold["objects"] is None else f" of {hold['objects']:,} objects".replace(",", " ")
    return (f"SGLang's tokenizer manager: a gen-{hold['generation']} collection{objects}, "
            f"{hold['seconds']:.2f} s, near {ends:.0f} s")  # fmt: skip


def print_hold_summary(policy: str, shown: list[dict[str, Any]]) -> None:
    """After a run's tail lines, when a server log was read: how many shown stretches meet a pause in it."""
    if not shown or "launcher_holds" not in shown[0]:
        return
    beyond = sum(bool(s.get("beyond_log")) for s in shown)
    if beyond:
        print(f"    {policy}: the server log ends before {beyond} of {len(shown)} shown stretches: it cannot "
              "say what paused there")  # fmt: skip
    within = [s for s in shown if not s.get("beyond_log")]
    if not within:
        return
    if within[0]["launcher_holds"] is None:
        print(f"    {policy}: no started_at in its replay: the server log cannot be set against it")
        return
    met = sum(bool(s["launcher_holds"]) for s in within)
    print(f"    {policy}: {met} of {len(within)} shown stretches meet a held process or a collection in the "
          "server log")  # fmt: skip


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio_cell(row: dict[str, Any], ratio: str) -> str:
    cell = _f(row.get(ratio))
    if row.get("intervals"):
        interval = row["intervals"][ratio]
        cell += " (undefined*)" if interval is None else f" ({interval[0]:.3f}-{interval[1]:.3f})"
    spread = row.get(f"{ratio}_spread")
    return cell + (f" [{spread[0]:.3f}-{spread[1]:.3f}]" if spread else "")


def print_table(scored: dict[str, Any]) -> None:
    rows, against = scored["runs"], scored["against"]
    refs = scored["reference_runs"]
    mean = f" ({', '.join(refs)}: their mean)" if len(refs) > 1 else ""
    print(
        f"open loop: goodput (req/s within the SLO) and latency; against the best fixed: {against or '-'}"
        + mean
    )
    heads = ("goodput", "ttft p99", "e2e p50", "e2e p99", "tok/s", "done", "failed")
    print(f"{'policy':16}" + "".join(f" {head:>9}" for head in heads))
    for policy, row in sorted(rows.items()):
        cells = (_f(row["goodput_rps"]), _f(row["ttft_p99_s"], 2), _f(row["e2e_p50_s"], 2),
                 _f(row["e2e_p99_s"], 2), _f(row["output_tok_s"], 0), str(row["completed"]),
                 str(row["failed"]))  # fmt: skip
        print(f"{policy:16}" + "".join(f" {cell:>9}" for cell in cells))
    if against is None:
        print("no fixed policy (on, off, threshold-N) among the runs: no ratios")
    else:
        print_ratios(scored)
    print_tails(scored)


def print_ratios(scored: dict[str, Any]) -> None:
    """Each run's ratios to the best fixed policy, then each policy run more than once, pooled."""
    rows, pooled, against = scored["runs"], scored["pooled"], scored["against"]
    if scored["blocks"]:
        spread = " [lowest-highest of its runs]" if pooled else ""
        print(f"ratios to {against}: point (95 % interval){spread}; the interval from a paired bootstrap of "
              f"{scored['blocks']} blocks of {scored['block_s']:g} s of arrivals ({scored['draws']} draws, "
              f"seed {scored['seed']})")  # fmt: skip
        if scored["blocks"] < FEW_BLOCKS:
            print(f"only {scored['blocks']} blocks: with under {FEW_BLOCKS} the bootstrap's interval runs "
                  "narrow (a longer replay or a shorter --block gives more)")  # fmt: skip
    else:
        why = next(iter(rows.values()))["no_interval"]
        print(f"ratios to {against}: no interval ({why})")
    print(
        (
            f"{'policy':16}" + "".join(f" {head:<34}" for head in ("goodput/", "ttft p99/", "e2e p50/"))
        ).rstrip()
    )
    named = [(policy, row) for policy, row in sorted(rows.items())]
    named += [(f"{group} x{len(row['runs'])}", row) for group, row in sorted(pooled.items())]
    for policy, row in named:
        line = f"{policy:16}" + "".join(f" {_ratio_cell(row, ratio):<34}" for ratio in RATIOS)
        why = row.get("no_interval")
        print(line.rstrip() + (f"  no interval: {why}" if why and scored["blocks"] else ""))
    if any(" (undefined*)" in _ratio_cell(row, ratio) for _, row in named for ratio in RATIOS):
        print(
            f"* undefined: the figure was missing or the reference's was 0 in more than "
            f"{MOST_UNDEFINED:.0%} of the draws (few blocks, or blocks where none met the SLO)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="replay-<policy>.json files")
    parser.add_argument("--json", type=Path, help="write the table (and its intervals) here")
    parser.add_argument("--block", type=float, default=DEFAULT_BLOCK_S, help="seconds of arrivals a block")
    parser.add_argument("--draws", type=int, default=DEFAULT_DRAWS, help="bootstrap draws")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the bootstrap's seed")
    parser.add_argument("--server-log", type=Path, help="the launch's SGLang log (.gz too)")
    args = parser.parse_args(argv)
    if not args.block > 0 or not 100 <= args.draws <= 100_000:
        print("error: --block must be > 0 s and --draws between 100 and 100000", file=sys.stderr)
        return 2
    try:
        runs = {policy_of(path): read_run(path) for path in args.runs}
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        lines = None if args.server_log is None else read_log_lines(args.server_log)
    except ValueError as exc:
        print(f"error: --server-log: {exc}", file=sys.stderr)
        return 2
    holds = None if lines is None else parse_server_log(lines)
    log_end = None if lines is None else last_line_time(lines)
    scored = table(runs, Bootstrap(args.block, args.draws, args.seed), holds, log_end)
    print_table(scored)
    if args.json is not None:
        args.json.write_text(json.dumps(scored, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
