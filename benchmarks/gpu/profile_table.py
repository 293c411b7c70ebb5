"""Kernel time per engine step from SGLang's own profiler traces (``POST /start_profile``): the table that
judges "off means off" (docs: data/gpu-runs/NOTEBOOK.md).

Each trace directory holds one Chrome trace (``*.trace.json.gz``) of ``num_steps`` forward steps. For each
one this prints the GPU time per step, the share of the attention kernels, and the top kernels, so a gated
batch (knob at 0) can be compared with a plain server's decode step and with a drafting one.

    python3 benchmarks/gpu/profile_table.py --steps 12 LABEL=DIR [LABEL=DIR ...] [--json OUT.json]

With ``--timeline`` (traces taken with ``"activities": ["CPU", "GPU"]``) it also says how much of the wall
time between the first and the last kernel the GPU sat idle, per step, and which Python functions of the
scheduler were running while it did: GPU time alone cannot explain a server that serves less than its
kernels allow (the CPU side not keeping the GPU fed).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import itertools
import json
import sys
from pathlib import Path
from typing import Any

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Attention kernels by name: triton's extend/verify (_fwd_kernel), its decode kernels, flashinfer's.
ATTENTION_MARKERS = ("_fwd_kernel", "decode_att", "_fwd_grouped_kernel", "attention", "BatchPrefill",
                     "BatchDecode", "flashinfer", "merge_state")  # fmt: skip


def read_trace(folder: Path, categories: tuple[str, ...] | None = GPU_CATEGORIES) -> list[dict[str, Any]]:
    """The trace's complete events (``dur`` present), only those of ``categories`` unless it is None."""
    files = sorted(folder.glob("**/*.json.gz")) + sorted(folder.glob("**/*.json"))
    if not files:
        raise SystemExit(f"{folder}: no trace file")
    if len(files) > 1:  # a second profile into the same folder: which one is meant is anyone's guess
        raise SystemExit(f"{folder}: {len(files)} trace files, one expected (one folder per profile)")
    path = files[0]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        data = json.load(handle)
    events = data.get("traceEvents", [])
    return [e for e in events if "dur" in e and (categories is None or e.get("cat") in categories)]


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _short(name: str) -> str:
    # ".../sglang/srt/managers/scheduler.py(1234): event_loop" -> "managers/scheduler.py: event_loop"
    path, _, func = name.partition(": ")
    path = path.split("sglang/srt/")[-1].split("site-packages/")[-1]
    return f"{path.split('(')[0]}: {func}" if func else path[:100]


Intervals = list[tuple[float, float]]  # (start, end) in the trace's microseconds


def _busy_intervals(events: list[dict[str, Any]]) -> Intervals:
    """When the GPU was busy: its events' intervals, merged."""
    return _union(
        [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events if e.get("cat") in GPU_CATEGORIES]
    )


def _gaps(busy: Intervals, min_gap_us: float) -> Intervals:
    return [(a[1], b[0]) for a, b in itertools.pairwise(busy) if b[0] - a[1] >= min_gap_us]


def _idle_figures(busy: Intervals, gaps: Intervals, steps: int) -> dict[str, float]:
    wall_us = busy[-1][1] - busy[0][0]
    idle_us = sum(b - a for a, b in gaps)
    return {
        "wall_ms_per_step": wall_us / 1000 / steps,
        "idle_ms_per_step": idle_us / 1000 / steps,
        "idle_share": idle_us / wall_us if wall_us else 0.0,
    }


def gpu_idle(events: list[dict[str, Any]], steps: int, min_gap_us: float = 20.0) -> dict[str, float]:
    """Wall time between the first and the last GPU event, per step, and the share of it the GPU sat idle.

    GPU events alone say this, so a trace taken with ``"activities": ["GPU"]`` gives it without a Python
    tracer slowing the scheduler down. The profiler's CUPTI still adds host time to every kernel launch
    (on the H200 a gated step at C=1 idled 30 % of such a trace while serving 0.98 of plain unprofiled):
    compare states profiled the same way, not a profiled step with an unprofiled server's throughput."""
    busy = _busy_intervals(events)
    return _idle_figures(busy, _gaps(busy, min_gap_us), steps) if busy else {}


def timeline(
    events: list[dict[str, Any]], steps: int, top: int = 25, min_gap_us: float = 20.0
) -> dict[str, Any]:
    """GPU idle time between kernels, and the CPU-side Python functions running during those gaps."""
    busy = _busy_intervals(events)
    if not busy:
        return {"error": "no GPU events"}
    gaps = _gaps(busy, min_gap_us)
    in_gaps: collections.defaultdict[str, float] = collections.defaultdict(float)
    runtime_in_gaps: collections.defaultdict[str, float] = collections.defaultdict(float)
    gap_index = 0
    cpu_side = [e for e in events if e.get("cat") in ("python_function", "cuda_runtime", "cuda_driver")]
    for event in sorted(cpu_side, key=lambda e: float(e["ts"])):
        e0, e1 = float(event["ts"]), float(event["ts"]) + float(event["dur"])
        while gap_index < len(gaps) and gaps[gap_index][1] <= e0:
            gap_index += 1
        overlap = 0.0
        for g0, g1 in itertools.islice(gaps, gap_index, None):  # no copy of the rest per event
            if g0 >= e1:
                break
            overlap += max(0.0, min(e1, g1) - max(e0, g0))
        if overlap > 0:
            target = in_gaps if event.get("cat") == "python_function" else runtime_in_gaps
            target[_short(str(event["name"]))] += overlap
    busy_us = sum(b - a for a, b in busy)
    return {
        **_idle_figures(busy, gaps, steps),
        "gpu_busy_ms_per_step": busy_us / 1000 / steps,
        "gaps_per_step": len(gaps) / steps,
        "python_in_gaps": [{"name": n, "ms_per_step": t / 1000 / steps} for n, t in _largest(in_gaps, top)],
        "runtime_in_gaps": [
            {"name": n, "ms_per_step": t / 1000 / steps} for n, t in _largest(runtime_in_gaps, 10)
        ],
    }


def _largest(totals: dict[str, float], n: int) -> list[tuple[str, float]]:
    """The ``n`` largest totals, largest first."""
    return sorted(totals.items(), key=lambda kv: -kv[1])[:n]


def summarise(events: list[dict[str, Any]], steps: int, top: int = 6) -> dict[str, Any]:
    totals: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for event in events:
        name = event["name"][:100]
        totals[name] += event["dur"]
        counts[name] += 1
    busy_us = sum(totals.values())
    attention_us = sum(t for n, t in totals.items() if any(m in n for m in ATTENTION_MARKERS))
    return {
        "kernels": len(events),
        "gpu_ms_per_step": busy_us / 1000 / steps,
        "attention_share": attention_us / busy_us if busy_us else 0.0,
        **gpu_idle(events, steps),
        "top": [
            {"name": n, "share": t / busy_us, "ms_per_step": t / 1000 / steps, "calls": counts[n]}
            for n, t in totals.most_common(top)
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("traces", nargs="+", help="LABEL=DIR")
    parser.add_argument("--steps", type=int, required=True, help="num_steps given to /start_profile")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--timeline", action="store_true", help="also GPU idle time and the CPU work during it"
    )
    args = parser.parse_args(argv)
    rows: dict[str, Any] = {}
    for item in args.traces:
        label, _, folder = item.partition("=")
        try:
            events = read_trace(Path(folder), None if args.timeline else GPU_CATEGORIES)
            rows[label] = summarise([e for e in events if e.get("cat") in GPU_CATEGORIES], args.steps)
            if args.timeline:
                rows[label]["timeline"] = timeline(events, args.steps)
        except SystemExit as exc:
            print(exc, file=sys.stderr)
    header = f"{'state':<22} {'GPU ms/step':>12} {'wall ms/step':>13} {'GPU idle':>9} {'attention':>10}"
    print(f"{header}  top kernel")
    for label, row in rows.items():
        first: dict[str, Any] = row["top"][0] if row["top"] else {"name": "-", "share": 0}
        print(f"{label:<22} {row['gpu_ms_per_step']:>12.2f} {row.get('wall_ms_per_step', 0.0):>13.2f} "
              f"{row.get('idle_share', 0.0):>9.0%} {row['attention_share']:>10.0%}  "
              f"{first['share']:.0%} {first['name'][:60]}")  # fmt: skip
    for label, row in rows.items():
        line = row.get("timeline")
        if not line or "error" in line:
            continue
        print(
            f"\n{label}: wall {line['wall_ms_per_step']:.2f} ms/step, "
            f"GPU busy {line['gpu_busy_ms_per_step']:.2f}, idle {line['idle_ms_per_step']:.2f} "
            f"({line['idle_share']:.0%}, {line['gaps_per_step']:.1f} gaps/step)"
        )
        for item in line["python_in_gaps"][:15]:
            print(f"  {item['ms_per_step']:7.3f} ms  {item['name'][:110]}")
        for item in line["runtime_in_gaps"][:5]:
            print(f"  {item['ms_per_step']:7.3f} ms  [runtime] {item['name'][:100]}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
