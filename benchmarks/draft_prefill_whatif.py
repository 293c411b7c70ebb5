"""What skipping the draft's prefill is worth under a replayed trace, per plugin version (the simulator).

Every prefill runs the draft model over the whole prompt after the target, about 4 % of the 8B-shaped pair's
prefill work (the profile's ``draft_prefill_share``). Plugin 0.4.8 ran it always; 0.4.9 skips it while a lock
holds the knob at 0 (an operator's off, modelled here as always off with nothing exploring); 0.4.10 also
wherever the decode batch the prompts join next will be gated with nothing needing the draft warm
(``knob_contract.prefill_skippable``). Under Azure's prompts (about 4 prompt tokens per output token) near the
server's capacity, prefill time is TTFT. For each rate scale and policy this prints goodput, TTFT and median
end-to-end latency under each version, and each against always off's under the same version (what the GPU
replays score), so 0.4.9's lock-only skip shows as a handicap of every policy against always off:

    python3 benchmarks/draft_prefill_whatif.py [--profile data/profiles/h200-8b-pair-triton.json] \\
        [--policies always-off,threshold:16,threshold:47,learn] [--rate-scales 0.75,1.0] [--duration 180]

Learn starts as the 0.5 pair's GPU replays start it (ceiling 48, ``--dwell 60s``; ``--learn-start`` for
another pair: the early pair's replays warm-started it at 16). One seed, the replays' (1).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from number_lists import list_type
from spectower.control.policy import make_policy
from spectower.simulator.harness import HarnessConfig
from spectower.simulator.open_loop import simulate_open_loop
from spectower.simulator.profile import Profile, load_profile
from spectower.storage.request_traces import Arrival, Slo, load_request_trace, schedule

TRACE = "data/traces/AzureLLMInferenceTrace_conv_first30min.csv"
SLO = Slo(ttft_s=2.0, itl_s=0.1, e2e_s=None)  # bench replay's default, the GPU replays'
SEED = 1  # the GPU replays' arrivals
ALWAYS_OFF = "always-off"
LEARN_START, LEARN_DWELL_S = 48, 60.0  # measure_off.sh's learn runs: warm at 48, --dwell 60s
# plugin version -> whether a policy's prefill may skip the draft's pass (always off: a lock from 0.4.9 on)
VERSIONS = {"0.4.8": (False, False), "0.4.9": (True, False), "0.4.10": (True, True)}
FIGURES = ("goodput_rps", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s")


@dataclass(frozen=True)
class Row:
    rate_scale: float
    policy: str
    version: str
    figures: dict[str, float]
    prefills_skipped: float  # the share of prefill batches that skipped the draft's pass


def run_one(profile: Profile, arrivals: list[Arrival], policy: str, skip: bool, learn_start: int,
            seed: int = SEED, window_start: int = 0) -> tuple[dict[str, float], float]:  # fmt: skip
    """One policy's open-loop replay of ``arrivals``: its FIGURES and the share of prefills that skipped the
    draft's pass. ``window_start``: gated batches the exploration windows counted before (where in its cycle
    a window falls decides which burst it meets)."""
    mrr = profile.max_running_requests
    if policy == ALWAYS_OFF:  # an operator's lock: nothing explores, the knob at 0 from the start
        config = HarnessConfig(explore_share=0.0, initial_max_bs=0, skip_draft_prefill=skip)
        made = make_policy(policy, mrr)
    elif policy == "learn":
        config = HarnessConfig(initial_max_bs=learn_start, skip_draft_prefill=skip)
        made = make_policy(policy, mrr, initial_ceiling=learn_start, min_dwell_s=LEARN_DWELL_S)
    else:
        made = make_policy(policy, mrr)
        start = int(policy.split(":")[1]) if policy.startswith("threshold:") else mrr
        config = HarnessConfig(initial_max_bs=start, skip_draft_prefill=skip)
    result = simulate_open_loop(profile, arrivals, made, trace_name="azure", seed=seed, slo=SLO,
                                config=config, window_start=window_start)  # fmt: skip
    figures = result.figures()
    return {key: float(figures[key]) for key in FIGURES}, result.prefills_skipped_share


def run(profile_path: str, policies: list[str], rate_scales: list[float], speedup: float,
        duration_s: float, learn_start: int = LEARN_START) -> list[Row]:  # fmt: skip
    profile, trace = load_profile(profile_path), load_request_trace(TRACE)  # read once for every run
    rows = []
    for scale in rate_scales:
        arrivals = schedule(trace, speedup, scale, SEED, duration_s)  # the same arrivals for every run
        for version, (lock_skips, policy_skips) in VERSIONS.items():
            for policy in policies:
                skip = lock_skips if policy == ALWAYS_OFF else policy_skips
                figures, skipped = run_one(profile, arrivals, policy, skip, learn_start)
                rows.append(Row(scale, policy, version, figures, skipped))
    return rows


def against_always_off(rows: list[Row]) -> dict[tuple[float, str, str], dict[str, float]]:
    """Each row's goodput, TTFT p99 and median end-to-end latency over always off's (same scale, version)."""
    off = {(r.rate_scale, r.version): r.figures for r in rows if r.policy == ALWAYS_OFF}
    out = {}
    for r in rows:
        base = off.get((r.rate_scale, r.version))
        if base is not None:
            out[(r.rate_scale, r.policy, r.version)] = {
                key: r.figures[key] / base[key] if base[key] else float("nan")
                for key in ("goodput_rps", "ttft_p99_s", "e2e_p50_s")
            }
    return out


# ``--rate-scales``: rate scales separated by commas, each above 0 and at most 10
rate_scales = list_type(float, lambda v: 0 < v <= 10, "each above 0 and at most 10")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="data/profiles/h200-8b-pair-triton.json")
    parser.add_argument("--policies", default="always-off,threshold:16,threshold:47,learn")
    parser.add_argument("--rate-scales", type=rate_scales, default=[0.75, 1.0])
    parser.add_argument("--speedup", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of arrivals")
    parser.add_argument("--learn-start", type=int, default=LEARN_START, help="learn's first ceiling")
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if ALWAYS_OFF not in policies:
        policies.insert(0, ALWAYS_OFF)  # the baseline every ratio needs
    rows = run(args.profile, policies, args.rate_scales, args.speedup, args.duration, args.learn_start)
    ratios = against_always_off(rows)
    print(f"{args.profile}, Azure x{args.speedup:g}, {args.duration:g} s of arrivals, seed {SEED} "
          "(simulator); ratios to always off under the same plugin version")
    print(f"{'scale':>5} {'policy':<13}{'plugin':<8}{'skipped':>8}{'goodput':>9}{'ttft p50':>9}"
          f"{'ttft p99':>9}{'e2e p50':>8}{'gp/off':>8}{'p99/off':>8}{'e2e/off':>8}")
    for r in rows:
        f, q = r.figures, ratios[(r.rate_scale, r.policy, r.version)]
        print(f"{r.rate_scale:>5g} {r.policy:<13}{r.version:<8}{r.prefills_skipped:>8.2f}"
              f"{f['goodput_rps']:>9.3f}{f['ttft_p50_s']:>9.3f}{f['ttft_p99_s']:>9.3f}{f['e2e_p50_s']:>8.2f}"
              f"{q['goodput_rps']:>8.3f}{q['ttft_p99_s']:>8.3f}{q['e2e_p50_s']:>8.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
