"""Does a middle step count beat both ends? Per concurrency, what the server serves (against a plain server)
at 0 steps (the knob at 0), at each measured middle count K, and at the launch's count (the knob at max).

``measure_off.sh``'s ``sweep`` phase measures the launch's two ends against the plain server in one client
(``sweep.json``, ``bench sweep --plain-server``: modes on, off and plain). Its ``steps`` phase serves the same
pair with an un-gated EAGLE-3 server at K steps (K+1 draft tokens, topk 1) in place of the plain one and
measures it against the gated server at knob max in the same rounds (``steps-K.json``,
``benchmarks/gpu/knob_max_ab.py``: per level, window lists and the ratio launch / K-step with its 95 %
interval). The ratio ties the K-step server to the sweep's curves: serve(K) / plain = on / plain x (K-step /
launch).

For every level in the sweep and in an AB file this prints serve(k) / plain for k = 0, each middle K and the
launch's steps, the best k, the best end (max of k = 0 and k = launch) and the best middle's gain over it.
The gain's interval is the AB ratio's (K-step / launch = 1 / ratio, from 1 / hi to 1 / lo); the sweep's own
noise is not in it. A middle count wins at a level when its interval's low end still beats the best end.

    python3 benchmarks/gpu/steps_table.py --sweep sweep.json --steps 1=steps-1.json --steps 2=steps-2.json \\
        [--json OUT]

The launch's step count is the sweep's ``speculative_num_steps`` (or that of the profile the sweep wrote,
when it lies beside the sweep), else ``--launch-steps`` (default 3). Bad input: one line on stderr naming
the argument, exit status 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policy_table import sweep_curves  # gpu/ is no package: its scripts run as files, gpu/ on sys.path
from spectower.storage.files import FileReadError, parse_json_text, read_text_capped

DEFAULT_LAUNCH_STEPS = 3
MAX_JSON_BYTES = 16 * 1024 * 1024  # a sweep's --json and an AB file are under 100 kB
MODES = ("on", "off", "plain")


class InputError(Exception):
    """Bad input: the message is the one line printed, starting with the argument it is about."""


@dataclass(frozen=True)
class Middle:
    """A K-step server against the launch at knob max, at one level: K-step / launch and its interval."""

    ratio: float
    lo: float
    hi: float


def _read_json(arg: str, path: Path) -> Any:
    """spectower's one capped JSON reader; the failure as one line naming the argument (and the path
    where the argument does not already)."""
    try:
        return parse_json_text(read_text_capped(path, MAX_JSON_BYTES))
    except FileReadError as exc:
        where = arg if str(path) in arg else f"{arg}: {path}"
        raise InputError(f"{where}: {exc}") from None


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def parse_steps(specs: list[str]) -> dict[int, Path]:
    """``K=path`` per --steps, each K once."""
    files: dict[int, Path] = {}
    for spec in specs:
        k_text, sep, path = spec.partition("=")
        try:
            k = int(k_text)
        except ValueError:
            k = -1
        if not sep or not path or k < 0:
            raise InputError(f"--steps {spec!r}: expected K=path (e.g. 1=steps-1.json)")
        if k in files:
            raise InputError(f"--steps {spec!r}: K={k} given twice")
        files[k] = Path(path)
    return files


def launch_steps(sweep: dict[str, Any], sweep_path: Path, given: int | None) -> tuple[int, str]:
    """The launch's step count and where it came from: the sweep, the profile beside it, --launch-steps."""
    found: tuple[int, str] | None = None
    steps = sweep.get("speculative_num_steps")
    if isinstance(steps, int) and not isinstance(steps, bool):
        found = (steps, "the sweep")
    elif isinstance(sweep.get("profile_out"), str):
        profile = sweep_path.parent / Path(sweep["profile_out"]).name
        try:
            steps = parse_json_text(read_text_capped(profile, MAX_JSON_BYTES)).get("speculative_num_steps")
        except (ValueError, AttributeError):  # unreadable: --launch-steps must say it (below)
            steps = None
        if isinstance(steps, int) and not isinstance(steps, bool):
            found = (steps, f"the sweep's profile {profile.name}")
    if found is not None and given is not None and given != found[0]:
        raise InputError(f"--launch-steps: {given}, but {found[1]} says {found[0]}")
    if found is None:
        if given is None:
            found = (DEFAULT_LAUNCH_STEPS, "--launch-steps' default")
        else:
            found = (given, "--launch-steps")
    if found[0] < 2:
        raise InputError(f"--launch-steps: {found[0]} from {found[1]} leaves no middle count (needs 2+)")
    return found


def read_ab(k: int, path: Path) -> dict[int, Middle]:
    """knob_max_ab.py's --out: per level, K-step / launch (the inverse of its gated / un-gated ratio)."""
    arg = f"--steps {k}={path}"
    data = _read_json(arg, path)
    levels = data.get("levels") if isinstance(data, dict) else None
    if not isinstance(levels, list) or not levels:
        raise InputError(f"{arg}: no levels (want benchmarks/gpu/knob_max_ab.py's --out JSON)")
    rows: dict[int, Middle] = {}
    for row in levels:
        c = row.get("concurrency") if isinstance(row, dict) else None
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise InputError(f"{arg}: a level without a concurrency")
        ratio, lo, hi = (_positive(row.get(key)) for key in ("ratio", "lo", "hi"))
        if ratio is None or lo is None or hi is None or not lo <= ratio <= hi:
            raise InputError(f"{arg}: level C={c} has no ratio with its interval (ratio, lo, hi)")
        rows[c] = Middle(ratio=1 / ratio, lo=1 / hi, hi=1 / lo)
    return rows


def table(curves: dict[str, dict[int, float]], launch: int,
          middles: dict[int, dict[int, Middle]]) -> list[dict[str, Any]]:  # fmt: skip
    """One row per level measured in all three sweep modes and in at least one AB file."""
    swept = set(curves["on"]) & set(curves["off"]) & set(curves["plain"])
    rows = []
    for c in sorted(swept & {c for by_c in middles.values() for c in by_c}):
        plain = curves["plain"][c]
        on, off = curves["on"][c] / plain, curves["off"][c] / plain
        serve: dict[int, float] = {0: off}
        interval: dict[int, tuple[float, float]] = {}
        for k in sorted(middles):
            if c in middles[k]:
                m = middles[k][c]
                serve[k], interval[k] = on * m.ratio, (on * m.lo, on * m.hi)
        serve[launch] = on
        best_k = max([0, launch, *interval], key=lambda k: serve[k])  # a tie goes to an end
        end_k = launch if on >= off else 0
        best_end = serve[end_k]
        mid_k = max(interval, key=lambda k: serve[k])
        gain = (serve[mid_k] / best_end, interval[mid_k][0] / best_end, interval[mid_k][1] / best_end)
        rows.append({
            "concurrency": c,
            "serve_over_plain": {str(k): v for k, v in serve.items()},
            "middle_interval": {str(k): list(v) for k, v in interval.items()},
            "best_k": best_k,
            "best_end_k": end_k,
            "best_end": best_end,
            "best_middle_k": mid_k,
            "gain": gain[0],
            "gain_lo": gain[1],
            "gain_hi": gain[2],
            "middle_wins": gain[1] > 1.0,
        })  # fmt: skip
    return rows


def render(rows: list[dict[str, Any]], launch: int, ks: list[int]) -> list[str]:
    columns = [0, *ks, launch]
    heads = [f"{'k=' + str(k) + (' (launch)' if k == launch else ''):>14}" for k in columns]
    lines = [f"{'C':>4}{''.join(heads)}  {'best k':>6}  {'best end':>11}  best middle / best end (95 %)"]
    for row in rows:
        serve = row["serve_over_plain"]
        cells = "".join(f"{serve[str(k)]:>14.3f}" if str(k) in serve else f"{'-':>14}" for k in columns)
        end = f"{row['best_end']:.3f} k={row['best_end_k']}"
        gain = f"k={row['best_middle_k']}: {row['gain']:.3f} ({row['gain_lo']:.3f}-{row['gain_hi']:.3f})"
        mark = "  middle wins" if row["middle_wins"] else ""
        lines.append(f"{row['concurrency']:>4}{cells}  {row['best_k']:>6}  {end:>11}  {gain}{mark}")
    wins = [row for row in rows if row["middle_wins"]]
    if wins:
        where = ", ".join(
            f"C={r['concurrency']} (k={r['best_middle_k']}, gain {r['gain_lo']:.3f}-{r['gain_hi']:.3f})"
            for r in wins
        )
        lines.append(f"a middle step count beats both ends beyond its interval at: {where}")
    else:
        lines.append("a middle step count beats both ends beyond its interval at: no level")
    return lines


def run(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    files = parse_steps(args.steps)
    sweep = _read_json("--sweep", args.sweep)
    if not isinstance(sweep, dict):
        raise InputError(f"--sweep: {args.sweep} is not a bench sweep --json object")
    curves = sweep_curves(sweep)
    missing = [mode for mode in MODES if not curves.get(mode)]
    if missing:
        want = "bench sweep --plain-server with modes on,off"
        raise InputError(f"--sweep: no {', '.join(missing)} points (want {want})")
    launch, source = launch_steps(sweep, args.sweep, args.launch_steps)
    for k, path in files.items():
        if not 1 <= k < launch:
            raise InputError(f"--steps {k}={path}: K must be 1..{launch - 1} (the launch runs {launch})")
    middles = {k: read_ab(k, path) for k, path in sorted(files.items())}
    rows = table(curves, launch, middles)
    if not rows:
        ab_levels = sorted({c for by_c in middles.values() for c in by_c})
        swept = sorted(curves["on"])
        raise InputError(f"--steps: no level of the AB files ({ab_levels}) is in the sweep ({swept})")
    title = f"serve(k) / plain per level; the launch runs {launch} steps ({source}); k=0 is the knob at 0"
    lines = [title, *render(rows, launch, sorted(middles))]
    result = {
        "sweep": str(args.sweep),
        "launch_steps": launch,
        "launch_steps_from": source,
        "steps": {str(k): str(path) for k, path in sorted(files.items())},
        "levels": rows,
        "middle_wins_at": [row["concurrency"] for row in rows if row["middle_wins"]],
    }
    return lines, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, required=True, help="bench sweep --json: modes on, off, plain")
    steps_help = "knob_max_ab.py --out: the K-step server against the launch (repeatable)"
    parser.add_argument("--steps", action="append", required=True, metavar="K=PATH", help=steps_help)
    launch_help = f"the launch's steps if the sweep does not say (default {DEFAULT_LAUNCH_STEPS})"
    parser.add_argument("--launch-steps", type=int, default=None, help=launch_help)
    parser.add_argument("--json", type=Path, help="write the table as JSON")
    args = parser.parse_args(argv)
    try:
        lines, result = run(args)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.json is not None:
        try:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
        except OSError as exc:
            print(f"--json: cannot write {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
