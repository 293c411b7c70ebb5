"""Tokens served under one load by each knob policy, against the best fixed choice per load level.

``measure_off.sh``'s ``policy`` phase runs the same day-shaped closed-loop load (``spectower bench load
--status-every 5s``) once per policy and keeps each run's status lines (``load-<policy>.log``: elapsed time,
the target number of clients, output tok/s over the last 5 s). The sweep of the same server (``sweep.json``,
``bench sweep --plain-server``) says what each fixed choice serves at each concurrency: the knob on, the knob
at 0. For every status window this takes the best of the two at the window's target concurrency
(interpolated in log concurrency between the swept levels), and reports per policy: tokens served, tokens the
best fixed choice would have served, their ratio, and the same split into load bands. Both baselines are
printed: a server that never drafts is the sweep's knob-off curve (the knob at 0 locked, nothing explored);
the best fixed choice per window is the better of it and knob-on, so it is the best achievable here (no
oracle that explores: a swept point explores nothing).

    python3 benchmarks/gpu/policy_table.py --sweep sweep.json load-learn.log load-on.log ... [--json OUT.json]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spectower.collectors.bench.ratio import paired_ratio_interval
from spectower.storage.files import FileReadError, parse_json_text, read_text_capped

MAX_SWEEP_BYTES = 16 * 1024 * 1024  # a sweep's --json is under 100 kB
MAX_LOG_BYTES = 4 * 1024 * 1024  # a load log's 5-s status lines: about 100 bytes each
STATUS = re.compile(r"t=\s*(?P<t>[\d.]+)s\s+target C=(?P<c>\d+)\s+in flight\s+\d+\s+tok/s\s+(?P<tok>[\d.]+)")
BANDS = ((1, 8), (9, 32), (33, 1 << 20))  # low, middle and high load, in target clients


# the last line of a load that ended (``bench load`` since 2026-12-06 says how long it ran)
# the header `bench load` prints first (console/commands/load.py): the pattern may hold commas (steps:16,48)
PATTERN = re.compile(r"^bench load on \S+: pattern (?P<pattern>.+?), period \d", re.MULTILINE)
TOTAL = re.compile(r"^stopped \([^)]*\) after (?P<s>[\d.]+) s: .* (?P<tokens>\d+) tokens$", re.MULTILINE)


def _log_text(path: Path) -> str:
    """A load log's text (read capped; a file that cannot be read is a ValueError naming it)."""
    try:
        return read_text_capped(path, MAX_LOG_BYTES)
    except FileReadError as exc:
        raise ValueError(f"{path.name}: {exc}") from None


def read_status(path: Path) -> list[tuple[float, int, float]]:
    """(elapsed s, target clients, tok/s over the window before it) for every status line of a load log
    (read capped; a file that cannot be read is a ValueError naming it)."""
    text = _log_text(path)
    rows = []
    for line in text.splitlines():
        match = STATUS.search(line)
        if match:
            rows.append((float(match["t"]), int(match["c"]), float(match["tok"])))
    return rows


def read_pattern(path: Path) -> str | None:
    """The load pattern a load log's ``bench load`` ran (``day``, ``steps:48``); None where its header is not
    there."""
    found = PATTERN.search(_log_text(path))
    return found["pattern"] if found else None


def read_total(path: Path) -> tuple[float, int] | None:
    """(seconds the load ran, output tokens its clients received) from a load log's last line; None where the
    load did not end (cut) or its ``bench load`` predates the seconds on that line."""
    found = TOTAL.findall(_log_text(path))
    return (float(found[-1][0]), int(found[-1][1])) if found else None


def sweep_curves(sweep: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Mean output tok/s per mode ('on', 'off', 'plain') and concurrency, from a ``bench sweep --json``."""
    sums: dict[str, dict[int, list[float]]] = {}
    for point in sweep.get("points", []):
        tok = point.get("steady_output_throughput") or point.get("output_throughput")
        if tok is None or point.get("mode") is None:
            continue
        sums.setdefault(point["mode"], {}).setdefault(int(point["concurrency"]), []).append(float(tok))
    return {mode: {c: sum(v) / len(v) for c, v in by_c.items()} for mode, by_c in sums.items()}


def at(curve: dict[int, float], concurrency: float) -> float:
    """The curve at ``concurrency``, linear in log concurrency between levels, flat beyond the ends."""
    levels = sorted(curve)
    if concurrency <= levels[0]:
        return curve[levels[0]] * concurrency / levels[0]  # below the first level: fewer clients, less served
    if concurrency >= levels[-1]:
        return curve[levels[-1]]
    i = bisect.bisect_left(levels, concurrency)
    lo, hi = levels[i - 1], levels[i]
    w = (math.log(concurrency) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return curve[lo] + w * (curve[hi] - curve[lo])


def score(rows: Sequence[tuple[float, int, float]], curves: dict[str, dict[int, float]]) -> dict[str, Any]:
    """Tokens served against the best fixed choice (knob on or knob at 0), overall and per load band."""
    served = best = never = 0.0
    bands = {f"C {lo}-{hi if hi < 1 << 20 else 'max'}": [0.0, 0.0] for lo, hi in BANDS}
    previous = 0.0
    for t, target, tok_s in rows:
        window = max(0.0, t - previous)
        previous = t
        if target <= 0 or window <= 0:
            continue
        off = at(curves["off"], target)
        fixed = max(at(curves["on"], target), off)
        served += tok_s * window
        best += fixed * window
        never += off * window
        for (lo, hi), cell in zip(BANDS, bands.values(), strict=True):
            if lo <= target <= hi:
                cell[0] += tok_s * window
                cell[1] += fixed * window
    return {
        "tokens": round(served),
        "best_fixed_tokens": round(best),
        "ratio": served / best if best else None,
        "never_draft_tokens": round(never),  # the sweep's knob-off curve: the knob at 0 locked
        "ratio_vs_never_draft": served / never if never else None,
        "bands": {name: (cell[0] / cell[1] if cell[1] else None) for name, cell in bands.items()},
        "seconds": previous,
    }


# Paired comparison (--against): every run walks the same day (same pattern, period and seed), so windows at
# the same elapsed time carry the same target load; 30 s blocks of them are the pairs (a 5 s window's tokens
# depend on the one before: a block is long enough for requests of 64-448 tokens to turn over).
BLOCK_S = 30.0


def block_tokens(rows: Sequence[tuple[float, int, float]], block_s: float = BLOCK_S) -> list[float]:
    """Tokens served per ``block_s`` of the load (only whole blocks: the last partial one is dropped)."""
    blocks: dict[int, float] = {}
    previous = 0.0
    for t, _target, tok_s in rows:
        block = int(previous // block_s)
        blocks[block] = blocks.get(block, 0.0) + tok_s * max(0.0, t - previous)
        previous = t
    whole = int(previous // block_s)
    return [blocks.get(i, 0.0) for i in range(whole)]


def paired(
    rows: Sequence[tuple[float, int, float]], base: Sequence[tuple[float, int, float]]
) -> dict[str, Any]:
    """This run's tokens over ``base``'s: over the whole load, and per 30 s block as a geometric mean with a
    95 % t-interval over the blocks both runs completed (collectors.bench.ratio's paired interval)."""
    return pooled([block_pairs(rows, base)])


def block_pairs(
    rows: Sequence[tuple[float, int, float]], base: Sequence[tuple[float, int, float]]
) -> list[tuple[float, float]]:
    """(this run's tokens, ``base``'s) per 30 s block both runs completed and served in."""
    mine, theirs = block_tokens(rows), block_tokens(base)
    n = min(len(mine), len(theirs))
    return [(a, b) for a, b in zip(mine[:n], theirs[:n], strict=True) if a > 0 and b > 0]


def pooled(runs: Sequence[Sequence[tuple[float, float]]]) -> dict[str, Any]:
    """The blocks of several alternated pairs of runs (each run against the one it was paired with) as one
    paired ratio: a policy run twice against another run twice gives twice the blocks of one pair, and the
    run-to-run spread enters the interval through the blocks of both pairs."""
    pairs = [pair for run in runs for pair in run]
    if not pairs:
        return {"blocks": 0}
    ratio, lo, hi = paired_ratio_interval([a for a, _ in pairs], [b for _, b in pairs])
    return {
        "blocks": len(pairs),
        "block_s": BLOCK_S,
        "total": sum(a for a, _ in pairs) / sum(b for _, b in pairs),
        "ratio": ratio,
        "lo": lo,
        "hi": hi,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, help="load-<policy>.log files")
    parser.add_argument("--sweep", type=Path, required=True, help="the same server's bench sweep --json")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--against",
        metavar="POLICY",
        help="also each run's tokens over this run's (load-POLICY.log), paired per 30 s block",
    )
    parser.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="RUN=BASE",
        help="a run and the run it alternated with (e.g. learn-2=threshold-16-2), repeated: their 30-s "
        "blocks pooled over the pairs into one ratio with its interval",
    )
    parser.add_argument(
        "--pairs",
        metavar="POLICY=BASE",
        help="every run of POLICY against the same repeat of BASE (learn=threshold-16: learn with "
        "threshold-16, learn-2 with threshold-16-2, ..., as measure_off.sh names a policy run again), "
        "added to --pair",
    )
    args = parser.parse_args(argv)
    try:  # spectower's one capped JSON reader; sweep_curves' own ValueError is a bad sweep too
        curves = sweep_curves(parse_json_text(read_text_capped(args.sweep, MAX_SWEEP_BYTES)))
    except ValueError as exc:
        print(f"--sweep: {args.sweep}: {exc}", file=sys.stderr)
        return 2
    if not {"on", "off"} <= curves.keys():
        print("--sweep: needs knob-on and knob-off points", file=sys.stderr)
        return 2
    table: dict[str, dict[str, Any]] = {}
    try:
        runs = {log.stem.removeprefix("load-"): read_status(log) for log in args.logs}
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.against is not None and not runs.get(args.against):
        print(
            f"--against: no status lines of {args.against!r} among the logs ({', '.join(runs)})",
            file=sys.stderr,
        )
        return 2
    specs = list(args.pair)
    if args.pairs is not None:
        policy, sep, base = args.pairs.partition("=")
        if not sep or not policy or not base:
            print(f"--pairs: {args.pairs!r}: expected POLICY=BASE, e.g. learn=threshold-16", file=sys.stderr)
            return 2
        found = repeats(policy, base, runs)
        if not found:
            print(f"--pairs: no run of both {policy!r} and {base!r} among the logs ({', '.join(runs)})",
                  file=sys.stderr)  # fmt: skip
            return 2
        specs += [f"{run}={other}" for run, other in found]
    pairs = parse_pairs(specs, runs)
    if isinstance(pairs, str):
        print(pairs, file=sys.stderr)
        return 2
    for name, rows in runs.items():
        table[name] = score(rows, curves) if rows else {"error": "no status lines"}
        if rows and args.against is not None:
            table[name]["against"] = {"policy": args.against, **paired(rows, runs[args.against])}
    print(
        "best fixed: per window the better of the sweep's knob-on and knob-off (the best achievable); "
        "never drafts: the sweep's knob-off curve (the knob at 0 locked); ratio: tokens / best fixed"
    )
    print(
        f"{'policy':<16} {'tokens':>10} {'best fixed':>11} {'never drafts':>12} {'ratio':>6} "
        f"{'/never':>6}  ratio per band"
    )
    for name, row in table.items():
        if "error" in row:
            print(f"{name:<16} {row['error']}")
            continue
        bands = "  ".join(f"{k}: {v:.3f}" for k, v in row["bands"].items() if v is not None)
        print(
            f"{name:<16} {row['tokens']:>10} {row['best_fixed_tokens']:>11} "
            f"{row['never_draft_tokens']:>12} {row['ratio']:>6.3f} "
            f"{row['ratio_vs_never_draft']:>6.3f}  {bands}"
        )
    if args.against is not None:
        print(
            f"against {args.against}: tokens / its tokens over the whole load; per 30 s block (the same "
            "target load in every run): geometric mean with its 95 % interval"
        )
        for name, row in table.items():
            vs = row.get("against") or {}
            if vs.get("blocks"):
                print(
                    f"{name:<16} {vs['total']:.3f}  blocks {vs['ratio']:.3f} ({vs['lo']:.3f}-{vs['hi']:.3f}),"
                    f" {vs['blocks']} blocks"
                )
    if pairs:
        together = pooled([block_pairs(runs[run], runs[base]) for run, base in pairs])
        table["pooled"] = {"pairs": [f"{run}={base}" for run, base in pairs], **together}
        named = f"pooled over {len(pairs)} pairs ({', '.join(table['pooled']['pairs'])})"
        if together.get("blocks"):
            print(
                f"{named}: tokens {together['total']:.3f}, per 30 s block {together['ratio']:.3f} "
                f"({together['lo']:.3f}-{together['hi']:.3f}), {together['blocks']} blocks"
            )
        else:
            print(f"{named}: no whole 30 s block that both runs of a pair served in")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


def repeat_label(name: str, k: int) -> str:
    """The label of run ``name``'s ``k``-th run on one launch: ``name``, then ``name-2``, ``name-3``, ...
    (measure_off.sh's ``run_label``, benchmarks/gpu/lib.sh). The one spelling of the rule."""
    return name if k == 1 else f"{name}-{k}"


def repeat_index(name: str, label: str) -> int | None:
    """Which run of ``name`` the run ``label`` is (``repeat_label``'s inverse): 1 for ``name``, k for
    ``name-k`` as ``repeat_label`` spells it (k >= 2, no leading zero), None for any other run."""
    if label == name:
        return 1
    base, _, k = label.rpartition("-")
    if base == name and k.isdigit() and int(k) >= 2 and repeat_label(name, int(k)) == label:
        return int(k)
    return None


def repeats(policy: str, base: str, runs: dict[str, Any]) -> list[tuple[str, str]]:
    """(POLICY's k-th run, BASE's k-th run) while both exist: a policy run again is ``<name>-2``, ``-3``, ...
    (``repeat_label``), so alternated runs pair by their repeat."""
    out: list[tuple[str, str]] = []
    k = 1
    while True:
        run, other = (repeat_label(name, k) for name in (policy, base))
        if run not in runs or other not in runs:
            return out
        out.append((run, other))
        k += 1


def parse_pairs(
    specs: Sequence[str], runs: dict[str, list[tuple[float, int, float]]]
) -> list[tuple[str, str]] | str:
    """``--pair RUN=BASE`` values as (run, base) names of runs with status lines, or the one error line."""
    pairs: list[tuple[str, str]] = []
    for spec in specs:
        run, sep, base = spec.partition("=")
        if not sep or not run or not base:
            return f"--pair: {spec!r}: expected RUN=BASE, e.g. learn-2=threshold-16-2"
        for name in (run, base):
            if not runs.get(name):
                return f"--pair: no status lines of {name!r} among the logs ({', '.join(runs)})"
        pairs.append((run, base))
    return pairs


if __name__ == "__main__":
    raise SystemExit(main())
