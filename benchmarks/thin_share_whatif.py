"""What learn's thin share costs under Azure's replay, open loop (the simulator).

Learn asks for a larger exploration share while the load sits in a bin its ceiling gates that has no
interval yet (control/policy/learn_share.py), and the plugin's windows then come more often. Under a steady
closed load that buys a move in minutes instead of a quarter hour (tests/test_learn_thin_share.py); under
Azure's bursty replay with long prompts an exploring part drafts at 2.5-4.5x a gated step's cost, so hurrying
the windows costs latency. This prints, for learn warm-started at each given ceiling (the setting of
tests/test_open_loop.py: the calibrated 0.5 pair, Azure's first 240 s at speedup 3 and rate scale 0.75, the
knob at 47 before, ``--dwell 60s``), its goodput, median end-to-end latency, TTFT p99 and final ceiling at
each thin share (the default share for none):

    python3 benchmarks/thin_share_whatif.py [--starts 16,48] [--thin-shares 0.02,0.2] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from number_lists import number_list
from spectower.control.policy import make_policy
from spectower.simulator.harness import HarnessConfig
from spectower.simulator.open_loop import simulate_open_loop
from spectower.simulator.profile import load_profile
from spectower.storage.request_traces import load_request_trace, schedule

REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILE = REPO_ROOT / "data" / "profiles" / "h200-8b-pair-triton.json"
TRACE = REPO_ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv_first30min.csv"
SPEEDUP, RATE_SCALE, DURATION_S = 3.0, 0.75, 240.0
KNOB_BEFORE, DWELL_S = 47, 60.0
FIGURES = ("goodput_rps", "e2e_p50_s", "ttft_p99_s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--starts", default="16,48", help="learn's warm-start ceilings")
    parser.add_argument("--thin-shares", default="0.02,0.2", help="learn's thin shares (0.02: none)")
    parser.add_argument("--seed", type=int, default=0, help="the arrivals' seed")
    args = parser.parse_args(argv)
    try:
        starts = number_list(args.starts, "--starts", int, lambda v: v >= 0, "each 0 or more")
        shares = number_list(args.thin_shares, "--thin-shares", float, lambda v: 0 <= v <= 1, "each in 0-1")
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    profile = load_profile(str(PROFILE))
    arrivals = schedule(load_request_trace(TRACE), SPEEDUP, RATE_SCALE, args.seed, DURATION_S)
    mrr = profile.max_running_requests
    print(f"{profile.name}, Azure's first {DURATION_S:.0f} s at speedup {SPEEDUP:g} and rate scale "
          f"{RATE_SCALE:g}, seed {args.seed}; learn warm-started, --dwell {DWELL_S:.0f}s")  # fmt: skip
    print(f"{'start':>5} {'thin':>5} {'goodput rps':>11} {'e2e p50 s':>9} {'ttft p99 s':>10} {'final':>5}")
    for start in starts:
        for share in shares:
            try:
                policy = make_policy("learn", mrr, initial_ceiling=start, min_dwell_s=DWELL_S,
                                     thin_share=share)  # fmt: skip
            except ValueError as exc:
                raise SystemExit(f"error: {exc}") from None
            result = simulate_open_loop(profile, arrivals, policy, trace_name="azure",
                                        config=HarnessConfig(initial_max_bs=KNOB_BEFORE))  # fmt: skip
            got = result.figures()
            print(f"{start:>5} {share:>5g} {got['goodput_rps']:>11.3f} {got['e2e_p50_s']:>9.3f} "
                  f"{got['ttft_p99_s']:>10.3f} {result.final_max_bs:>5}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
