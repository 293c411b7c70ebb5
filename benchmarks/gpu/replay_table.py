"""Open-loop runs of one request trace under each knob policy, scored as issue #32 item 6 asks.

``measure_off.sh``'s ``policy`` phase with ``REPLAY_TRACE`` set replays the same trace (``spectower bench
replay --json``) once per policy and keeps each run's figures in ``replay-<policy>.json``. In open loop every
policy serves the same tokens once the queue drains, so the runs are compared by goodput (requests per second
that met the SLO) and latency, not tokens. The best fixed policy is the fixed one (always on, always off, a
threshold) with the most goodput; every run is set against it: its goodput ratio and its p99 TTFT ratio (the
item asks learn >= 0.98 and within 10 %).

    python3 benchmarks/gpu/replay_table.py replay-learn.json replay-on.json ... [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spectower.storage.files import parse_json_text, read_text_capped

MAX_REPLAY_BYTES = 4 * 1024 * 1024  # one run's --json is a few kB
FIXED_PREFIXES = ("on", "off", "threshold")  # how measure_off.sh labels the fixed policies' runs
FIGURES = ("goodput_rps", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "output_tok_s", "completed", "failed")


def policy_of(path: Path) -> str:
    """``replay-threshold-16.json`` -> ``threshold-16``."""
    return path.stem.removeprefix("replay-")


def read_run(path: Path) -> dict[str, Any]:
    """One ``bench replay --json`` object; a figure it lacks is a one-line error naming the file."""
    try:
        doc = parse_json_text(read_text_capped(path, MAX_REPLAY_BYTES))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    missing = [key for key in FIGURES if not isinstance(doc, dict) or key not in doc]
    if missing:
        raise ValueError(f"{path}: not a bench replay --json result (missing {', '.join(missing)})")
    return doc


def is_fixed(policy: str) -> bool:
    return policy.split("-", 1)[0] in FIXED_PREFIXES


def table(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per policy its figures and, against the best fixed policy (most goodput), goodput and TTFT ratios."""
    fixed = [p for p in runs if is_fixed(p)]
    best = max(fixed, key=lambda p: runs[p]["goodput_rps"]) if fixed else None
    out: dict[str, dict[str, Any]] = {}
    for policy, run in runs.items():
        row = {key: run[key] for key in FIGURES}
        if best is not None:
            ref = runs[best]
            row["against"] = best
            row["goodput_ratio"] = run["goodput_rps"] / ref["goodput_rps"] if ref["goodput_rps"] else None
            ttft, ref_ttft = run["ttft_p99_s"], ref["ttft_p99_s"]
            row["ttft_p99_ratio"] = ttft / ref_ttft if ttft is not None and ref_ttft else None
        out[policy] = row
    return out


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="replay-<policy>.json files")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        runs = {policy_of(path): read_run(path) for path in args.runs}
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = table(runs)
    best = next((row["against"] for row in rows.values() if "against" in row), None)
    print(f"open loop: goodput (req/s within the SLO) and latency; against the best fixed: {best or '-'}")
    heads = ("goodput", "ttft p99", "e2e p50", "e2e p99", "tok/s", "done", "failed", "goodput/", "ttft p99/")
    print(f"{'policy':16}" + "".join(f" {head:>9}" for head in heads))
    for policy, row in sorted(rows.items()):
        cells = (_f(row["goodput_rps"]), _f(row["ttft_p99_s"], 2), _f(row["e2e_p50_s"], 2),
                 _f(row["e2e_p99_s"], 2), _f(row["output_tok_s"], 0), str(row["completed"]),
                 str(row["failed"]), _f(row.get("goodput_ratio")), _f(row.get("ttft_p99_ratio")))  # fmt: skip
        print(f"{policy:16}" + "".join(f" {cell:>9}" for cell in cells))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
