"""What the drain costs under a replayed trace: the plugin's rule against keeping the extend near the ceiling.

A batch a partial ceiling gates skips the draft extend, leaving holes in its requests' draft KV; when the
load falls back below the ceiling, those requests drain gated (with the extend) for the rest of their lives
(plugin/gated_decode.py). Under bursty open-loop traffic the load crosses the ceiling every few seconds, so
most batches below it run gated (the H200 replay of 2026-12-04: threshold:47's bins 24-48 drafted 13 % of
their steps). The what-if keeps the extend for batches gated within ``--within`` times the ceiling, so a burst
leaves nothing to drain there (``simulate_open_loop(keep_extend_within=...)``, not the plugin's rule), and
prints both side by side, per profile and policy:

    python3 benchmarks/drain_whatif.py --profile data/profiles/h200-8b-pair-triton.json \\
        --policies threshold:16,threshold:24,threshold:47 [--within 2] [--rate-scale 0.75] [--no-context-cost]

``--no-context-cost`` drops the profile's drafted cost per context token (the fitted profile's: drafting loses
from about bin 24 under Azure's prompts): a server where drafting pays up to its sweep's crossover.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from spectower.control.policy import make_policy
from spectower.simulator.harness import HarnessConfig
from spectower.simulator.open_loop import simulate_open_loop
from spectower.simulator.profile import load_profile
from spectower.storage.request_traces import Slo, load_request_trace, schedule

TRACE = "data/traces/AzureLLMInferenceTrace_conv_first30min.csv"
SLO = Slo(ttft_s=2.0, itl_s=0.1, e2e_s=None)  # bench replay's default, the H200 replays'


def run(profile_path: str, policies: list[str], within: float, rate_scale: float, speedup: float,
        duration_s: float, no_context_cost: bool) -> list[dict[str, float | str]]:  # fmt: skip
    profile = load_profile(profile_path)
    if no_context_cost:
        profile = replace(profile, context_cost=None)
    arrivals = schedule(load_request_trace(TRACE), speedup, rate_scale, 1, duration_s)
    mrr = profile.max_running_requests
    rows: list[dict[str, float | str]] = []
    for spec in policies:
        for keep in (0.0, within):
            policy = make_policy(spec, mrr)
            result = simulate_open_loop(profile, arrivals, policy, trace_name="azure", seed=1, slo=SLO,
                                        config=HarnessConfig(initial_max_bs=0),
                                        keep_extend_within=keep)  # fmt: skip
            figures = result.figures()
            rows.append({"policy": spec, "rule": "drain" if keep == 0 else f"keep within {keep:g}x",
                         "drafting_time": result.spec_on_fraction, "goodput_rps": figures["goodput_rps"],
                         "ttft_p99_s": figures["ttft_p99_s"], "e2e_p50_s": figures["e2e_p50_s"],
                         "e2e_p99_s": figures["e2e_p99_s"]})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="data/profiles/h200-8b-pair-triton.json")
    parser.add_argument("--policies", default="threshold:16,threshold:24,threshold:47")
    parser.add_argument("--within", type=float, default=2.0)
    parser.add_argument("--rate-scale", type=float, default=0.75)
    parser.add_argument("--speedup", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=240.0, help="seconds of arrivals")
    parser.add_argument("--no-context-cost", action="store_true")
    args = parser.parse_args(argv)
    if args.within <= 1:
        print(f"--within: must be above 1 (a band above the ceiling), got {args.within:g}", file=sys.stderr)
        return 2
    rows = run(args.profile, args.policies.split(","), args.within, args.rate_scale, args.speedup,
               args.duration, args.no_context_cost)  # fmt: skip
    print(f"{args.profile}{' without its context cost' if args.no_context_cost else ''}, rate scale "
          f"{args.rate_scale:g}, {args.duration:g} s of arrivals (simulator, one seed)")
    head = f"{'policy':<14}{'rule':<18}{'drafting':>9}{'goodput':>9}"
    print(f"{head}{'ttft p99':>10}{'e2e p50':>9}{'e2e p99':>9}")
    for r in rows:
        print(f"{r['policy']:<14}{r['rule']:<18}{r['drafting_time']:>9.3f}{r['goodput_rps']:>9.3f}"
              f"{r['ttft_p99_s']:>10.3f}{r['e2e_p50_s']:>9.3f}{r['e2e_p99_s']:>9.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
