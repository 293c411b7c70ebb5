"""Kernel time per engine step from SGLang's own profiler traces (``POST /start_profile``): the table that
judges "off means off" (docs: gpu/README.md).

Each trace directory holds one Chrome trace (``*.trace.json.gz``) of ``num_steps`` forward steps. For each
one this prints the GPU time per step, the share of the attention kernels, and the top kernels, so a gated
batch (knob at 0) can be compared with a plain server's decode step and with a drafting one.

    python3 gpu/profile_table.py --steps 12 LABEL=DIR [LABEL=DIR ...] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path
from typing import Any

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Attention kernels by name: triton's extend/verify (_fwd_kernel), its decode kernels, flashinfer's.
ATTENTION_MARKERS = ("_fwd_kernel", "decode_att", "_fwd_grouped_kernel", "attention", "BatchPrefill",
                     "BatchDecode", "flashinfer", "merge_state")  # fmt: skip


def read_trace(folder: Path) -> list[dict[str, Any]]:
    files = sorted(folder.glob("**/*.json.gz")) + sorted(folder.glob("**/*.json"))
    if not files:
        raise SystemExit(f"{folder}: no trace file")
    path = files[0]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:  # type: ignore[operator]
        data = json.load(handle)
    return [e for e in data.get("traceEvents", []) if e.get("cat") in GPU_CATEGORIES and "dur" in e]


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
    args = parser.parse_args(argv)
    rows: dict[str, Any] = {}
    for item in args.traces:
        label, _, folder = item.partition("=")
        try:
            rows[label] = summarise(read_trace(Path(folder)), args.steps)
        except SystemExit as exc:
            print(exc, file=sys.stderr)
    print(f"{'state':<22} {'GPU ms/step':>12} {'attention':>10}  top kernel")
    for label, row in rows.items():
        first = row["top"][0] if row["top"] else {"name": "-", "share": 0}
        print(f"{label:<22} {row['gpu_ms_per_step']:>12.2f} {row['attention_share']:>9.0%}  "
              f"{first['share']:.0%} {first['name'][:60]}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
