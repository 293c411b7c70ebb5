"""Score ``learn`` on every shipped profile x every built-in trace x 3 seeds, beside always-on and always-off.

Virtual time (simulator.harness): an hour of load per run in well under a second. Per (profile, trace) it
prints, over the seeds: learn / best achievable (mean and worst), learn / oracle, always-on and always-off /
best achievable, learn started warm (at the profile's crossover, as ``control auto`` starts from a stored
sweep of the stack) / best achievable, what never drafting serves against the oracle, learn's ceiling
changes per hour (worst), and what exploring cost learn's server (1 - its tokens / the tokens of its
ceilings with nothing explored: learn quiets exploring where its estimate is decisive, so it pays less than
the oracle, which explores at the configured share; the oracle's cost is in the summary). Two baselines:
the oracle knows the profile and runs the better of the knob's two modes at every instant ("off" is the
knob-off curve, spec_off, never a plain server), exploring at the configured share; a server that never
drafts (the knob at 0 locked: extend skipped, nothing explored) can beat it where drafting loses. The best
achievable is, per tick, the better of the two.

The bar (exit status 1 when a cell misses it): learn >= 0.98 of the best achievable in every run, at most 12
ceiling changes an hour, and never below always-on on a profile where speculation pays at every load.

It also says, per profile, where a middle step count (between 0 and the launch's speculative_num_steps)
beats both ends of the knob in the simulator's step model (simulator/step_model.py: a fixed share of the
drafting cost measured on the H200, the rest linear in the step count, geometric acceptance;
`spectower sim steps --profile NAME` prints the whole table).

    python benchmarks/policy_bench.py [--seeds 3] [--duration 3600] [--profile NAME ...] [--synthetic]
                                      [--explore-share 0.02] [--json]

``--synthetic`` adds made-up profiles (glm5's spec-off curve with other speculation benefits: crossovers
near 2, 4, 12, 29 and 40, one where speculation barely pays, one where it never pays, a noisy one, other
``max_running_requests``) to show that ``learn`` is not tuned to the shipped curves.
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
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO_ROOT))  # a source checkout without an install; an installed spectower comes first

from spectower.control.policy import learn_share, make_policy  # noqa: E402
from spectower.plugin import knob_contract  # noqa: E402
from spectower.simulator import step_model  # noqa: E402
from spectower.simulator.harness import HarnessConfig, RunResult, simulate  # noqa: E402
from spectower.simulator.profile import Profile, builtin_profile_names, load_profile, parse_profile  # noqa: E402
from spectower.simulator.traces import BUILTIN_TRACES, DEFAULT_DURATION_S, load_trace  # noqa: E402

DEFAULT_SEEDS = 3
MIN_EFFICIENCY = 0.98
MAX_CHANGES_PER_HOUR = 12.0


@dataclass(frozen=True)
class Cell:
    profile: str
    trace: str
    crossover: float | None
    always_pays: bool
    learn_mean: float  # against the best achievable
    learn_min: float
    learn_oracle_mean: float  # against the oracle alone
    on_mean: float  # against the best achievable
    off_mean: float
    warm_mean: float  # learn started at the profile's crossover (as from a stored sweep), against the best
    never_vs_oracle: float  # never drafting's tokens / the oracle's (> 1: the exploring oracle is beaten)
    changes_per_hour_max: float
    explore_cost: float  # what exploring costs the oracle (at the configured share)
    learn_explore_cost: float  # what exploring cost learn's server (it quiets where its estimate is decisive)
    learn_below_on: bool  # in some seed, on a profile where speculation always pays

    def failures(self) -> list[str]:
        out = []
        if self.learn_min < MIN_EFFICIENCY:
            out.append(f"learn {self.learn_min:.4f} < {MIN_EFFICIENCY}")
        if self.changes_per_hour_max > MAX_CHANGES_PER_HOUR:
            out.append(f"{self.changes_per_hour_max:.0f} changes/h > {MAX_CHANGES_PER_HOUR:.0f}")
        if self.learn_below_on:
            out.append("learn below always-on where speculation always pays")
        return out


def synthetic_profiles() -> list[Profile]:
    """glm5's spec-off curve with other spec-on/spec-off ratios (log-linear in concurrency)."""
    base = load_profile("glm5-nvfp4-8x-rtx-pro-6000").to_json()
    shapes: dict[str, tuple[float, float, dict[str, object]]] = {
        # name: (ratio at c=1, fall of the ratio per unit log-concurrency, other changes)
        "synthetic-crossover-2": (1.1, 0.14, {}),
        "synthetic-crossover-4": (1.25, 0.18, {}),
        "synthetic-crossover-12-mrr48": (1.3, 0.12, {"max_running_requests": 48}),
        "synthetic-crossover-29": (2.0, 0.3, {}),
        "synthetic-crossover-29-noisy": (2.0, 0.3, {"noise_cv": 0.15}),
        "synthetic-crossover-40": (1.4, 0.108, {}),
        "synthetic-crossover-20-mrr128": (1.45, 0.15, {"max_running_requests": 128}),
        "synthetic-barely-pays": (1.03, 0.0, {}),
        "synthetic-never-pays": (0.9, 0.0, {}),
    }
    out = []
    for name, (at_one, fall, changes) in shapes.items():
        data = dict(base, name=name, **changes)
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


def score(profile: Profile, trace_name: str, seeds: int, duration: float, config: HarnessConfig,
          learn_options: dict[str, float] | None = None) -> Cell:  # fmt: skip
    mrr = profile.max_running_requests
    always_pays = profile.crossover() is None and profile.speedup(profile.concurrency[0]) >= 1.0
    runs: dict[str, list[RunResult]] = {"learn": [], "always-on": [], "always-off": [], "warm": []}
    cross = profile.crossover()
    # learn started warm, at the ceiling a sweep of this stack would give (control/warm_start.py)
    warm_ceiling = math.floor(cross) if cross is not None else mrr if always_pays else 0
    for seed in range(seeds):
        trace = load_trace(trace_name, duration_s=duration, seed=seed, max_running_requests=mrr)
        for spec, results in runs.items():
            options: dict[str, Any] = dict(learn_options or {}) if spec in ("learn", "warm") else {}
            if spec == "warm":
                options["initial_ceiling"] = warm_ceiling
            policy = make_policy("learn" if spec == "warm" else spec, mrr, **options)
            results.append(simulate(profile, trace, policy, duration, seed, config))
    learn, on, off = runs["learn"], runs["always-on"], runs["always-off"]
    below = always_pays and any(a.tokens < b.tokens * (1 - 1e-12) for a, b in zip(learn, on, strict=True))
    return Cell(
        profile=profile.name,
        trace=trace_name,
        crossover=profile.crossover(),
        always_pays=always_pays,
        learn_mean=statistics.fmean(r.efficiency_vs_best for r in learn),
        learn_min=min(r.efficiency_vs_best for r in learn),
        learn_oracle_mean=statistics.fmean(r.efficiency for r in learn),
        on_mean=statistics.fmean(r.efficiency_vs_best for r in on),
        off_mean=statistics.fmean(r.efficiency_vs_best for r in off),
        warm_mean=statistics.fmean(r.efficiency_vs_best for r in runs["warm"]),
        never_vs_oracle=statistics.fmean(r.never_draft_tokens / r.oracle_tokens for r in learn),
        changes_per_hour_max=max(r.changes_per_hour for r in learn),
        explore_cost=statistics.fmean(r.explore_cost for r in learn),
        learn_explore_cost=statistics.fmean(r.policy_explore_cost for r in learn),
        learn_below_on=below,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="seeds per (profile, trace)")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, help="virtual seconds per run")
    parser.add_argument("--profile", action="append", help="profile name or path (default: all shipped)")
    parser.add_argument("--synthetic", action="store_true", help="add made-up profiles with other crossovers")
    parser.add_argument("--explore-share", type=float, default=knob_contract.DEFAULT_EXPLORE_SHARE,
                        help="the gate's exploration share (0..0.2; default the plugin's)")
    parser.add_argument("--thin-share", type=float, default=None,
                        help="learn's thin share (control/policy/learn_share.py; default learn's, "
                             f"{learn_share.DEFAULT_THIN_SHARE:g}; {knob_contract.DEFAULT_EXPLORE_SHARE:g}: "
                             "none)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the cells as JSON lines too")
    args = parser.parse_args()
    learn_options = {} if args.thin_share is None else {"thin_share": args.thin_share}
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    config = HarnessConfig(explore_share=args.explore_share)
    try:
        config.validate()
        profiles = [load_profile(name) for name in (args.profile or builtin_profile_names())]
    except ValueError as exc:
        parser.error(str(exc))
    if args.synthetic:
        profiles += synthetic_profiles()

    started = time.perf_counter()
    try:
        make_policy("learn", 64, **learn_options)
    except ValueError as exc:
        parser.error(str(exc))
    cells = [score(p, t, args.seeds, args.duration, config, learn_options)
             for p in profiles for t in BUILTIN_TRACES]  # fmt: skip
    elapsed = time.perf_counter() - started
    runs = len(cells) * args.seeds * 4

    print(f"machine: {machine()}")
    print(f"{runs} runs ({len(profiles)} profiles x {len(BUILTIN_TRACES)} traces x {args.seeds} seeds x "
          f"learn, always-on, always-off, learn warm), {runs * args.duration / 3600:.0f} virtual hours in "
          f"{elapsed:.1f} s; exploration share {config.effective_explore_share:.1%} for the oracle and every "
          "policy (learn quiets it to 0.5 % where its estimate is decisive)")
    header = (f"{'profile':<32} {'trace':<7} {'learn':>7} {'worst':>7} {'/oracle':>7} {'on':>7} {'off':>7} "
              f"{'warm':>7} {'never/or':>8} {'chg/h':>6} {'explore':>8}  bar")
    current = None
    for cell in cells:
        if cell.profile != current:
            current = cell.profile
            cross = cell.crossover
            cross_text = (f"{cross:.1f}" if cross is not None else
                          "none (spec always pays)" if cell.always_pays else "none (spec never pays)")
            print()
            print(f"{current}: crossover {cross_text}  (learn, worst, on, off, warm: tokens / the best "
                  "achievable, per tick the better of the oracle and never drafting; warm: learn started at "
                  "the crossover, as from a stored sweep; /oracle: learn / the oracle alone; "
                  "never/or: never drafting / the oracle; explore: what exploring cost learn's server)")
            print(header)
            print("-" * len(header))
        bad = cell.failures()
        print(f"{cell.profile[:32]:<32} {cell.trace:<7} {cell.learn_mean:>7.4f} {cell.learn_min:>7.4f} "
              f"{cell.learn_oracle_mean:>7.4f} {cell.on_mean:>7.4f} {cell.off_mean:>7.4f} "
              f"{cell.warm_mean:>7.4f} {cell.never_vs_oracle:>8.4f} {cell.changes_per_hour_max:>6.1f} "
              f"{cell.learn_explore_cost:>8.2%}  {'MISSED: ' + '; '.join(bad) if bad else 'ok'}")
    print()
    worst = min(cells, key=lambda c: c.learn_min)
    oracle, mine = [c.explore_cost for c in cells], [c.learn_explore_cost for c in cells]
    print(f"learn, worst run: {worst.learn_min:.4f} of the best achievable ({worst.profile}, {worst.trace}); "
          f"most changes: {max(c.changes_per_hour_max for c in cells):.0f}/h; exploration costs the oracle "
          f"{min(oracle):.2%}-{max(oracle):.2%}, learn's server {min(mine):.2%}-{max(mine):.2%}")
    print("middle step counts, in the simulator's step model (simulator/step_model.py):")
    for profile in profiles:
        print(f"  {step_model.summary(profile)}")
        gains = []
        for name in BUILTIN_TRACES:  # seed 0: what the best count per batch size adds to the best of 0 and K
            trace = load_trace(name, duration_s=args.duration, seed=0,
                               max_running_requests=profile.max_running_requests)  # fmt: skip
            gains.append(f"{name} {step_model.load_gain(profile, trace, args.duration):+.1%}")
        print(f"    the best count per batch size over the best on/off ceiling: {', '.join(gains)}")
    if args.json:
        for cell in cells:
            print(json.dumps(asdict(cell)))
    missed = [c for c in cells if c.failures()]
    if missed:
        print(f"{len(missed)} cell(s) missed the bar (learn >= {MIN_EFFICIENCY} of the best achievable, <= "
              f"{MAX_CHANGES_PER_HOUR:.0f} changes/h, never below always-on where speculation always pays)")
        return 1
    print(f"every cell met the bar (learn >= {MIN_EFFICIENCY} of the best achievable, "
          f"<= {MAX_CHANGES_PER_HOUR:.0f} changes/h, never below always-on where speculation always pays)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
