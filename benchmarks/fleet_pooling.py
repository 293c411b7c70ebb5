"""Does pooling what `learn` measures across replicas pay? Measured in the simulator's virtual-time harness.

    python3 benchmarks/fleet_pooling.py [--replicas 4] [--hours 1] [--seeds 3] [--odd llama31-8b-1x-h100]

Each replica replays its own day trace (its own seed, the day compressed into --hours) on a profile, under
its own learn policy, as `control auto --fleet` runs them. Independent: each policy decides on its own
replica's decode counters.
Pooled: each decides on the sum of every replica's counters (the replicas stepped in lockstep, one thread
each, meeting at every decision), so each bin fills N times as fast. Printed per arm: each replica's
efficiency against the best achievable (``efficiency_vs_best``) over that day, and the mean.
The last arm pools a replica of another profile (``--odd``) with the others: whether pooling a replica that
differs hurts it (or them). Nothing here ships pooling: it is the measurement that decides.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spectower.control.policy import Decision, Observation, Policy, make_policy  # noqa: E402
from spectower.plugin.engine_counters import sum_ranks  # noqa: E402
from spectower.simulator.harness import simulate  # noqa: E402
from spectower.simulator.profile import load_profile  # noqa: E402
from spectower.simulator.traces import builtin_trace  # noqa: E402

PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"


class Pool:
    """Where the replicas' policies meet at every decision: each posts its counters, waits for all, reads
    the sum, waits again (so nobody posts the next one before every replica has read this one)."""

    def __init__(self, size: int) -> None:
        self.board: list[Any] = [None] * size
        self.barrier = threading.Barrier(size)

    def pooled(self, index: int, counters: Any) -> Any:
        self.board[index] = counters
        self.barrier.wait()
        posted = [c for c in self.board if c is not None]
        total = sum_ranks(posted) if counters is not None and posted else counters
        self.barrier.wait()
        return total


class PooledPolicy:
    """A replica's own policy, deciding on the pool's counters instead of its replica's alone."""

    def __init__(self, inner: Policy, pool: Pool, index: int) -> None:
        self.inner, self.pool, self.index = inner, pool, index
        self.name = inner.name
        self.max_running_requests = getattr(inner, "max_running_requests", None)

    def decide(self, obs: Observation) -> Decision:
        counters = self.pool.pooled(self.index, obs.counters)
        return self.inner.decide(dataclasses.replace(obs, counters=counters))

    def state(self) -> dict[str, Any]:
        return self.inner.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.inner.load_state(state)


def run_arm(profiles: Sequence[str], seeds: Sequence[int], duration_s: float, pooled: bool) -> list[float]:
    """Every replica's efficiency_vs_best, the replicas run at once (one thread each)."""
    loaded = [load_profile(name) for name in profiles]
    pool = Pool(len(profiles))
    results: list[float] = [0.0] * len(profiles)
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            profile = loaded[index]
            policy: Any = make_policy("learn", profile.max_running_requests)
            if pooled:
                policy = PooledPolicy(policy, pool, index)
            trace = builtin_trace("day", duration_s, seed=seeds[index])
            results[index] = simulate(profile, trace, policy, duration_s, seeds[index]).efficiency_vs_best
        except BaseException as exc:  # a broken barrier ends the others too: report the first cause
            errors.append(exc)
            pool.barrier.abort()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(profiles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=3, help="repetitions (each a new set of traces)")
    parser.add_argument("--odd", default="llama31-8b-1x-h100", help="the profile of the replica that differs")
    args = parser.parse_args()
    duration = args.hours * 3600.0
    same = [PROFILE] * args.replicas
    odd = [*same[:-1], args.odd]
    arms = {"independent": (same, False), "pooled": (same, True),
            "odd, independent": (odd, False), "odd, pooled": (odd, True)}  # fmt: skip
    print(f"{args.replicas} replicas, a day in {args.hours:g} h, {args.seeds} repetitions; "
          f"efficiency vs best achievable (per replica, mean over repetitions)")  # fmt: skip
    for name, (profiles, pooled) in arms.items():
        per_replica: list[list[float]] = [[] for _ in profiles]
        for rep in range(args.seeds):
            seeds = [1000 * rep + i for i in range(len(profiles))]
            for i, value in enumerate(run_arm(profiles, seeds, duration, pooled)):
                per_replica[i].append(value)
        means = [statistics.mean(v) for v in per_replica]
        cells = "  ".join(f"{m:.3f}" for m in means)
        print(f"  {name:18s} {cells}   mean {statistics.mean(means):.3f}"
              + (f"   (last = {args.odd})" if profiles is odd else ""))  # fmt: skip


if __name__ == "__main__":
    main()
