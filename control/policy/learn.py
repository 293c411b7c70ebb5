"""``learn``: set the speculation ceiling from the engine's own counters, drafted vs gated per batch-size bin.

The server measures both modes at every load it sees: its gate explores (a small share of each
batch-size bin's decode batches runs the other mode than the ceiling says, plugin/knob_gate.py) and
its counters (plugin/engine_counters.py) add up steps, tokens and step time per bin and mode. Every
decision this policy
1. holds on a stale observation, on missing counters (no plugin, an older one, a failed read) and on a
   malformed counters block, saying why;
2. keeps the counters snapshots of the last ``window_s`` seconds, one every ``sample_s``, turns them into
   intervals (``control.speedup.intervals_from_snapshots``) and estimates the speedup per bin, its interval
   and the crossover (``control.speedup.estimate``, the one estimator every reader uses; each interval's part
   of its input is kept while the interval is in the window, control/policy/learn_window.py). The
   estimator gives a bin seen in both modes in fewer than ``MIN_INTERVALS`` intervals no interval (and
   widens the others' to Student's t); such a thin bin is left out of the crossover's fit here. A move
   switches a thin bin when a measured bin beyond it goes the same way (the speedup falls with batch
   size, so that bin bounds it: ``_spare_thin``); the thin bin in the gap where the crossover falls keeps
   the side it is on. It holds while no bin is measured, and for at most ``WAIT_SAMPLES`` samples per bin
   while a thin bin it would switch is busy now;
   A bin the ceiling drafts measures its gated side on explored batches that keep the draft extend, so
   its gated rate is scaled up by ``1 / (1 - tax)``: the option ``kept_extend_tax`` where given, else the
   tax this server's counters measure over the window (plugin 0.4.6, control/kept_extend.py), else 7 %;
   and its drafting side is what drafting it served: its drafted and gated steps together (the drain after
   bursts runs gated), in preference to drafting explored while the ceiling gated it
   (``learn_counters.as_choices``, which levels each explored cell for its requests' mix and for the
   prefills of the stream it sat in, at each mode's steady prefill cost in the window, else the last one a
   window measured: a load held above the ceiling leaves no drafting bin to take it from); each mode's step
   time has its seconds outside every span added, where
   the plugin counts them (0.4.13: the gaps before its steps while the scheduler was busy,
   ``engine_counters.with_outside``, folded as the intervals are made): drafting's clients read 3 % less of
   its counters than gating's;
3. maps the estimate to a ceiling on bin boundaries: draft every bin whose fitted speedup is >= 1, i.e.
   the largest bin <= the crossover (0 below the first bin, ``max_running_requests`` when speculation pays
   at every bin measured: a bin the exploring windows never draft, above twice a gated ceiling
   (plugin/explore.py, ``stream_limit``), is unmeasured: a move up goes at most to twice the ceiling, or 8).
   Ceilings stay on bin boundaries so that each bin runs one mode (plus the
   exploration share of the other): a ceiling inside a bin would compare its drafted small batches with
   its gated large ones and bias that bin's speedup;
4. moves only when the current ceiling lies outside what the crossover's interval allows (the interval is
   the hysteresis: a ceiling the data cannot tell from the best one stays; one between bin boundaries, as a
   threshold's 47, goes to the allowed boundary nearest it: ``learn_counters.keep_or_move``), at most once per
   ``min_dwell_s`` and ``max_flips_per_hour`` times per rolling hour (defaults: 300 s and 12);
5. gives up waiting for a set that never reads back (the runner refused it, or it failed) after a few
   observations and believes the server again;
6. quiets exploration while its estimate is decisive where the load is: exploring costs throughput (drafting
   explored above the ceiling cost 5.5-5.9 % of its step time on the H200 under Azure's replay,
   data/gpu-runs/h200-8b-early-pair-triton-replay-2026-12-04/README.md). When it holds because the
   ceiling is within what the crossover allows and every busy bin (steps in the last kept sample) has a
   95 % interval on one side of 1, for at least ``quiet_after_s`` (default 120 s), it asks the server for
   ``quiet_share`` (default 0.005) of exploration; as soon as a busy bin is undecided or thin, the counters
   are too thin or a move is wanted, for ``explore_share`` (default ``DEFAULT_EXPLORE_SHARE``) again; and
   while the load sits in a bin the ceiling gates that has no interval yet, for ``thin_share`` (default 0.2:
   plugin 0.4.16's windows come ten times as often) for at most ``thin_max_s``. It asks only on a change
   (``Decision.explore_share``), and believes the server's read-back (``Observation.explore_share``) when
   what it asked never shows there (control/policy/learn_share.py). ``quiet_share`` equal to
   ``explore_share`` turns quieting off, ``thin_share`` equal to it the thin share.
A warm start (``initial_ceiling``: what a stored sweep or measured profile of this stack says,
control/warm_start.py) moves the knob there at the first decision that has counters and a read-back, before
any bin is measured: a fresh start does not spend its first minutes drafting where the sweep says drafting
loses. It holds until this server's own counters put it outside their interval (its own move starts no
dwell; every later one keeps ``min_dwell_s``): a sweep measures other traffic (short prompts), and under
production's long ones the H200 pair's crossover fell from 47 to about 16 (tests/test_open_loop.py). From
then on the counters decide as above. A policy that restored counters of its own from the last
``window_s`` skips it (its own data knows more).
The warm start's ``history`` (the server's stored intervals that end before the policy's first snapshot,
each with the knob the collector read beside it as its ceiling) opens the window until it ages out: a
minute of always on before learn starts is its drafting side at once (on an H100, 2026-12-07, learn at 24
under a load at 48 waited 432 s for three exploring parts without it; replayed with it, 48 s).
Its snapshots and change history persist through ``state()`` / ``load_state()``
(control/policy/learn_state.py). A server that restarts (its counters' ``started_at`` moves) is back at its
launch ceiling: the moves made before it hold no dwell, so a policy that set 8 a minute before the restart
sets it again at once, not five minutes later at always on; the hourly limit still counts them.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ...plugin import engine_counters, knob_contract
from .. import kept_extend, prefilled, speedup
from . import learn_share, learn_start, learn_state, learn_window
from .base import Decision, Observation, PolicyError
from .learn_counters import (
    CEILING_KEY,
    DEFAULT_KEPT_EXTEND_TAX,
    DEFAULT_Z,
    MIN_INTERVALS,
    bin_floor,
    ceiling_masks,
    ceiling_of,
    estimate_without_thin,
    gated_while_drafted,
    keep_or_move,
    plan_ceilings,
    thin_note,
)

DEFAULT_WINDOW_S = 1800.0
DEFAULT_SAMPLE_S = 15.0
DEFAULT_MIN_DWELL_S = 300.0
DEFAULT_MAX_FLIPS_PER_HOUR = 12
# Observations to wait for a set value to read back before believing the server's read-back instead.
PENDING_WAITS = 2
# Samples (sample_s each) a move waits for a thin bin the load is in now to gather its intervals, once per
# bin: a busy bin usually does within a sample or two, and a move made without it costs a dwell before the
# next. A load that only passes through the bin never gives it them, so the wait must end: then the move
# goes ahead and the bin keeps its side.
WAIT_SAMPLES = 2
# Kept samples in a row a bin must be busy in for its thinness to ask for the thin share (learn_share): a load
# that sits there, not one passing through (a day's load crosses a bin in a sample or two, and the thin share
# would buy windows for bins it has already left: in the simulator, learn warm-started at 16 on the H200
# early pair under the 270-s day served 0.974 of threshold:16 asking for every thin bin, 0.98+ without)
THIN_HELD_SAMPLES = 3
# A move names the bins its ceiling drafted that ran at least this share of their steps gated (the drain)
DRAIN_NOTE_SHARE = 0.5
OPTION_DEFAULTS: dict[str, float] = {
    "window_s": DEFAULT_WINDOW_S,
    "sample_s": DEFAULT_SAMPLE_S,
    "min_dwell_s": DEFAULT_MIN_DWELL_S,
    "max_flips_per_hour": DEFAULT_MAX_FLIPS_PER_HOUR,
    "z": DEFAULT_Z,
    "kept_extend_tax": DEFAULT_KEPT_EXTEND_TAX,
    "explore_share": knob_contract.DEFAULT_EXPLORE_SHARE,
    "quiet_share": learn_share.DEFAULT_QUIET_SHARE,
    "quiet_after_s": learn_share.DEFAULT_QUIET_AFTER_S,
    "thin_share": learn_share.DEFAULT_THIN_SHARE,
    "thin_max_s": learn_share.DEFAULT_THIN_MAX_S,
}


def _option(options: dict[str, Any], key: str) -> float:
    value = options.get(key, OPTION_DEFAULTS[key])
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise PolicyError(f"learn option {key!r} must be a non-negative number, got {value!r}")
    return float(value)


def _busy_bins(intervals: list[dict[str, Any]]) -> set[int]:
    """The bins that ran decode steps in these intervals (where the load is now)."""
    busy: set[int] = set()
    for interval in intervals:
        for mode in engine_counters.MODES:
            busy.update(b for b, n in zip(interval["bins"], interval[mode]["steps"], strict=True) if n > 0)
    return busy


class LearnPolicy:
    name = "learn"

    def __init__(
        self,
        max_running_requests: int,
        initial_ceiling: int | None = None,
        prefill_costs: Mapping[str, float] | None = None,
        history: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - set(OPTION_DEFAULTS))
        if unknown:
            known = sorted([*OPTION_DEFAULTS, "history", "initial_ceiling", "prefill_costs"])
            raise PolicyError(f"unknown learn option(s) {unknown}; known: {known}")
        if initial_ceiling is not None and (
            not isinstance(initial_ceiling, int) or isinstance(initial_ceiling, bool) or initial_ceiling < 0
        ):
            raise PolicyError(
                f"learn option 'initial_ceiling' must be an integer >= 0, got {initial_ceiling!r}"
            )
        # the warm start, until the first decision that can apply it; then when it moved the knob (a move
        # that starts no dwell), until the next move
        self.initial_ceiling = initial_ceiling
        self._warm_move: float | None = None
        self._note = ""  # said once, after the next decision's reason (a warm start not used)
        self.max_running_requests = max_running_requests
        self.window_s = _option(options, "window_s")
        self.sample_s = _option(options, "sample_s")
        if self.window_s < 2 * self.sample_s or self.sample_s <= 0:
            raise PolicyError("learn options: 'sample_s' must be > 0 and 'window_s' at least twice it")
        self.min_dwell_s = _option(options, "min_dwell_s")
        self.max_flips_per_hour = int(_option(options, "max_flips_per_hour"))
        self.z = _option(options, "z")
        self.kept_extend_tax = _option(options, "kept_extend_tax")
        if self.kept_extend_tax >= 0.5:
            raise PolicyError(f"learn option 'kept_extend_tax' must be below 0.5, got {self.kept_extend_tax}")
        # given: it stands; else the counters' measured tax where they have one (control/kept_extend.py)
        self.tax_given = "kept_extend_tax" in options
        self.tax_text = ""  # the tax the last estimate used, and how it is known
        shares = {key: learn_share.share_of(_option(options, key), key)
                  for key in ("explore_share", "quiet_share", "thin_share")}  # fmt: skip
        self.share = learn_share.ShareAsk(shares["explore_share"], shares["quiet_share"],
                                          _option(options, "quiet_after_s"), shares["thin_share"],
                                          _option(options, "thin_max_s"))  # fmt: skip
        # this decision's view on exploring (learn_share.View), None: none (keep the share)
        self._share_view: learn_share.View | None = None
        self.snapshots: deque[tuple[float, dict[str, Any]]] = deque()  # kept: one per sample_s
        self._intervals: list[dict[str, Any]] = []  # between consecutive kept snapshots (a cache)
        # each interval's part of the estimate's input, kept while in the window (derived: not persisted)
        self._choices = learn_window.WindowChoices()
        # each mode's steady prefill cost a window measured last, for a window without a steady cell of the
        # mode (a load held on one side of the ceiling): prefilled.steady_costs
        self._prefill_costs: dict[str, float] = learn_start.checked_costs(prefill_costs)
        # the server's stored intervals from before this policy's first snapshot (the warm start's), each
        # with the ceiling it ran under: the start of the window, until they age out of it
        self._history: list[dict[str, Any]] = learn_start.checked_history(history)
        self.flip_times: deque[float] = deque()
        # the counters' started_at last seen, and when they started anew (a restarted server): the moves
        # before it went to a process that is gone, so they hold no dwell
        self._server_started: float | None = None
        self._restart_seen: float | None = None
        # the counters of the last observation (not kept in the state: a restored policy reads its newest
        # snapshot instead), which the next one's are checked against for a restart
        self._last_counters: Mapping[str, Any] | None = None
        self.knob: int | None = None  # what we last saw (or set)
        self.pending: int | None = None  # a value we asked for and have not seen read back yet
        self.pending_waits = 0
        self.last_estimate: speedup.SpeedupEstimate | None = None
        # the estimate of the kept samples, the thin bins left out of it, the bins busy in the last sample and
        # those busy in each of the last THIN_HELD_SAMPLES (where the load sits: learn_share's thin share)
        self._estimate: tuple[speedup.SpeedupEstimate, set[int], set[int], set[int]] | None = None
        # thin bin -> when a move first waited for it (not persisted: a restart waits once more at most)
        self._waited: dict[int, float] = {}
        self.last_reason = ""
        self._thin_note = ""  # where the counters are too thin: how far the busy bins are from an interval

    # --- the decision ------------------------------------------------------------------------------
    def decide(self, obs: Observation) -> Decision:
        self._share_view = None
        self.share.read_back(obs.explore_share, PENDING_WAITS)
        decision = self.share.ask(self._decide(obs), obs.ts, self._share_view)
        self.last_reason = decision.reason  # with the share's ask, where there is one
        return decision

    def _decide(self, obs: Observation) -> Decision:
        now = obs.ts
        if obs.stale:
            return self._hold("hold: metrics stale or server unreachable, keeping the last ceiling")
        self._read_back(obs.spec_max_bs)
        counters = obs.counters
        if counters is None:
            return self._hold(
                "hold: the server publishes no engine counters (no spectower plugin, or one "
                "older than 0.2.0), so there is nothing to estimate from"
            )
        problem = engine_counters.validate(dict(counters))
        if problem is not None:
            return self._hold(f"hold: the engine counters are malformed ({problem})")
        self._see_start(now, counters)
        if self._remember(now, counters) or self._estimate is None:
            # The estimate moves only with a kept sample (every sample_s): computed once per sample.
            intervals, samples = self._window_choices()
            est, thin = estimate_without_thin(intervals, self.z, samples)
            busy = _busy_bins(intervals[-1:])
            held = busy.copy() if len(intervals) >= THIN_HELD_SAMPLES else set()
            for interval in intervals[-THIN_HELD_SAMPLES:-1]:
                held &= _busy_bins([interval])
            self._estimate = (est, thin, busy, held)
            self._thin_note = "" if any(b.lo is not None for b in est.bins) else thin_note(samples, busy)
        if self.knob is None:
            return self._hold("hold: the knob's read-back is unknown")
        if self.pending is not None:
            return self._hold(f"hold: waiting for the knob to read back {self.pending}")
        bins = [int(b) for b in counters["bins"]]
        if self.initial_ceiling is not None:
            warm = self._warm_start(now, bins)
            if warm is not None:
                return warm

        est, thin, busy, held = self._estimate
        self.last_estimate = est
        # a bin the ceiling gates measures drafting in the gate's windows alone: one the load sits in that is
        # thin asks for them more often (learn_share)
        thin_gated = learn_share.thin_gated(est, held, self.knob, self.max_running_requests)
        self._share_view = learn_share.View(False, "counters too thin", thin_gated)
        if est.status == "no_data" or not any(b.lo is not None for b in est.bins):
            return self._hold(
                f"hold: counters too thin: no batch-size bin measured in both modes over "
                f"{MIN_INTERVALS} intervals yet ({self._thin_note})"
            )
        target, low, high = plan_ceilings(est, bins, self.max_running_requests)
        knob = self.knob
        # the knob where it is allowed; an in-range knob between bin boundaries moves to the nearest one
        target = keep_or_move(knob, target, low, high, bins, self.max_running_requests)
        if target == self._ceiling(knob):
            view = learn_share.decided(est, busy)
            self._share_view = None if view is None else learn_share.View(*view, thin_gated)
            return self._hold(
                f"hold: ceiling {knob} is within what the crossover allows "
                f"({self._span(low, high)}; crossover {est.label})"
            )
        wanted = target
        self._share_view = learn_share.View(False, f"a move {knob} -> {wanted} is wanted", thin_gated)
        target, waiting = self._spare_thin(est, thin, knob, target, bins, busy, now)
        if waiting is not None or target == knob:
            which = (
                f"bin {waiting}, where the load is now, has"
                if waiting is not None
                else "the bins in between, next to the crossover, have"
            )
            return self._hold(
                f"hold: would move the ceiling {knob} -> {wanted} (crossover {est.label}), but "
                f"{which} no interval yet (counters too thin there)"
            )
        if not self._may_flip(now):
            return self._hold(
                f"hold: would move the ceiling {knob} -> {target} (crossover {est.label}), but "
                f"the change limit (one per {self.min_dwell_s:.0f} s, {self.max_flips_per_hour}"
                f"/h) applies"
            )
        why = f"crossover {est.label}, {self._describe(est)}; {self.tax_text}{self._drain_text()}"
        return self._set(now, target, f"move the ceiling {knob} -> {target}: {why}")

    def _ceiling(self, bound: int) -> int:
        return ceiling_of(bound, self.max_running_requests)

    def _spare_thin(
        self,
        est: speedup.SpeedupEstimate,
        thin_bins: set[int],
        knob: int,
        target: int,
        bins: list[int],
        busy: set[int],
        now: float,
    ) -> tuple[int, int | None]:
        """The target, moved back so that no thin bin (measured in both modes, but not yet over enough
        intervals to trust its interval) that the measured bins cannot vouch for changes side; and the thin
        bin to wait for instead, when one the move would switch is busy now (its data is likely a sample or
        two away): ``WAIT_SAMPLES`` samples per bin at most, then the move goes ahead without it.

        A measured bin (with an interval) vouches for a thin bin the move switches when it lies beyond the
        thin bin and the target puts it on the same side: a measured bin above it that is drafted for one
        switched on, one below it that is gated for one switched off. The speedup falls with batch size
        (the fit's assumption), so the thin bin pays at least as much as a paying bin above it, at most as
        much as a losing bin below it: switching it is decided by data, not guessed, just as the target
        switches the bins never measured there. Left alone is only the thin bin in the gap where the
        crossover falls (no measured bin beyond it goes its way), where its own data would decide; it keeps
        the mode it runs in now. Vouching must not wait for the thin bin's own intervals: a load that passes
        through a bin quickly may never give it any, and since a ceiling cannot skip a bin, a thin bin kept
        gated holds every bin above it gated too (an H200 under a day-shaped load: bin 3 had 2 intervals in
        ten minutes and held the ceiling at 2 while every bin measured, 1 to 64, paid 1.1-2.2x)."""
        measured = [b.batch_size for b in est.bins if b.lo is not None]

        def drafted(b: int) -> bool:  # the target drafts it (a ceiling at max_running_requests: every bin)
            return target >= self.max_running_requests or b <= target

        def vouched(b: int) -> bool:
            if drafted(b):
                return any(m > b and drafted(m) for m in measured)
            return any(m < b and not drafted(m) for m in measured)

        no_interval = {b.batch_size for b in est.bins if b.speedup is not None and b.lo is None}
        thin = sorted(b for b in thin_bins | no_interval if not vouched(b))
        # a bin that got its intervals is waited for no more; nor is a wait from another clock (virtual time)
        self._waited = {b: t for b, t in self._waited.items() if b in thin and t <= now}
        lo, hi = sorted((knob, target))
        switched = [b for b in thin if lo < b <= hi]
        wait_s = WAIT_SAMPLES * self.sample_s
        waiting = next(
            (b for b in switched if b in busy and now - self._waited.setdefault(b, now) < wait_s), None
        )
        if not switched or waiting is not None:
            return target, waiting
        if target < knob:  # bins in (target, knob] would be gated: keep the highest thin one drafting
            return max(target, *switched), None
        return max(knob, bin_floor(min(switched) - 1, bins)), None  # keep the lowest thin one gated

    def _warm_start(self, now: float, bins: list[int]) -> Decision | None:
        """Move to the warm start's ceiling (on a bin boundary) once, a move that starts no dwell
        (``_may_flip``); None when the policy has counters of its own from the last window (restored), which
        then decide."""
        wanted = self._ceiling(bin_floor(self.initial_ceiling or 0, bins))
        self.initial_ceiling = None
        if self.own_window(now) is not None:
            self._note += "; warm start not used: counters of its own from the last window were restored"
            return None
        dwell = "it holds until this server's counters decide against it"
        if self.knob is not None and self._ceiling(self.knob) == wanted:
            return self._hold(f"hold: warm start: the ceiling is already {wanted}, where what is known for "
                              f"this stack puts it; {dwell}")  # fmt: skip
        self._warm_move = now
        return self._set(now, wanted, f"warm start: move the ceiling {self.knob} -> {wanted}, where what is "
                                      f"known for this stack puts it; {dwell}")  # fmt: skip

    def own_window(self, now: float) -> str | None:
        """What its own counters of the last ``window_s`` hold, when it restored some (``load_state``): they
        decide at ``now``, not a warm start; None when it has none."""
        if len(self.snapshots) < 2 or now - self.snapshots[-2][0] > self.window_s:
            return None
        newest = time.strftime("%H:%M:%S", time.gmtime(self.snapshots[-1][0]))
        return f"{len(self.snapshots)} kept samples of the last window, the newest at {newest} UTC"

    def _span(self, low: int, high: int) -> str:
        if high >= self.max_running_requests:
            return f"on from ceiling {low} up" if low < high else "always on"
        return f"ceilings {low}..{high}" if low != high else f"ceiling {low}"

    def _drain_text(self) -> str:
        """The bins the ceiling drafted that ran mostly gated (the drain after bursts): why drafting batches
        faster than gated ones can still lose there."""
        window = self._window()
        shares = gated_while_drafted(window, ceiling_masks(window))
        mostly = [f"{b}: {100 * share:.0f} %" for b, share in shares.items() if share >= DRAIN_NOTE_SHARE]
        if not mostly:
            return ""
        return "; ran gated while drafted (the drain after bursts): " + ", ".join(mostly)

    @staticmethod
    def _describe(est: speedup.SpeedupEstimate) -> str:
        parts = [f"{b.batch_size}: {b.speedup:.2f}x" for b in est.bins if b.speedup is not None]
        return "speedup per bin " + ", ".join(parts)

    # --- counters history --------------------------------------------------------------------------
    def _remember(self, now: float, counters: Mapping[str, Any]) -> bool:
        """Keep this snapshot if ``sample_s`` passed since the last kept one; True when it was kept."""
        snaps = self.snapshots
        if snaps and snaps[-1][0] > now:  # a restored history from another clock (virtual time): forget it
            snaps.clear()
            self._intervals.clear()
        if snaps and now - snaps[-1][0] < self.sample_s:
            return False
        snapshot = dict(counters)
        snapshot[CEILING_KEY] = self.knob
        if snaps:
            self._intervals.extend(self._with_ceilings([snaps[-1], (now, snapshot)]))
        snaps.append((now, snapshot))
        # Keep one snapshot at or before the window's start, so the intervals cover the whole window.
        while len(snaps) > 2 and snaps[1][0] <= now - self.window_s:
            snaps.popleft()
            if self._intervals:
                self._intervals.pop(0)
        if self._history:
            self._history = learn_start.in_window(self._history, now - self.window_s, snaps[0][0])
        return True

    @staticmethod
    def _with_ceilings(snapshots: list[tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
        """The intervals between these snapshots, each with the ceiling it ran under (``CEILING_KEY``)."""
        intervals = speedup.intervals_from_snapshots(snapshots)
        for interval, (_, snapshot) in zip(intervals, snapshots[1:], strict=True):
            interval[CEILING_KEY] = snapshot.get(CEILING_KEY)
        return intervals

    def _corrected_now(self) -> list[dict[str, Any]]:
        """The kept intervals, the gated side of the bins their ceiling drafted scaled to a gated stream's by
        the kept extend's tax: the option where given, else the counters' own measure over the window, else
        ``DEFAULT_KEPT_EXTEND_TAX`` (control/kept_extend.py)."""
        return self._window_choices()[0]

    def _window_choices(self) -> tuple[list[dict[str, Any]], speedup.PerBin]:
        """``_corrected_now`` and its ``speedup.per_bin``. Each interval's part of both is kept while it is in
        the window (``learn_window.WindowChoices``): the same result as ``learn_counters.as_choices`` then
        ``per_bin``, without building every interval's again at each kept sample."""
        window = self._window()
        if self.tax_given:
            tax = self.kept_extend_tax
            self.tax_text = f"kept extend {100 * tax:g} % as given"
        else:
            measured = kept_extend.from_intervals(window)
            tax, self.tax_text = kept_extend.or_assumed(measured, self.kept_extend_tax)
        # what the window's steady cells say now, else what they said last: under a load held above the
        # ceiling the window has no drafting bin, and its explored drafting kept a gated stream's cheaper
        # prefills (1.066 of always on's rate raw, 1.036 levelled, an H100 2026-12-07)
        masks = ceiling_masks(window)
        self._prefill_costs |= prefilled.steady_costs(window, masks)
        return self._choices.read(window, masks, 1.0 / (1.0 - tax), self._prefill_costs)

    def _window(self) -> list[dict[str, Any]]:
        """The intervals the estimate reads: the stored history still in the window, then the policy's own."""
        return [*self._history, *self._intervals] if self._history else self._intervals

    # --- the knob's read-back ----------------------------------------------------------------------
    def _read_back(self, value: int | None) -> None:
        if value is None:
            return
        if self.pending is not None:
            self.pending_waits += 1
            if value == self.pending or self.pending_waits > PENDING_WAITS:
                self.pending = None  # read back; or never applied (refused, failed): believe the server
        if self.pending is None:
            self.knob = value

    # --- changes -----------------------------------------------------------------------------------
    def _may_flip(self, now: float) -> bool:
        if self.flip_times and self.flip_times[-1] > now:
            self.flip_times.clear()  # a restored state from another clock (e.g. virtual time): forget it
        while self.flip_times and self.flip_times[0] <= now - 3600.0:
            self.flip_times.popleft()
        # A warm start is what is known for this stack, measured under other traffic (a sweep's short prompts
        # against production's long ones): it holds until this server's own counters put it outside their
        # interval, which is when a move is asked for at all, so its own move starts no dwell. Every move
        # after it keeps one.
        last = self.flip_times[-1] if self.flip_times else None
        if last is not None and self._restart_seen is not None and last < self._restart_seen:
            last = None  # made to the server before it restarted (back at its launch ceiling since)
        if last is not None and last != self._warm_move and now - last < self.min_dwell_s:
            return False
        self._warm_move = None
        return len(self.flip_times) < self.max_flips_per_hour

    def _see_start(self, now: float, counters: Mapping[str, Any]) -> None:
        """Note a restart of the server: its counters started anew since the last observation (their
        ``started_at`` moved, or by the counters' own rule: a count went down). The last observation's
        counters, not the last kept snapshot's: against a snapshot up to ``sample_s`` old, every observation
        until the next one is kept read as a restart again, and a move made in between lost its dwell."""
        started = counters.get("started_at")
        moved = self._server_started is not None and started != self._server_started
        previous = self._last_counters
        if previous is None and self.snapshots:  # restored: its newest snapshot is the last it saw
            previous = self.snapshots[-1][1]
        if previous is not None:
            moved = moved or engine_counters.restarted(previous, counters)
        self._last_counters = counters
        if moved and self.flip_times:
            self._restart_seen = now
            self._note += "; the server restarted (its counters started anew): its last move holds no dwell"
        self._server_started = started

    def _set(self, now: float, value: int, reason: str) -> Decision:
        reason, self._note = reason + self._note, ""
        self.flip_times.append(now)
        self.pending = value
        self.pending_waits = 0
        self.knob = value
        return Decision(value, reason)

    def _hold(self, reason: str) -> Decision:
        reason, self._note = reason + self._note, ""
        return Decision(None, reason)

    # --- persistence -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "version": learn_state.STATE_VERSION,
            "flip_times": list(self.flip_times),
            "snapshots": [[ts, snap] for ts, snap in self.snapshots],
            "explore_share_asked": self.share.asked,
            "explore_share_confirmed": self.share.confirmed,
            "decided_since": self.share.decided_since,
            "server_started_at": self._server_started,
            "restart_seen_at": self._restart_seen,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        loaded = learn_state.parsed(state, self.name)
        self.share.load(loaded.share_asked, loaded.share_confirmed, loaded.decided_since)
        self._server_started, self._restart_seen = loaded.server_started_at, loaded.restart_seen_at
        self._last_counters = None
        self.flip_times = deque(loaded.flip_times)
        self.snapshots = deque(loaded.snapshots)
        self._intervals = self._with_ceilings(loaded.snapshots)
        self._choices = learn_window.WindowChoices()
        self._estimate = None
