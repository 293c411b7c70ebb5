"""The exploration share ``learn`` asks the server for (``Decision.explore_share``), from what its estimate
says where the load is (the busy bins: steps in the last kept sample):

- **quiet** (``quiet_share``, default 0.005): every busy bin's interval has lain on one side of 1 for at least
  ``quiet_after_s`` (default 120 s). Exploring costs throughput (drafting explored above the ceiling cost
  5.5-5.9 % of its step time on the H200 under Azure's replay); a quarter of the default share still measures
  every busy bin, so that a drift shows within minutes.
- **thin** (``thin_share``, default 0.2, the contract's most): a bin the ceiling gates that the load has sat
  in for the last three kept samples (``learn.THIN_HELD_SAMPLES``) has no interval yet, lies within the
  exploring stream's limit (twice the ceiling, at least 8: as far as a move up goes), and no bin below it
  reads as losing (``thin_gated``). Such a bin measures
  drafting only in the gate's windows, one interval per window, and a bin needs ``MIN_INTERVALS`` (3): at the
  default share that is three window cycles (on an H100 under a load at 48, 2026-12-07, learn held a ceiling
  of 24 for 432 s waiting for them). A share above the default shortens the cold part in proportion (plugin
  0.4.16, plugin/explore.py ``WINDOW_BASE_PERIOD``: at 0.2 a tenth as long) with the exploring parts as long,
  and the cold part's clock keeps their share of the time at their share of the batches: against the plugin's
  own gate at 48 requests, drafting 1.11x, learn from 24 moves at 165 s instead of 1 015 s
  (tests/test_learn_thin_share.py). At most ``thin_max_s`` (default 300 s) a spell: a load whose bin the
  windows never measure pays for the extra windows no longer than that; a spell ends when no busy held bin
  the ceiling gates is thin.
- otherwise ``explore_share`` (default ``knob_contract.DEFAULT_EXPLORE_SHARE``).

It asks only on a change, and believes the server's read-back (``Observation.explore_share``) when what it
asked never shows there. ``quiet_share`` equal to ``explore_share`` turns quieting off; ``thin_share`` equal
to it, the thin share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...plugin import explore, knob_contract
from .. import speedup
from .base import Decision, PolicyError

DEFAULT_QUIET_SHARE = 0.005
DEFAULT_QUIET_AFTER_S = 120.0
DEFAULT_THIN_SHARE = knob_contract.MAX_EXPLORE_SHARE
DEFAULT_THIN_MAX_S = 300.0


@dataclass(frozen=True)
class View:
    """A decision's view on exploring: whether every busy bin is decided, why, and whether a busy bin the
    ceiling gates is thin."""

    decided: bool
    why: str
    thin_gated: bool = False


def decided(est: speedup.SpeedupEstimate, busy: set[int]) -> tuple[bool, str] | None:
    """Whether every busy bin's interval lies on one side of 1 (drafting clearly wins or clearly loses
    there), and which bins, or the first one that does not; None while no bin is busy (an idle server
    explores nothing, so it neither quiets nor wakes exploring)."""
    if not busy:
        return None
    by_bin = {b.batch_size: b for b in est.bins}
    for b in sorted(busy):
        bin_est = by_bin.get(b)
        if bin_est is None or bin_est.lo is None or bin_est.hi is None:
            return False, f"bin {b} thin (no interval yet)"
        if bin_est.lo <= 1.0 <= bin_est.hi:
            return False, f"bin {b} undecided ({bin_est.lo:.2f}-{bin_est.hi:.2f}x)"
    low, high = min(busy), max(busy)
    return True, (f"bins {low}-{high} decided" if low != high else f"bin {low} decided")


def thin_gated(
    est: speedup.SpeedupEstimate, busy: set[int], ceiling: int | None, max_running: int
) -> bool:
    """Whether a busy bin the ``ceiling`` gates has no interval yet, within the exploring stream's limit
    (``explore.stream_limit``: twice the ceiling, at least 8) and below every bin where drafting reads as
    losing (a ceiling at ``max_running`` gates no bin). A move up goes at most to twice the ceiling, and a
    window's exploring part drafts nothing above the limit until a part met it: above the limit the thin
    share buys windows that measure nothing a move could use yet, at 0.2 of the batches (in the
    simulator, learn warm-started at 16 on the H200 early pair under the 270-s day held 16 throughout and
    served 0.978 of threshold:16 while the load at 64 bought them, once the harness gave a gated bin's
    drafting to the counters one window at a time). The speedup falls with batch
    size (the estimator's fit, and ``LearnPolicy._spare_thin``'s vouching): above a bin that loses, a thin
    bin most likely loses too, so gating it is likely right and its windows can come at the usual pace; a
    move up is what the thin share hurries. Under Azure's replay in the simulator (learn at 12-16 on the
    0.5 pair, bin 16 at 0.92x) hurrying the bins above anyway cost 5 % of the median end-to-end latency,
    their exploring parts drafting long prompts at 2.5-4.5x a gated step; with this rule 2.5 % (2.065 s
    against 2.015 s without the thin share: ``python3 benchmarks/thin_share_whatif.py``)."""
    if ceiling is None or ceiling >= max_running:
        return False
    measured = {b.batch_size for b in est.bins if b.lo is not None}
    lowest_losing = min((b.batch_size for b in est.bins if b.speedup is not None and b.speedup < 1.0),
                        default=None)  # fmt: skip
    reach = explore.stream_limit(ceiling)
    return any(ceiling < b <= reach and b not in measured and (lowest_losing is None or b < lowest_losing)
               for b in busy)  # fmt: skip


class ShareAsk:
    """The share asked for, what the server read back, and since when the estimate is decisive (persisted
    through learn's state) or a busy gated bin thin (not: a restarted policy gives a spell its time again)."""

    def __init__(
        self, explore: float, quiet: float, quiet_after_s: float, thin: float, thin_max_s: float
    ) -> None:
        if quiet > explore:
            raise PolicyError(f"learn option 'quiet_share' must be at most 'explore_share' ({explore:g}), "
                              f"got {quiet:g}")  # fmt: skip
        if thin < explore:
            raise PolicyError(f"learn option 'thin_share' must be at least 'explore_share' ({explore:g}), "
                              f"got {thin:g}")  # fmt: skip
        self.explore, self.quiet, self.thin = explore, quiet, thin
        self.quiet_after_s, self.thin_max_s = quiet_after_s, thin_max_s
        self.asked: float | None = None  # the share last asked for (None: none asked)
        self.confirmed = False  # the server read it back
        self.waits = 0
        self.seen: float | None = None  # the server's share as last read back
        self.decided_since: float | None = None  # since when every busy bin's interval is on one side of 1
        self.thin_since: float | None = None  # since when a busy bin the ceiling gates is thin

    def load(self, asked: float | None, confirmed: bool, decided_since: float | None) -> None:
        self.asked, self.confirmed, self.waits, self.decided_since = asked, confirmed, 0, decided_since

    def read_back(self, seen: float | None, patience: int) -> None:
        """What the server reports: confirms what was asked, or after ``patience`` observations that do not
        show it (the runner did not write it, or it failed) the server is believed again."""
        if seen is None:
            return
        self.seen = seen
        if self.asked is None or self.confirmed:
            return
        if math.isclose(seen, self.asked, abs_tol=1e-12):
            self.confirmed = True
            return
        self.waits += 1
        if self.waits > patience:
            self.asked = None

    def _wanted(self, view: View, now: float) -> tuple[float, str]:
        if not view.decided or self.decided_since is None or self.decided_since > now:
            self.decided_since = now if view.decided else None
        if not view.thin_gated or (self.thin_since is not None and self.thin_since > now):
            self.thin_since = None
        if view.thin_gated and self.thin_since is None:
            self.thin_since = now
        if view.decided:
            held = now - (self.decided_since or now)
            quiet = held >= self.quiet_after_s
            return (self.quiet if quiet else self.explore), f"{view.why} for {held:.0f} s"
        if self.thin_since is not None and now - self.thin_since < self.thin_max_s:
            return self.thin, f"{view.why}, a bin the ceiling gates: its windows more often"
        return self.explore, view.why

    def ask(self, decision: Decision, now: float, view: View | None) -> Decision:
        """The decision, asking for another share when this one's view changes what it wants."""
        if view is None:
            return decision
        wanted, why = self._wanted(view, now)
        current = self.asked if self.asked is not None else self.seen
        current = self.explore if current is None else current
        if math.isclose(wanted, current, abs_tol=1e-12):
            return decision
        self.asked, self.confirmed, self.waits = wanted, False, 0
        reason = f"explore share {current:g} -> {wanted:g}: {why}; {decision.reason}"
        return replace(decision, reason=reason, explore_share=wanted)


def share_of(value: float, key: str) -> float:
    """A learn option's share, checked by the knob's contract (0 .. ``MAX_EXPLORE_SHARE``)."""
    try:
        return knob_contract.explore_share_of(value, f"learn option {key!r}")
    except knob_contract.ContractError as exc:
        raise PolicyError(str(exc)) from None
