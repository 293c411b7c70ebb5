"""Score every policy on every shipped profile and built-in trace: efficiency and knob flips.

Efficiency = tokens under the policy / tokens under the oracle that always picks the better of spec-on
and spec-off for the current concurrency (simulator.harness). ``learn`` is reported as the mean and the
worst over ``--seeds`` seeds (trace shape and measurement noise both change with the seed); the fixed
policies as the mean. It also prints how long the virtual hours took and the machine they ran on.

    python benchmarks/policy_bench.py [--seeds 3] [--duration 3600] [--profile NAME ...] [--synthetic]
                                      [--json]

``--synthetic`` adds made-up profiles (glm5's spec-off curve with other speculation benefits: crossovers
near 4, 29 and 40, and one where speculation never pays) to show that ``learn`` is not tuned to the two
shipped curves.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from spectower.control.policy import make_policy  # noqa: E402
from spectower.simulator.harness import BASELINES, simulate  # noqa: E402
from spectower.simulator.profile import Profile, builtin_profile_names, load_profile, parse_profile  # noqa: E402
from spectower.simulator.traces import BUILTIN_TRACES, DEFAULT_DURATION_S, load_trace  # noqa: E402

POLICIES = ("learn", *BASELINES)
DEFAULT_SEEDS = 3


@dataclass(frozen=True)
class Row:
    profile: str
    trace: str
    policy: str
    crossover: float | None
    spec_pays_at_1: bool
    efficiency_mean: float
    efficiency_min: float
    flips_mean: float
    flips_max: int


def synthetic_profiles() -> list[Profile]:
    """glm5's spec-off curve with other spec-on/spec-off ratios (log-linear in concurrency)."""
    base = load_profile("glm5-nvfp4-8x-rtx-pro-6000").to_json()
    shapes = {  # name: (ratio at c=1, fall of the ratio per unit log-concurrency)
        "synthetic-crossover-4": (1.25, 0.18),
        "synthetic-crossover-29": (2.0, 0.3),
        "synthetic-crossover-40": (1.4, 0.108),
        "synthetic-never-pays": (0.9, 0.0),
    }
    out = []
    for name, (at_one, fall) in shapes.items():
        data = dict(base, name=name)
        off = base["output_tok_s"]["spec_off"]
        on = [o * (at_one - fall * math.log(c)) for o, c in zip(off, base["concurrency"], strict=True)]
        data["output_tok_s"] = {"spec_off": off, "spec_on": on}
        out.append(parse_profile(data, source=name))
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="seeds per (profile, trace)")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, help="virtual seconds per run")
    parser.add_argument("--profile", action="append", help="profile name or path (default: all shipped)")
    parser.add_argument("--synthetic", action="store_true", help="add made-up profiles with other crossovers")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    profiles = [load_profile(name) for name in (args.profile or builtin_profile_names())]
    if args.synthetic:
        profiles += synthetic_profiles()

    rows: list[Row] = []
    started = time.perf_counter()
    runs = 0
    virtual = 0.0
    for profile in profiles:
        for trace_name in BUILTIN_TRACES:
            for spec in POLICIES:
                effs, flips = [], []
                for seed in range(args.seeds):
                    trace = load_trace(trace_name, duration_s=args.duration, seed=seed)
                    result = simulate(profile, trace, make_policy(spec, profile.max_running_requests),
                                      args.duration, seed)
                    effs.append(result.efficiency)
                    flips.append(result.flips)
                    runs += 1
                    virtual += result.duration_s
                rows.append(Row(profile.name, trace_name, spec, profile.crossover(),
                                profile.speedup(profile.concurrency[0]) >= 1.0, statistics.fmean(effs),
                                min(effs), statistics.fmean(flips), max(flips)))
    elapsed = time.perf_counter() - started

    print(f"machine: {machine()}")
    print(f"{runs} runs, {virtual / 3600:.0f} virtual hours in {elapsed:.1f} s "
          f"({virtual / elapsed:,.0f}x real time); seeds 0..{args.seeds - 1}, {args.duration:.0f} s each")
    header = (f"{'profile':<30} {'trace':<8} {'policy':<15} {'eff mean':>9} {'eff min':>8} "
              f"{'flips':>7} {'max':>4}")
    current = None
    for row in rows:
        if row.profile != current:
            current = row.profile
            cross = row.crossover
            print()
            cross_text = (f"{cross:.1f}" if cross is not None else
                          "none (spec always pays)" if row.spec_pays_at_1 else "none (spec never pays)")
            print(f"{current}: crossover {cross_text}")
            print(header)
            print("-" * len(header))
        print(f"{row.profile:<30} {row.trace:<8} {row.policy:<15} {row.efficiency_mean:>9.4f} "
              f"{row.efficiency_min:>8.4f} {row.flips_mean:>7.1f} {row.flips_max:>4d}")
    learn = [r for r in rows if r.policy == "learn"]
    worst = min(learn, key=lambda r: r.efficiency_min)
    print()
    print(f"learn, worst run: {worst.efficiency_min:.4f} ({worst.profile}, {worst.trace})")
    for row in learn:
        t30 = next(r for r in rows if r.policy == "threshold:30" and r.profile == row.profile
                   and r.trace == row.trace)
        if row.efficiency_mean <= t30.efficiency_mean:
            near = row.crossover is not None and abs(row.crossover - 30) <= 12
            print(f"learn does not beat threshold:30 on {row.profile} / {row.trace} "
                  f"({row.efficiency_mean:.4f} vs {t30.efficiency_mean:.4f}"
                  f"{'; crossover near 30, so threshold:30 is close to the oracle there' if near else ''})")
    if args.json:
        for row in rows:
            print(json.dumps(asdict(row)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
