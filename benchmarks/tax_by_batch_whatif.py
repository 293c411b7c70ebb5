"""What learn loses when the draft extend's cost follows the batch while its tax is pooled over the bins.

Learn reads a drafting bin's gated side on explored gated batches, which keep the draft extend, and scales
them up by the tax the extend rows measure, mostly on the windows' warm parts in the gated bins above the
ceiling, pooled over those bins (control/kept_extend.py). On 2026-12-06's steady levels the explored
batches fell short of a steady gated stream by 10-16 % at 16 and 5.6-5.8 % at 48, on an H100 and the H200
alike (data/gpu-runs/h100-8b-pair-triton-steady-level-48-2026-12-06/README.md): a tax pooled over the gated
bins above a ceiling near 16 reads the smaller share and leaves the drafting bins' gated side low. The
what-if gives a profile a gated-with-extend curve (``output_tok_s.spec_off_warm``) that falls short of
``spec_off`` by ``--shortfall`` (per concurrency, interpolated in log-batch, held flat outside the points
given), runs learn as `control auto` runs it (warm from the profile's crossover, ``--dwell``) under the day
load on it and on the profile as it is (a uniform share, ``explore.DEFAULT_KEPT_EXTEND_TAX``), and prints
both, per seed:

    python3 benchmarks/tax_by_batch_whatif.py [--profile data/profiles/h200-8b-early-pair-triton.json]
        [--shortfall 16=0.13,48=0.057] [--seeds 1,2] [--duration 270] [--dwell 60]

Bad input: one line naming the option, exit 2.
"""

from __future__ import annotations

import argparse
import bisect
import math
import sys
from dataclasses import replace
from typing import Any

from number_lists import number_list
from spectower.console.commands.evaluate import learn_options
from spectower.simulator.harness import evaluate
from spectower.simulator.profile import Profile, load_profile
from spectower.simulator.traces import load_trace

DEFAULT_PROFILE = "data/profiles/h200-8b-early-pair-triton.json"
# The explored gated batches' shortfall measured on 2026-12-06 (H100 and H200, the 0.5 pair, 64-token
# prompts): about 13 % at 16 (H100 9.9-16.1 %, H200 10.2 %) and 5.7 % at 48 (5.6-5.8 %).
DEFAULT_SHORTFALL = "16=0.13,48=0.057"


def parse_shortfall(text: str) -> list[tuple[float, float]]:
    """``C=SHARE,...`` -> [(concurrency, share)] ascending; ValueError naming the option and the problem."""
    points = []
    for part in text.split(","):
        left, sep, right = part.partition("=")
        try:
            c, share = float(left), float(right)
        except ValueError:
            raise ValueError(f"--shortfall: expected CONCURRENCY=SHARE[,...], got {part!r}") from None
        if not sep or c < 1 or not 0 <= share < 0.5:
            raise ValueError(f"--shortfall: a concurrency >= 1 and a share in [0, 0.5), got {part!r}")
        points.append((c, share))
    points.sort()
    if len({c for c, _ in points}) != len(points):
        raise ValueError(f"--shortfall: each concurrency once, got {text!r}")
    return points


def shortfall_at(points: list[tuple[float, float]], concurrency: float) -> float:
    """The share at ``concurrency``: linear in log-concurrency between the points, flat outside them."""
    xs = [math.log(c) for c, _ in points]
    x = math.log(concurrency)
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = (xs[i - 1], points[i - 1][1]), (xs[i], points[i][1])
    return y0 + (x - x0) / (x1 - x0) * (y1 - y0)


def by_batch(profile: Profile, points: list[tuple[float, float]]) -> Profile:
    """The profile with gated batches that keep the extend short of ``spec_off`` by the batch's share."""
    warm = tuple(v * (1.0 - shortfall_at(points, c))
                 for c, v in zip(profile.concurrency, profile.spec_off_tok_s, strict=True))  # fmt: skip
    return replace(profile, spec_off_warm_tok_s=warm)


def learn_figures(profile: Profile, seed: int, duration_s: float, dwell_s: float) -> dict[str, Any]:
    """Learn warm from the profile's crossover (as `sim evaluate --warm-start` starts it), the day load."""
    options = learn_options(profile, profile.name, "learn", warm_start=True, dwell_s=dwell_s, quiet=True)
    trace = load_trace("day", duration_s, seed)
    out = evaluate(
        profile, trace, "learn", duration_s, seed, baselines=("always-off",), policy_options=options
    )
    return {"efficiency_vs_best": out["efficiency_vs_best"], "final_max_bs": out["final_max_bs"],
            "spec_on_fraction": out["spec_on_fraction"],
            "always_off": out["baselines"]["always-off"]["efficiency_vs_best"]}  # fmt: skip


def run(profile_path: str, points: list[tuple[float, float]], seeds: list[int], duration_s: float,
        dwell_s: float) -> list[dict[str, Any]]:  # fmt: skip
    profile = load_profile(profile_path)
    variants = {"uniform": profile, "by batch": by_batch(profile, points)}
    return [{"seed": seed, "extend": name, **learn_figures(p, seed, duration_s, dwell_s)}
            for seed in seeds for name, p in variants.items()]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument(
        "--shortfall", default=DEFAULT_SHORTFALL,
        help="CONCURRENCY=SHARE,...: gated-with-extend short of spec_off by SHARE",
    )  # fmt: skip
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--duration", type=float, default=270.0, help="seconds of the day load")
    parser.add_argument("--dwell", type=float, default=60.0, help="learn's dwell, seconds")
    args = parser.parse_args(argv)
    try:
        points = parse_shortfall(args.shortfall)
        seeds = number_list(args.seeds, "--seeds", int)
        if not 10 <= args.duration <= 86_400 or not 10 <= args.dwell <= 3_600:
            raise ValueError("--duration / --dwell: seconds in 10-86400 / 10-3600")
        load_profile(args.profile)
    except (ValueError, OSError) as exc:
        print(str(exc) if str(exc).startswith("--") else f"--profile: {exc}", file=sys.stderr)
        return 2
    rows = run(args.profile, points, seeds, args.duration, args.dwell)
    print(f"{args.profile}: learn warm, dwell {args.dwell:g} s, the day load over {args.duration:g} s "
          f"(simulator); extend: uniform (the profile's) or by batch ({args.shortfall})")  # fmt: skip
    print(f"{'seed':>4} {'extend':<9} {'learn/best':>10} {'off/best':>9} {'drafting':>9} {'final':>6}")
    for r in rows:
        print(f"{r['seed']:>4} {r['extend']:<9} {r['efficiency_vs_best']:>10.4f} {r['always_off']:>9.4f} "
              f"{r['spec_on_fraction']:>9.3f} {r['final_max_bs']:>6}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
