"""CPU cost of one ``learn`` decision per kept sample (``sample_s``: the estimate is computed then and cached
between), without and with the stored history the warm start hands over (control/warm_start.py,
``learn_history``: the collector's intervals of the last 30 minutes, one per 5-s scrape).

    python3 benchmarks/learn_decision_cost.py [--minutes 30] [--history-minutes 30]

Counters are synthetic (every bin of 64 busy, both modes, 2 % explored; the shape of plugin 0.4.15's
snapshot without its optional blocks): the estimate's work grows with intervals x bins, which is what it
measures. Prints the mean and the worst decision over the run, in ms. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from spectower.control.policy import Observation, make_policy
from spectower.control.policy.learn_counters import CEILING_KEY
from spectower.control.speedup import intervals_from_snapshots
from spectower.plugin.engine_counters import counter_bins

MRR = 64
SCRAPE_S = 5.0  # the collector's default: one stored interval per scrape
SAMPLE_S = 15.0  # learn's default sample_s


class Counters:
    """Cumulative counters of a server whose every bin is busy: drafting pays 1.2x, 2 % explored."""

    def __init__(self, seed: int = 0) -> None:
        self.bins = counter_bins(MRR)
        self.rng = random.Random(seed)
        self.cells = {m: {f: [0.0] * len(self.bins) for f in ("steps", "tokens", "time_s")}
                      for m in ("drafted", "gated")}  # fmt: skip

    def advance(self, seconds: float, knob: int) -> dict[str, Any]:
        for i, b in enumerate(self.bins):
            ran = 0.98 if b <= knob else 0.02  # the drafted share of the bin's time
            for mode, share in (("drafted", ran), ("gated", 1.0 - ran)):
                spent = seconds / len(self.bins) * share * (1 + 0.02 * self.rng.gauss(0.0, 1.0))
                rate = 100.0 * b**0.8 * (1.2 if mode == "drafted" else 1.0)
                cell = self.cells[mode]
                cell["steps"][i] += max(1, round(spent / 0.02))
                cell["tokens"][i] += rate * spent
                cell["time_s"][i] += spent
        return {"version": 1, "started_at": 1.0, "clock": "perf_counter", "bins": list(self.bins),
                "unmatched": 0, "dropped": 0,
                **{m: {f: [round(v) if f == "steps" else v for v in values] for f, values in cells.items()}
                   for m, cells in self.cells.items()}}  # fmt: skip


def history(minutes: float, end: float, knob: int) -> list[dict[str, Any]]:
    """The stored intervals of ``minutes`` before ``end``, as ``warm_start.learn_history`` gives them."""
    counters, t = Counters(seed=1), end - 60 * minutes
    snapshots = [(t, counters.advance(0.0, knob))]
    while t < end:
        t += SCRAPE_S
        snapshots.append((t, counters.advance(SCRAPE_S, knob)))
    return [{**interval, "ts": ts, "res_s": 0, CEILING_KEY: knob}
            for interval, (ts, _) in zip(intervals_from_snapshots(snapshots), snapshots[1:], strict=True)]


def decision_ms(minutes: float, stored: list[dict[str, Any]]) -> list[float]:
    policy = make_policy("learn", MRR, sample_s=SAMPLE_S, history=stored)
    counters, knob, t, out = Counters(), 24, 0.0, []
    while t < 60 * minutes:
        t += SAMPLE_S
        obs = Observation(ts=t, num_running_reqs=32.0, num_queue_reqs=0.0, output_tok_s=None,
                          accept_length=None, spec_max_bs=knob, max_running_requests=MRR, stale=False,
                          counters=counters.advance(SAMPLE_S, knob))  # fmt: skip
        start = time.perf_counter()
        decision = policy.decide(obs)
        out.append(1e3 * (time.perf_counter() - start))
        if decision.max_bs is not None:
            knob = decision.max_bs
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long learn runs (its window: 30)")
    parser.add_argument("--history-minutes", type=float, default=30.0, help="the stored history handed over")
    args = parser.parse_args()
    stored = history(args.history_minutes, 0.0, MRR)
    print(f"learn, {args.minutes:g} min, a decision per kept sample ({SAMPLE_S:g} s), "
          f"{len(counter_bins(MRR))} bins busy; ms per decision, mean and worst")  # fmt: skip
    for label, given in (("without history", []), (f"with {len(stored)} stored intervals", stored)):
        times = decision_ms(args.minutes, given)
        print(f"  {label:32s} {statistics.fmean(times):7.1f} {max(times):7.1f}  ({len(times)} decisions)")


if __name__ == "__main__":
    main()
