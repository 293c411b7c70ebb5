"""What an exploration window yielding to a full server is worth under a replayed trace (the simulator).

Plugin 0.4.11 began a window's exploring part whatever the load: on an H100 under Azure's replay one began
with 17 requests queued and drafted 3 s at 63-64 running, and learn's TTFT p99 read 2.18x always off's
(data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05e). Plugin 0.4.12 lets a due window wait while requests
wait that the scheduler could not admit, ends a part under way when they come, and begins only after
``room`` batches in a row with nothing left waiting (plugin/explore.py, WINDOW_ROOM_BATCHES). Which burst a
window meets depends on where in its cycle the server is, so each cell pools seeds x window phases
(``window_start``: gated batches counted before the replay) and prints TTFT p99 over always off's (mean,
median, worst, the share of runs above 1.1: item 6 asks within 10 %), goodput over always off's (mean,
worst) and median end-to-end latency over always off's (mean):

    python3 benchmarks/window_yield_whatif.py [--profile data/profiles/h200-8b-pair-triton.json] \\
        [--policies threshold:16,learn] [--rate-scales 0.9,1.0] [--rooms 0,512,1024,2048,4096] \\
        [--seeds 1,2,3] [--phases 8]

The simulator's server is full when ``max_running_requests`` run (it has no KV pool): a real one fills
sooner where the pool is small (the H100's 84 000 tokens beside a 64-request limit).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass

from draft_prefill_whatif import ALWAYS_OFF, LEARN_START, SEED, TRACE, rate_scales, run_one
from number_lists import list_type
from spectower.plugin.explore import WINDOW_CYCLE_BATCHES
from spectower.simulator.open_loop_cost import WindowStreams
from spectower.simulator.profile import load_profile
from spectower.storage.request_traces import load_request_trace, schedule

NO_YIELD = "0.4.11"  # the variant that never yields (what the plugin did before 0.4.12)


@dataclass(frozen=True)
class Cell:
    rate_scale: float
    policy: str
    variant: str  # NO_YIELD, or "room N"
    ttft_p99: list[float]  # per run, over always off's under the same arrivals
    goodput: list[float]
    e2e_p50: list[float]


def _variants(rooms: list[int]) -> list[tuple[str, bool, int | None]]:
    return [(NO_YIELD, False, None), *((f"room {r}", True, r) for r in rooms)]


def run(profile_path: str, policies: list[str], rate_scales: list[float], rooms: list[int], seeds: list[int],
        phases: int, speedup: float = 3.0, duration_s: float = 180.0) -> list[Cell]:  # fmt: skip
    profile, trace = load_profile(profile_path), load_request_trace(TRACE)
    starts = [i * WINDOW_CYCLE_BATCHES // phases for i in range(phases)]
    cells = []
    try:
        for scale in rate_scales:
            runs = {seed: schedule(trace, speedup, scale, seed, duration_s) for seed in seeds}
            # always off explores nothing: one run per seed, its windows never open
            off = {s: run_one(profile, runs[s], ALWAYS_OFF, True, LEARN_START, s)[0] for s in seeds}
            for policy in policies:
                for variant, yields, room in _variants(rooms):
                    WindowStreams.YIELD, WindowStreams.ROOM_BATCHES = yields, room
                    p99, goodput, e2e = [], [], []
                    for seed in seeds:
                        base = off[seed]
                        for start in starts:
                            f, _ = run_one(profile, runs[seed], policy, True, LEARN_START, seed, start)
                            p99.append(f["ttft_p99_s"] / base["ttft_p99_s"])
                            goodput.append(f["goodput_rps"] / base["goodput_rps"])
                            e2e.append(f["e2e_p50_s"] / base["e2e_p50_s"])
                    cells.append(Cell(scale, policy, variant, p99, goodput, e2e))
    finally:
        WindowStreams.YIELD, WindowStreams.ROOM_BATCHES = True, None
    return cells


# ``--rooms``, ``--seeds``: whole numbers separated by commas, none below 0
_counts = list_type(int, lambda v: v >= 0, "each 0 or more")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="data/profiles/h200-8b-pair-triton.json")
    parser.add_argument("--policies", default="threshold:16,learn")
    parser.add_argument("--rate-scales", type=rate_scales, default=[0.9, 1.0])
    parser.add_argument("--rooms", type=_counts, default=[0, 512, 1024, 2048, 4096])
    parser.add_argument("--seeds", type=_counts, default=[SEED, 2, 3])
    parser.add_argument("--phases", type=int, default=8, help="window phases per seed (of one cycle)")
    args = parser.parse_args(argv)
    if args.phases < 1:
        parser.error(f"--phases: at least 1, got {args.phases}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip() and p.strip() != ALWAYS_OFF]
    cells = run(args.profile, policies, args.rate_scales, args.rooms, args.seeds, args.phases)
    runs = len(args.seeds) * args.phases
    print(f"{args.profile}, Azure x3, 180 s of arrivals, {runs} runs a cell ({len(args.seeds)} seeds x "
          f"{args.phases} window phases; simulator); ratios to always off under the same arrivals")
    print(f"{'scale':>5} {'policy':<13}{'variant':<11}{'p99 mean':>9}{'median':>8}{'worst':>7}{'>1.1':>6}"
          f"{'gp mean':>8}{'worst':>7}{'e2e mean':>9}")
    for c in cells:
        above = sum(r > 1.1 for r in c.ttft_p99) / len(c.ttft_p99)
        print(f"{c.rate_scale:>5g} {c.policy:<13}{c.variant:<11}{statistics.mean(c.ttft_p99):>9.3f}"
              f"{statistics.median(c.ttft_p99):>8.3f}{max(c.ttft_p99):>7.3f}{above:>6.2f}"
              f"{statistics.mean(c.goodput):>8.3f}{min(c.goodput):>7.3f}{statistics.mean(c.e2e_p50):>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
