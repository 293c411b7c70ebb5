"""``learn``: move the speculation ceiling to the measured crossover, exploring only where it is unsure.

Every decision it
1. holds on a stale observation (and says so), and never learns from one;
2. files the observation (mean running requests, measured tok/s) under spec-on or spec-off for its
   concurrency bin, skipping the first interval after a knob change and after a load jump (SGLang's gauges
   describe the last 40-decode-step window, so they lag) and intervals that mixed both modes (the accept
   length tells: SGLang counts a 0-step batch as accept length 1.0, so a fully drafted interval reads the
   usual value and a mixed one reads in between);
3. estimates the benefit g = log(on/off) per bin (``estimator.BenefitEstimator``) and, by its structure
   (non-increasing in load, bounded slope), bounds every bin, measured or not;
4. explores the bin the load is in when following the prediction there could cost more than
   ``indifference`` and more than ``explore_ratio`` of what is predicted to be at stake, and that bin lacks
   fresh data of the other mode: it first records the mode the load is in (free), then flips that bin for
   ``explore_s`` and comes back. Far from the boundary the bounds decide, so it never explores there
   (where exploring is expensive); a never-seen bin is explored once;
5. otherwise moves the ceiling to the end of the last bin where speculation is predicted to pay, with
   hysteresis (bins within ``hysteresis`` of break-even keep their current side);
6. never flips within ``min_dwell_s`` of its last flip nor more than ``max_flips_per_hour``; a set that
   never reads back (the runner refused it, or it failed) is given up after a few observations.
Its estimates and flip history persist through ``state()`` / ``load_state()``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from spectower.control.policy.base import Decision, Observation, PolicyError
from spectower.control.policy.estimator import DEFAULT_BIN_RATIO, DEFAULT_MEMORY_S, BenefitEstimator

STATE_VERSION = 1
DEFAULT_MIN_DWELL_S = 15.0
DEFAULT_MAX_FLIPS_PER_HOUR = 60
DEFAULT_EXPLORE_S = 15.0
DEFAULT_HYSTERESIS = 0.01  # log-benefit within which a bin keeps its current side
DEFAULT_Z = 2.0
DEFAULT_MAX_SLOPE = 0.3  # largest plausible fall of log-benefit per unit log-concurrency
DEFAULT_INDIFFERENCE = 0.015  # a bin whose bounds are all within this of 0 is not worth exploring
DEFAULT_FRESH_SAMPLES = 2.0
DEFAULT_EXPLORE_RATIO = 0.5  # decayed samples of the other mode that make a bin's estimate "fresh"
# Decayed weights never quite reach a whole number of samples.
FRESH_TOLERANCE = 0.9
# Observations to wait for a set value to read back before believing the server's read-back instead.
PENDING_WAITS = 2
# A change of mean running requests between two intervals (in log) after which the gauges, which lag,
# describe the old load rather than the new one.
LOAD_JUMP = 0.15
# Accept-length fraction (of the usual drafting value) that separates a spec-on interval from a mixed one.
MIXED_LOW, MIXED_HIGH = 0.3, 0.7

OPTION_DEFAULTS: dict[str, float] = {
    "min_dwell_s": DEFAULT_MIN_DWELL_S,
    "max_flips_per_hour": DEFAULT_MAX_FLIPS_PER_HOUR,
    "explore_s": DEFAULT_EXPLORE_S,
    "hysteresis": DEFAULT_HYSTERESIS,
    "z": DEFAULT_Z,
    "max_slope": DEFAULT_MAX_SLOPE,
    "indifference": DEFAULT_INDIFFERENCE,
    "fresh_samples": DEFAULT_FRESH_SAMPLES,
    "explore_ratio": DEFAULT_EXPLORE_RATIO,
    "bin_ratio": DEFAULT_BIN_RATIO,
    "memory_s": DEFAULT_MEMORY_S,
}


def _option(options: dict[str, Any], key: str) -> float:
    value = options.get(key, OPTION_DEFAULTS[key])
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise PolicyError(f"learn option {key!r} must be a non-negative number, got {value!r}")
    return float(value)


class LearnPolicy:
    name = "learn"

    def __init__(self, max_running_requests: int, **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTION_DEFAULTS))
        if unknown:
            raise PolicyError(f"unknown learn option(s) {unknown}; known: {sorted(OPTION_DEFAULTS)}")
        self.max_running_requests = max_running_requests
        self.min_dwell_s = _option(options, "min_dwell_s")
        self.max_flips_per_hour = int(_option(options, "max_flips_per_hour"))
        self.explore_s = max(_option(options, "explore_s"), self.min_dwell_s)
        self.hysteresis = _option(options, "hysteresis")
        self.z = _option(options, "z")
        self.indifference = _option(options, "indifference")
        self.fresh_samples = _option(options, "fresh_samples")
        self.explore_ratio = _option(options, "explore_ratio")
        bin_ratio = _option(options, "bin_ratio")
        if bin_ratio <= 1.05:
            raise PolicyError(f"learn option 'bin_ratio' must be > 1.05, got {bin_ratio}")
        memory_s = _option(options, "memory_s")
        if memory_s <= 0:
            raise PolicyError("learn option 'memory_s' must be > 0")
        self.est = BenefitEstimator(bin_ratio=bin_ratio, memory_s=memory_s,
                                    max_slope=_option(options, "max_slope"))
        self.flip_times: deque[float] = deque()
        self.knob: int | None = None  # what we last saw (or set)
        self.prev_knob: int | None = None  # the read-back one observation earlier
        self.prev_running: float | None = None  # mean running requests one observation earlier
        self.pending: int | None = None  # a value we asked for and have not seen read back yet
        self.pending_waits = 0
        self.explore_until: float | None = None  # while exploring: when to return to the plan
        self.explore_bin: int | None = None
        self.accept_on: float | None = None  # EMA of the accept length of fully drafted intervals
        self.last_reason = ""

    # --- bins <-> ceilings -------------------------------------------------------------------------
    def _bins(self) -> list[int]:
        return list(range(0, self.est.bin_of(self.max_running_requests) + 1))

    def _ceiling_through(self, b: int) -> int:
        """The knob value that drafts for every bin <= b and no bin above it (bins end between integers)."""
        if b < 0:
            return 0
        return min(self.max_running_requests, math.floor(self.est.bin_ratio ** (b + 0.5)))

    def _bin_on(self, b: int, knob: int) -> bool:
        return knob >= max(1, self._ceiling_through(b))

    # --- the decision ------------------------------------------------------------------------------
    def decide(self, obs: Observation) -> Decision:
        now = obs.ts
        if obs.stale:
            return self._hold("hold: metrics stale or server unreachable, keeping the last ceiling")
        if obs.spec_max_bs is not None:
            if self.pending is not None:
                self.pending_waits += 1
                if obs.spec_max_bs == self.pending or self.pending_waits > PENDING_WAITS:
                    # read back; or never applied (the runner refused or failed): believe the server
                    if obs.spec_max_bs != self.pending:
                        self.explore_until = self.explore_bin = None
                    self.pending = None
            if self.pending is None:
                self.knob = obs.spec_max_bs
        self._learn(obs)
        self.prev_knob = obs.spec_max_bs
        self.prev_running = obs.num_running_reqs
        if self.knob is None:
            return self._hold("hold: the knob's read-back is unknown")
        if self.pending is not None:
            return self._hold(f"hold: waiting for the knob to read back {self.pending}")

        est = self.est.estimates(now)
        bins = self._bins()
        pred = self.est.predict(bins, est, self.z)

        if self.explore_until is not None:
            if now < self.explore_until:
                return self._hold(f"hold: exploring bin {self.explore_bin} until t={self.explore_until:.0f}")
            self.explore_until, self.explore_bin = None, None
        target = self._target(bins, pred)

        # Explore the bin the load is in, if it is undecided and the other mode's data there is not fresh.
        running = obs.num_running_reqs
        if running >= 1.0 and self._may_flip(now, need=2):
            b = self.est.bin_of(min(running, self.max_running_requests))
            lo, hi = self.est.bounds(b, est, self.z)
            # Worth exploring when following the prediction could cost more than the indifference margin
            # and more than half of what the prediction says is at stake (exploring costs about that).
            g = pred.get(b, 0.0)
            worst = -lo if g >= 0 else hi
            undecided = lo < 0.0 < hi and worst > max(self.indifference, self.explore_ratio * abs(g))
            on_now = running <= self.knob
            other = "off" if on_now else "on"
            mine = "on" if on_now else "off"
            # Measure the mode the load is already in first (free), then flip once for the other one.
            if (undecided and self.est.weight(b, mine, now) >= 1.0
                    and self.est.weight(b, other, now) < FRESH_TOLERANCE * self.fresh_samples):
                if on_now:  # switch the load's bin (and everything above) off
                    new = min(self._ceiling_through(b - 1), max(math.ceil(running) - 1, 0))
                else:  # switch the load's bin (and everything below) on
                    new = max(self._ceiling_through(b), math.ceil(running))
                if new != self.knob:
                    self.explore_until, self.explore_bin = now + self.explore_s, b
                    return self._set(now, new, f"explore: bin {b} (~{running:.0f} running) is undecided "
                                               f"(benefit in [{lo:+.3f}, {hi:+.3f}]), measuring spec-{other}")

        if target == self.knob:
            return self._hold(f"hold: ceiling {self.knob} is at the estimated crossover")
        if not self._may_flip(now, need=1):
            return self._hold(f"hold: would move the ceiling {self.knob} -> {target}, but the flip-rate "
                              f"limit (min dwell {self.min_dwell_s:.0f} s, {self.max_flips_per_hour}/h) "
                              "applies")
        return self._set(now, target, f"move the ceiling {self.knob} -> {target}: {self._describe(pred)}")

    def _target(self, bins: list[int], pred: dict[int, float]) -> int:
        """The last bin to draft for, with hysteresis around break-even, as a knob value."""
        assert self.knob is not None
        must_on = [b for b in bins if pred[b] > self.hysteresis]
        may_on = [b for b in bins if pred[b] >= -self.hysteresis]
        k_min = max(must_on, default=bins[0] - 1)
        k_max = max(may_on, default=bins[0] - 1)
        current = max((b for b in bins if self._bin_on(b, self.knob)), default=bins[0] - 1)
        k = min(max(current, k_min), k_max)
        if k == current:
            return self.knob  # already drafting exactly the bins it should: keep the exact number
        if k >= bins[-1]:
            return self.max_running_requests
        return self._ceiling_through(k)

    def _describe(self, pred: dict[int, float]) -> str:
        pays = [b for b, g in pred.items() if g > 0]
        if not pays:
            return "speculation is not predicted to pay at any load"
        last = max(pays)
        return (f"speculation predicted to pay up to ~{self.est.bin_ratio ** last:.0f} running "
                f"(benefit {pred[last]:+.1%} there)")

    def _learn(self, obs: Observation) -> None:
        knob = obs.spec_max_bs if obs.spec_max_bs is not None else self.knob
        if (knob is None or obs.output_tok_s is None or obs.output_tok_s <= 0
                or obs.num_running_reqs < 1.0
                or (self.prev_knob is not None and self.prev_knob != obs.spec_max_bs)):
            return  # nothing to file, or the first interval after a knob change (lagging gauges)
        prev = self.prev_running
        if prev is not None and (prev < 1.0 or abs(math.log(obs.num_running_reqs / prev)) > LOAD_JUMP):
            return  # the load just moved: the lagging gauge still describes the old load
        running = min(obs.num_running_reqs, float(self.max_running_requests))
        if running <= knob:
            mode = "on"
        elif running >= knob + 1.0:
            mode = "off"
        else:
            return  # the batch hovered across the ceiling: a mix of both modes
        acc = obs.accept_length
        if acc is not None:
            if mode == "on" and acc > 1.0:
                if self.accept_on is not None and (acc - 1.0) < MIXED_HIGH * (self.accept_on - 1.0):
                    return  # drafted only part of the interval
                self.accept_on = acc if self.accept_on is None else 0.8 * self.accept_on + 0.2 * acc
            elif mode == "off" and self.accept_on is not None and \
                    (acc - 1.0) > MIXED_LOW * (self.accept_on - 1.0):
                return  # still drafting part of the interval
        self.est.add(obs.ts, running, obs.output_tok_s, mode)

    # --- flips -------------------------------------------------------------------------------------
    def _may_flip(self, now: float, need: int) -> bool:
        if self.flip_times and self.flip_times[-1] > now:
            self.flip_times.clear()  # a restored state from another clock (e.g. virtual time): forget it
        while self.flip_times and self.flip_times[0] <= now - 3600.0:
            self.flip_times.popleft()
        if self.flip_times and now - self.flip_times[-1] < self.min_dwell_s:
            return False
        return len(self.flip_times) + need <= self.max_flips_per_hour

    def _set(self, now: float, value: int, reason: str) -> Decision:
        self.flip_times.append(now)
        self.pending = value
        self.pending_waits = 0
        self.knob = value
        self.last_reason = reason
        return Decision(value, reason)

    def _hold(self, reason: str) -> Decision:
        self.last_reason = reason
        return Decision(None, reason)

    # --- persistence -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "version": STATE_VERSION,
            "bin_ratio": self.est.bin_ratio,
            "cells": self.est.to_json(),
            "flip_times": list(self.flip_times),
            "accept_on": self.accept_on,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise PolicyError("learn state must be an object")
        if state.get("policy") != self.name or state.get("version") != STATE_VERSION:
            raise PolicyError(f"learn state: not a version-{STATE_VERSION} learn state "
                              f"(policy={state.get('policy')!r}, version={state.get('version')!r})")
        if state.get("bin_ratio") != self.est.bin_ratio:
            raise PolicyError(f"learn state: saved with bin_ratio {state.get('bin_ratio')!r}, "
                              f"this policy uses {self.est.bin_ratio}")
        flips = state.get("flip_times", [])
        if not isinstance(flips, list) or not all(isinstance(t, int | float) and not isinstance(t, bool)
                                                  for t in flips):
            raise PolicyError("learn state: 'flip_times' must be a list of numbers")
        accept_on = state.get("accept_on")
        if accept_on is not None and (not isinstance(accept_on, int | float) or isinstance(accept_on, bool)):
            raise PolicyError("learn state: 'accept_on' must be a number or null")
        try:
            self.est.load_json(state.get("cells", {}))
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        self.flip_times = deque(sorted(float(t) for t in flips))
        self.accept_on = float(accept_on) if accept_on is not None else None
