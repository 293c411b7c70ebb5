"""Exploration: which decode batches run the other mode than the ceiling says, so that the engine counters
(plugin/engine_counters.py) measure drafted and gated steps at every load the server sees (issue #14).

Standard library only: the SGLang plugin's gate (plugin/knob_gate.py) and the simulator's ranks
(simulator/engine.py) use this one schedule, so both explore the same batches.

A share ``s`` of each batch-size bin's batches explores, in runs of ``RUN_LENGTH`` consecutive batches: a
bin's first run starts at its ``period``-th batch (``period = round(1 / s)``,
``knob_contract.explore_period``: as soon as single-batch exploration would have), the next ones every
``period x RUN_LENGTH`` batches after it, so a bin explores ``1 / period`` of its batches.

Why runs, not single batches: on the H200 (data/gpu-runs/NOTEBOOK.md, 2026-11-30 evening) single gated batches
among drafting ones served 4875 tok/s of step time at batch 33-64, where a gated stream at that load serves
about as much as a plain server (~7700): the first step after a mode switch pays for the switch, and with
single batches every explored step is such a first step, so the estimate favoured drafting (1.55 x where
the sweep measured 0.95 x). In a run, only the first explored batch and the first batch after the run
switch; they are marked ``settling`` and the counters keep them apart, so both modes' rates are the
rates of a steady stream. Runs also cut the entries a switch appends to SGLang's never-trimmed override log
by ``RUN_LENGTH``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .engine_counters import MAX_BIN, bin_of
from .knob_contract import DEFAULT_EXPLORE_SHARE, explore_period

# Batches per exploration run: the switch's first step (not counted) is one in 4; longer runs would leave a
# bin fewer runs, and the learn policy needs runs in 3 intervals of a bin before it trusts the bin.
RUN_LENGTH = 4


class ExploreSchedule:
    """Per process (one DP rank): counts batches per bin and says which explore. Not thread-safe by itself:
    its callers hold their own lock or run on SGLang's scheduler thread."""

    def __init__(self) -> None:
        self._bin_batches: dict[int, int] = {}
        self._left = 0  # batches still to explore in the current run
        self._last = False  # whether the previous batch explored

    def next(self, batch_size: int, period: int) -> tuple[bool, bool]:
        """(explore, settling) for the next decode batch; ``period`` 0 means exploring is off or paused
        (a lock holds the knob): nothing explores and a run under way ends.

        ``settling``: this batch switches into a run or is the first one after it (its step pays the switch).
        """
        if period <= 0:
            self._left = 0
            explore = False
        else:
            key = bin_of(batch_size)
            seen = self._bin_batches.get(key, 0) + 1
            self._bin_batches[key] = seen
            if self._left > 0:
                self._left -= 1
                explore = True
            elif seen % (period * RUN_LENGTH) == period:
                self._left = RUN_LENGTH - 1
                explore = True
            else:
                explore = False
        settling = explore != self._last
        self._last = explore
        return explore, settling


# ---- Windows for the batches the ceiling gates (issue #32) ---------------------------------------------
#
# A batch the ceiling gates skips the draft model's KV extend when nothing needs the draft warm
# (knob_contract.extend_skippable): without the extend, a gated step is a plain server's decode step, with
# it the H200 served 0.87-0.97 of that (data/gpu-runs/NOTEBOOK.md). But explored drafting batches among the
# gated ones must find the draft warm, so exploring used to keep the extend on every gated batch: a policy's 0
# with the default share served 0.88-0.95 of a plain server where an operator's (locked) 0 served 0.96-1.01.
# So among the batches the ceiling gates, exploration runs in windows, one per cycle of
# WINDOW_CYCLE_BATCHES such batches (per process):
#
#   cold     the extend is skipped and nothing explores (most of the cycle): a steady gated stream, as an
#            operator's off;
#   warm     the extend runs again and nothing explores, until no request of the batch still has the holes
#            the skipped extends left in its draft KV (they finish; new requests are clean), at most
#            WINDOW_WARM_MAX_BATCHES, after which the rest are forgotten and recover cold;
#   explore  every batch drafts, twice the cycle's usual number of explored batches (the share's: one in
#            ``period``), at most WINDOW_EXPLORE_BATCHES (``ExploreWindows.explore_length``), then cold again.
#            Its first half is marked settling (the *turnover*): only the second half is counted.
#
# Why a stream, and why the turnover: requests accept differently (code and chat; the GPU pair's fixed
# point and 2-cycle), and a stream keeps each request for as many steps as it needs. A gated stream keeps a
# request for its length L, a drafting one for L / a, so its batches hold fewer of the requests that accept
# more: a drafting stream's tokens per request-step are the harmonic mean of the accept lengths, while a
# drafting batch explored among gated ones carries the batch the gated stream left, their plain mean (1.125x
# on the 2026-12-01 H200 run, runs of 4 batches). A drafting stream turns its batch over within a request's
# drafted lifetime; after that its counted batches measure what a drafting server serves (gpu/README.md,
# "learn's lean"; simulator: requests of several accept lengths, ``sim serve --accept-kinds``).
#
# The extend runs in the warm part only: a few % of those batches for requests of a few hundred tokens, so
# the exploring tax falls from 5-12 % to under 1 %. The gated batches of warm are marked settling: the
# counters keep them apart, so a gated bin's rate is the cold stream's. A bin the
# ceiling drafts explores as before, in runs throughout; its explored gated batches keep the extend (their
# requests go on drafting), so its gated rate reads low by the extend's share (control/policy/learn.py
# corrects it). A drafting batch between gated ones leaves the window's clock alone; one with holed requests
# is drained first (plugin/gated_decode.py).
#
# The stream's limit (plugin 0.4.2): the exploring part drafts only batches of at most ``stream_limit`` of the
# ceiling, twice it (EXPLORE_STREAM_OVER_CEILING), never less than EXPLORE_STREAM_FLOOR. Drafting "at whatever
# batch size the load has then" put a stream's drafted steps into bursts: on the H200 under Azure's replay
# a drafted step at 32-64 requests cost 2.5-4.5x a gated one with long prompts, and the whole batch waited
# through it, so learn at a ceiling of 8 served e2e p50 1.23x always-off's (simulator, calibrated on that run:
# docs/off-means-off.md). Above the limit a batch of the exploring part runs gated WITH the draft extend: its
# requests may draft again in this stream once the batch shrinks below the limit, so their draft KV must stay
# whole (a skipped extend would leave holes the drafting batch must drain first); and it is settling, as the
# warm part's gated batches are: its step pays the extend, so it is no cold gated step. Such batches use up
# the part's batches (its length counts every batch of it): the part, and with it the batches that pay the
# extend, stays bounded however long a burst lasts, and the cold part's clock (per batch of the last part)
# reads their cheaper steps. The turnover counts drafted batches only: the stream turns its batch over by
# drafting, so a part spent above the limit counts no drafted batch it has not turned over first (a burst's
# window measures little, which the learn policy sees as a thin bin, never as evidence).
# Climbing still works: learn's ceilings lie on bin boundaries and twice a boundary is one (1, 2, 3, 4, 6, 8,
# 12, 16, ...: engine_counters.counter_bins), so at a ceiling c the bins up to 2c are measured whole and the
# bins above it not at all (thin: learn keeps their side); once 2c's bin pays, learn may move to 2c, which
# explores up to 4c, and so on, one move per dwell. Only where the load passes through (c, 2c], though.
# Escalation (plugin 0.4.3): a load that rose far above a low ceiling and stays there went unmeasured for good
# (learn held at 0 under a load of 40 on the H200 pair, whose crossover is ~49: simulator, 0.90 of the oracle
# against 0.99), so the limit doubles after an exploring part whose largest batch was above it
# (``next_doublings``). A burst meets one window's part at most, so it still stays out of the stream: the
# first part above the limit doubles it once, and only if the load is still there a window's cycle later
# (WINDOW_CYCLE_BATCHES gated batches, about a minute on the H200 pair) does the next part meet it. Once
# escalated (plugin 0.4.4) the limit drafts twice the last part's largest batch: under 0.4.3's one doubling
# per window a load that doubled within a window (the ten-minute day of tests/test_control_policy_learn.py)
# outran the limit and learn turned on only on the way down; with a doubling of headroom the stream keeps up,
# and it follows the load down with that headroom, back to twice the ceiling once twice the largest batch is
# within it. What a part that meets a load near capacity can cost is bounded by its time cap
# (WINDOW_EXPLORE_MAX_S, below), which is why the headroom, rejected under 0.4.3 for letting bursts back in,
# is kept now (docs/off-means-off.md). Why the largest batch and not "the part drafted nothing" (starved): a
# part that drafted its smaller batches while the load rose left the limit where it was, so the load outran
# it; and resetting to the floor as soon as a part drafts made a held load drop back out of reach every
# other window.

WINDOW_CYCLE_BATCHES = 8192
# A share above the default shortens the cold part in proportion (plugin 0.4.16): from about the default share
# up the exploring part is at its cap already (2 x cycle / period >= WINDOW_EXPLORE_BATCHES), so more share
# can only mean windows that come more often. A bin the ceiling gates measures drafting in windows alone, one
# interval per window, and the learn policy trusts a bin after three: a fresh server under a load above its
# ceiling waited three cycles for them (432 s on an H100, 2026-12-07). learn asks for a larger share (its
# ``thin_share``) while the load sits in such a bin, and its windows then come every 30-60 s.
WINDOW_BASE_PERIOD = explore_period(DEFAULT_EXPLORE_SHARE)
MAX_WINDOW_CYCLE_BATCHES = 1 << 20
EXPLORE_CYCLE_ENV = "SPECTOWER_EXPLORE_CYCLE"
WINDOW_EXPLORE_BATCHES = 384
WINDOW_WARM_MAX_BATCHES = 1024
# A window's parts are counted in time as well as in batches: the cold part lasts at least as long, per batch
# of the cycle, as the last exploring part did. Drafted batches cost 2-5x a gated step where contexts are long
# (Azure's conversation trace on the H200, 2026-12-04: drafting explored above a ceiling of 8 took 12 % of
# the step time and cost 5.5-5.9 % of it, where the share asked for 2 % of the batches), so a share of batches
# is a larger share of time; stretching the cold part keeps the exploring part's share of the time at its
# share of the batches. A gap between two such batches longer than this counts as this: the server was idle,
# not busy.
WINDOW_MAX_BATCH_GAP_S = 0.5
# ...and an exploring part ends after this many busy seconds, whatever its batches (plugin 0.4.4). Keeping
# the share of the time bounds exploring's mean cost, not its bursts: near capacity, with long prompts and a
# stream limit doubled up to the load (0.4.3), a part drafted 384 batches at 4.5x a gated step's cost: 24 s
# of half-speed service, a queue of 100 requests and a p99 TTFT of 5-8 s for threshold:16/32 where always
# off read 0.22 s (simulator, the fixed-share 0.5 pair's curves with Azure's prompts at rate scale 1:
# tests/test_open_loop.py). Capped, a part leaves at most a few seconds of half-speed work behind. 3 s is
# about what a part of cheap steps lasts anyway (384 batches at ~8 ms), so the cap binds only where drafting
# is dear. A part cut by time counts its second half in time (``past_turnover``). Where steps are slow its
# turnover can be shorter than a request's drafted lifetime, and the counted batches then lean toward the
# gated stream's request mix (the comment on streams above): in the simulator's mix the lean stays within 3 %
# while the turnover lasts about half a request's drafted lifetime, and reaches 4-8 % at a fifth of it
# (tests/test_sim_request_mix.py). Where the cap binds, drafting is dear, usually far from the crossover.
WINDOW_EXPLORE_MAX_S = 3.0
# A window yields to a full server (plugin 0.4.12). Near capacity every second a step loses waits in every
# queued request's first token: on an H100 under Azure's replay (data/gpu-runs/h100-8b-pair-triton-replay-
# 2026-12-05e) one exploring part began with 17 requests queued and the KV pool 0.96 full, drafted 3 s at
# 63-64 running, and held the queue about 14 s longer than every other run of the launch: learn's TTFT p99
# 2.18x always off's where its other run, whose windows fell elsewhere, read 1.04x. So a window that falls
# due while requests wait that the scheduler could not admit beside the decode batch (``full``: SGLang forms a
# decode batch with requests waiting only when it cannot admit them) waits in the cold part, and a warm or
# exploring part under way when the server fills ends there. The window begins (again) only after
# WINDOW_ROOM_BATCHES batches in a row with room: the moment a queue clears is the peak of the load, the
# backlog just admitted, and bursts come in clusters. The simulator showed both (``python3
# benchmarks/window_yield_whatif.py``: the 0.5 pair's fitted H200 profile under Azure's replay at rate
# scale 0.9, 3 seeds x 8 window phases): beginning at the first batch with room made TTFT p99 worse than
# not yielding at all (learn 1.62x always off's on average, against 1.48x), 2048 batches of room made it
# 1.04x; 512 or 1024 read 1.18-1.25x, 4096 1.09x. About 20-30 s of busy decoding on the H200; a quarter of
# the cycle where a shorter cycle is asked for. A window waits at most one cycle of batches in all (counted
# from when it fell due): a server that stays full is still measured, a window every second cycle, and that
# window runs to its end whatever the load.
WINDOW_WAIT_MAX_CYCLES = 1
WINDOW_ROOM_BATCHES = 2048
# The warm part's usual length, for the policy harness, which has no requests to wait for: requests of a few
# hundred tokens, so about as long as the exploring part.
WINDOW_WARM_TYPICAL_BATCHES = WINDOW_EXPLORE_BATCHES

# What a gated step's draft KV extend costs, where nothing measured it: gated batches with the extend served
# 0.87-0.97 of the knob at 0 locked on the H200 (data/gpu-runs/NOTEBOOK.md, "The four policies", 2.;
# exploration's cost 0.93). The learn policy scales a drafting bin's gated rate (its explored gated batches
# keep the extend) by 1 / (1 - this), and the simulator charges it where a profile has no measured
# ``spec_off_warm`` curve.
DEFAULT_KEPT_EXTEND_TAX = 0.07

# The stream's limit (comment above): twice the ceiling, as the simulator's what-if measured (learn e2e p50
# 1.61 s vs 1.79 s unlimited, p99 4.86 s vs always-off's 4.77 s); twice a bin boundary is a bin boundary.
EXPLORE_STREAM_OVER_CEILING = 2
# ...and at least 8 requests: a ceiling of 0 (or 1-3) must still explore drafting where it is cheapest to try,
# or learn could never find that small batches pay and climb out of a low ceiling (learn only moves up to
# bins measured in both modes). The smallest batches are where a drafted step costs least over a gated one (a
# small batch is memory-bound: the verify's extra tokens ride along nearly free) and where a burst is not:
# under the what-if's rule (twice the ceiling, the ceiling taken as at least 1) a ceiling of 0 explored
# batches of 2 at most, which a loaded server rarely has. 8 is a bin boundary: the bins up to it are measured
# whole.
EXPLORE_STREAM_FLOOR = 8
# ...and doubled after each part above it (comment above), up to this many requests at most (the largest bin
# the counters keep); in practice the doublings stop at the largest batch the server runs: a part whose limit
# is above every batch drafts them all and doubles nothing.
EXPLORE_STREAM_CAP = MAX_BIN
# The most doublings that can matter (the floor's up to the cap): bounds ``ExploreWindows.doublings``.
MAX_DOUBLINGS = (EXPLORE_STREAM_CAP // EXPLORE_STREAM_FLOOR).bit_length() - 1

COLD, WARM, EXPLORE = "cold", "warm", "explore"  # knob_contract.extend_skippable knows "cold" by name
PHASES = (COLD, WARM, EXPLORE)


def stream_limit(ceiling: int, doublings: int = 0) -> int:
    """The largest batch a window's exploring part drafts under ``ceiling`` with ``doublings`` (comment
    above): twice the ceiling, at least the floor, doubled that often up to the cap (never below the
    undoubled limit)."""
    base = max(EXPLORE_STREAM_FLOOR, EXPLORE_STREAM_OVER_CEILING * max(0, ceiling))
    return min(base << min(max(0, doublings), MAX_DOUBLINGS), max(base, EXPLORE_STREAM_CAP))


def stream_drafts(batch_size: int, ceiling: int, doublings: int = 0) -> bool:
    """Whether a batch of ``batch_size`` in a window's exploring part drafts (else: gated with the extend,
    settling)."""
    return batch_size <= stream_limit(ceiling, doublings)


def next_doublings(doublings: int, largest: int | None, ceiling: int) -> int:
    """The limit's doublings once an exploring part ends whose largest batch was ``largest`` (None: it had
    none) under ``ceiling`` (comment above). Unescalated (0 doublings), a part above the limit doubles it
    once: it may have met a burst. Escalated, the limit is the fewest doublings that draft twice the part's
    largest batch (plugin 0.4.4): a held load is drafted with a doubling of headroom, so a load that doubles
    within a window stays in reach, and the limit follows it down with that headroom, back to twice the
    ceiling once the largest batch is within the ceiling. The one rule the plugin (``ExploreWindows``) and
    the simulator's fluid harness (simulator/fluid_windows.py) follow."""
    if largest is None:
        return doublings
    if doublings == 0:
        return min(1, fewest_doublings(largest, ceiling))
    return fewest_doublings(2 * largest, ceiling)


def fewest_doublings(batch_size: int, ceiling: int) -> int:
    """The fewest doublings of the stream's limit under ``ceiling`` that draft ``batch_size`` (at most
    MAX_DOUBLINGS)."""
    fewest = 0
    while fewest < MAX_DOUBLINGS and batch_size > stream_limit(ceiling, fewest):
        fewest += 1
    return fewest


def windowed(gated_by_ceiling: bool, period: int) -> bool:
    """Whether a batch's exploration runs in windows: the ceiling gates it and exploring is on (``period``
    > 0: a share, and no lock; the caller passes 0 under a lock)."""
    return gated_by_ceiling and period > 0


def kept_extend_share(cycle: int = WINDOW_CYCLE_BATCHES, period: int | None = None) -> float:
    """The share of the batches the ceiling gates that run the draft extend while gated under windows, as the
    policy harness models it (the warm part at its usual length); 1.0 without windows (cycle 0)."""
    if cycle == 0:
        return 1.0
    return min(ExploreWindows(cycle).warm_max, WINDOW_WARM_TYPICAL_BATCHES) / window_batches(cycle, period)


def window_explore_share(cycle: int = WINDOW_CYCLE_BATCHES, period: int | None = None) -> float:
    """The share of the batches the ceiling gates that draft in a window's exploring part (turnover included),
    as the policy harness models it; without windows (cycle 0) the share's own ``1 / period``."""
    if cycle == 0:
        return 1.0 / period if period else 0.0
    return ExploreWindows(cycle).explore_length(period) / window_batches(cycle, period)


def window_batches(cycle: int = WINDOW_CYCLE_BATCHES, period: int | None = None) -> int:
    """One window's gated batches (cold, warm, exploring), as the policy harness models it (the warm part at
    its usual length, the cold part counted in batches)."""
    windows = ExploreWindows(cycle)
    return _cycle_batches(windows, min(windows.warm_max, WINDOW_WARM_TYPICAL_BATCHES), period)


def timed_share(batch_share: float, cost_ratio: float) -> float:
    """A window part's share of the gated batches once the cold part keeps time (``ExploreWindows.step``
    with a clock): drafting ``cost_ratio`` times as dear per step as a gated step stretches the cold part by
    that much, so the part's batch share falls and its share of the time stays ``batch_share``."""
    if batch_share <= 0.0:
        return 0.0
    return batch_share / (batch_share + (1.0 - batch_share) * max(1.0, cost_ratio))


def _cycle_batches(windows: ExploreWindows, warm: int, period: int | None) -> int:
    """One cycle's batches: the cold part, the warm part, the exploring part."""
    return windows.cold_batches(period) + warm + windows.explore_length(period)


class ExploreWindows:
    """The phase of each batch the ceiling gates (the comment above). Per process, like the schedule.

    ``cycle`` batches per window (``SPECTOWER_EXPLORE_CYCLE`` in SGLang's environment; 0 turns windows off:
    exploring then runs throughout and every gated batch keeps the extend, as before issue #32); a shorter
    cycle than the default scales the exploring part (a 16th) and the warm cap (an 8th) with it."""

    def __init__(self, cycle: int = WINDOW_CYCLE_BATCHES, room_batches: int | None = None) -> None:
        """``room_batches``: the batches in a row with room a window needs to begin (None:
        WINDOW_ROOM_BATCHES, at most a quarter of the cycle)."""
        if cycle < 2:
            raise ValueError(f"an exploration cycle needs at least 2 batches, got {cycle}")
        self.cycle = cycle
        self.explore_batches = min(WINDOW_EXPLORE_BATCHES, max(1, cycle // 16))
        self.warm_max = min(WINDOW_WARM_MAX_BATCHES, max(1, cycle // 8))
        self.room_batches = min(WINDOW_ROOM_BATCHES, cycle // 4) if room_batches is None else room_batches
        self.phase = COLD
        self._in_phase = 0  # batches of the current phase so far (this one included, after step())
        self.windows = 0  # exploring parts begun
        # warm parts ended by warm_max with holed requests left (forgotten: they recover cold)
        self.warm_cut = 0
        self.cut_now = False  # the last step() ended a warm part by warm_max: the caller forgets the holes
        self.stream_drafted = 0  # drafted batches of the current exploring part (its turnover counts these)
        self.over_limit = 0  # batches of exploring parts above the stream's limit (gated with the extend)
        self.timed_out = 0  # exploring parts ended by WINDOW_EXPLORE_MAX_S before their batches ran out
        self.doublings = 0  # the limit's doublings (next_doublings)
        self.ceiling: int | None = None  # the ceiling of the last exploring batch (the report's limit)
        self.stream_largest: int | None = None  # the largest batch of the current exploring part
        self.batches = dict.fromkeys(PHASES, 0)
        # time (module comment above WINDOW_MAX_BATCH_GAP_S): busy seconds of the current part, of the last
        # exploring part, and the cold part's least seconds that follow from it
        self._prev_now: float | None = None
        self._busy_s = 0.0
        self.last_explore_s: float | None = None
        self.cold_min_s = 0.0
        # a full server (WINDOW_WAIT_MAX_CYCLES): batches a window waited for room, warm or exploring parts it
        # cut short, and windows that ran full after waiting their most
        self.yield_to_full = True
        self.full_waited = 0
        self.yielded = 0
        self.forced = 0
        # batches since the current window fell due (0: not due), until its exploring part runs its course;
        # it waits while < cycle. A part a full server cut short leaves its window due: it begins with room
        self._due = 0
        self._forced_now = False  # the current window waited its most: it runs to its end, full or not
        self._room = self.room_batches  # batches in a row with room (none full); a fresh server has had room

    @property
    def in_phase(self) -> int:
        return self._in_phase

    def cold_batches(self, period: int | None) -> int:
        """The cold part's batches: the rest of the cycle, shortened in proportion for a share above the
        default (``WINDOW_BASE_PERIOD``); the cold part's clock stretches it further (``cold_min_s``)."""
        cold = self.cycle - self.explore_batches
        if period is not None and 0 < period < WINDOW_BASE_PERIOD:
            cold = max(1, round(cold * period / WINDOW_BASE_PERIOD))
        return cold

    def explore_length(self, period: int | None) -> int:
        """The exploring part's batches: the turnover and then the cycle's usual number of explored
        batches (one in ``period``), each at least 1, at most ``explore_batches`` in all. 0 for period 0;
        ``explore_batches`` for None (no share given)."""
        if period is None:
            return self.explore_batches
        if period <= 0:
            return 0
        counted = max(1, round(self.cycle / period))
        return min(self.explore_batches, 2 * counted)

    def turnover(self, period: int) -> int:
        """The exploring part's first drafted batches, marked settling while the drafting stream turns its
        batch over: half the part."""
        return self.explore_length(period) // 2

    def limit(self, ceiling: int) -> int:
        """The stream's limit under ``ceiling`` now (``stream_limit`` with the parts' doublings so far)."""
        return stream_limit(ceiling, self.doublings)

    def drafts(self, batch_size: int, ceiling: int) -> bool:
        """Whether the exploring part's batch of ``batch_size`` drafts under ``ceiling`` (its limit now)."""
        self.ceiling = ceiling
        if self.stream_largest is None or batch_size > self.stream_largest:
            self.stream_largest = batch_size
        return stream_drafts(batch_size, ceiling, self.doublings)

    def stream(self, drafts: bool, period: int) -> bool:
        """Note whether the exploring part's batch just stepped drafts (``stream_drafts``); True when it
        counts: it drafts, past the turnover's drafted batches. A batch above the stream's limit never counts
        (gated with the extend: settling) and leaves the turnover where it was."""
        if not drafts:
            self.over_limit += 1
            return False
        self.stream_drafted += 1
        return self.past_turnover(period)

    def past_turnover(self, period: int) -> bool:
        """Whether the exploring part's drafted batches so far are more than its turnover (the last one
        counted, as ``stream`` said), or, with a clock, its busy time is past half of WINDOW_EXPLORE_MAX_S: a
        part ends at whichever of its length and the time cap comes first, and counts from that end's half."""
        if self.stream_drafted <= 0:
            return False
        return self.stream_drafted > self.turnover(period) or self._busy_s >= WINDOW_EXPLORE_MAX_S / 2

    def _end_stream(self) -> None:
        """The exploring part ends: the limit's doublings for the next one (``next_doublings``)."""
        self.doublings = next_doublings(self.doublings, self.stream_largest, self.ceiling or 0)
        self.stream_largest = None

    def _elapse(self, now: float | None) -> None:
        """Add the time since the previous batch (capped: idle is not busy) to the current part's."""
        if now is None:
            return
        if self._prev_now is not None:
            self._busy_s += min(max(now - self._prev_now, 0.0), WINDOW_MAX_BATCH_GAP_S)
        self._prev_now = now

    def _cold_done(self, period: int | None) -> bool:
        if self._due:  # a window already due (waiting for room, or cut short) needs no cold part again
            return True
        return self._in_phase >= self.cold_batches(period) and self._busy_s >= self.cold_min_s

    def _may_wait(self) -> bool:
        """Whether the due window may still wait for room (WINDOW_WAIT_MAX_CYCLES)."""
        return self.yield_to_full and not self._forced_now and self._due < WINDOW_WAIT_MAX_CYCLES * self.cycle

    def _yield(self) -> None:
        """A full server cuts the warm or exploring part short: back to cold, to begin again with room. An
        exploring part's largest batch still sets the next limit (``_end_stream``); its time does not set the
        cold part's (it did not run its course)."""
        if self.phase == EXPLORE:
            self._end_stream()
        self.yielded += 1
        self.phase, self._in_phase = COLD, 0

    def step(self, holes_pending: Callable[[], bool] = lambda: False, period: int | None = None,
             now: float | None = None, full: bool = False) -> str:  # fmt: skip
        """The phase of the next batch the ceiling gates; ``holes_pending()``: some request of this
        batch still has holes in its draft KV (asked only in the warm part; False where nothing skips it);
        ``period``: the share's, which sets the exploring part's length (``explore_length``); ``now``: a
        monotonic clock's seconds (None: count batches only), by which the cold part lasts at least as long
        per batch as the last exploring part did, and an exploring part ends after WINDOW_EXPLORE_MAX_S busy
        seconds; ``full``: requests wait that the scheduler could not admit beside this batch (a due window
        waits, a warm or exploring part ends: WINDOW_WAIT_MAX_CYCLES)."""
        length = self.explore_length(period)
        self.cut_now = False
        self._elapse(now)
        if self._due:
            self._due += 1
        self._room = 0 if full else self._room + 1
        if self.phase in (WARM, EXPLORE) and full and self._may_wait():
            self._yield()
        if self.phase == COLD and self._cold_done(period):
            self._due = self._due or 1
            if self._room < self.room_batches and self._may_wait():
                self.full_waited += 1
            else:
                self._forced_now = full and self.yield_to_full
                self.forced += self._forced_now
                self.phase, self._in_phase = WARM, 0
        if self.phase == WARM:
            pending = holes_pending()
            cut = pending and self._in_phase >= self.warm_max
            if not pending or cut:
                self.phase, self._in_phase = EXPLORE, 0
                self.stream_drafted = 0
                self.windows += 1
                self.warm_cut += cut
                self.cut_now = cut
        elif self.phase == EXPLORE and (self._in_phase >= length or self._busy_s >= WINDOW_EXPLORE_MAX_S):
            self.timed_out += self._in_phase < length
            self._end_stream()
            self._due, self._forced_now = 0, False
            if now is not None:
                self.last_explore_s = self._busy_s
                self.cold_min_s = self._busy_s * self.cold_batches(period) / max(1, self._in_phase)
            self.phase, self._in_phase = COLD, 0
        if self._in_phase == 0:
            self._busy_s = 0.0
        self._in_phase += 1
        self.batches[self.phase] += 1
        return self.phase

    def report(self, active: bool) -> dict[str, Any]:
        """The ``window`` block of the plugin's (and the simulator's) ``explore`` report."""
        return {
            "active": active,
            "phase": self.phase if active else None,
            "cycle": self.cycle,
            "explore_batches": self.explore_batches,
            "warm_max": self.warm_max,
            "windows": self.windows,
            "warm_cut": self.warm_cut,
            "over_limit": self.over_limit,
            "timed_out": self.timed_out,
            "limit": None if self.ceiling is None else self.limit(self.ceiling),
            "doublings": self.doublings,
            "batches": dict(self.batches),
            "last_explore_s": self.last_explore_s,
            "cold_min_s": round(self.cold_min_s, 3),
            "room_batches": self.room_batches,
            "full_waited": self.full_waited,
            "yielded": self.yielded,
            "forced": self.forced,
        }


@dataclass(frozen=True)
class BatchPlan:
    """What one decode batch does about exploration: ``explore`` (run the other mode than the ceiling says),
    ``settling`` (counted apart: it switches into or out of a run, is a gated batch of a window's warm part,
    which keeps the extend, a drafting batch of the exploring part's turnover, or a batch of the exploring
    part above the stream's limit, gated with the extend), ``phase`` (the window's,
    None when not windowed) and ``forget_holes`` (a warm part was cut short: the holed requests recover
    cold)."""

    explore: bool
    settling: bool
    phase: str | None
    forget_holes: bool


def cycle_of(raw: str | None) -> int:
    """The cycle that ``SPECTOWER_EXPLORE_CYCLE`` asks for (unset: the default; 0: no windows), or
    ValueError naming the variable."""
    if raw is None or raw.strip() == "":
        return WINDOW_CYCLE_BATCHES
    try:
        cycle = int(raw)
    except ValueError:
        raise ValueError(f"{EXPLORE_CYCLE_ENV} must be a whole number of batches, got {raw!r}") from None
    if cycle != 0 and not 2 <= cycle <= MAX_WINDOW_CYCLE_BATCHES:
        raise ValueError(f"{EXPLORE_CYCLE_ENV} must be 0 (no windows) or 2..{MAX_WINDOW_CYCLE_BATCHES}, "
                         f"got {cycle}")  # fmt: skip
    return cycle


class Explorer:
    """The schedule and the windows together: the one decision per decode batch that the SGLang plugin's gate
    (plugin/knob_gate.py) and the simulator's ranks (simulator/engine.py) both make. ``cycle`` 0: no
    windows (gated batches keep the extend throughout while anything explores)."""

    def __init__(self, cycle: int = WINDOW_CYCLE_BATCHES) -> None:
        self.schedule = ExploreSchedule()
        self.windows = ExploreWindows(cycle) if cycle else None
        self.phase_now: str | None = None  # the last batch's window phase (None: not windowed)

    def window_report(self) -> dict[str, Any]:
        """The ``window`` block of the ``explore`` report (the plugin's and the simulator's)."""
        if self.windows is None:
            return {"active": False, "phase": None, "cycle": 0}
        return self.windows.report(self.phase_now is not None)

    def next(self, batch_size: int, gated_by_ceiling: bool, period: int,
             holes_pending: Callable[[], bool] = lambda: False,
             now: float | None = None, *, ceiling: int, full: bool = False) -> BatchPlan:  # fmt: skip
        """``gated_by_ceiling``: the ceiling (its hysteresis included) gates this batch; ``period``: the
        share's period, 0 when exploring is off or paused (a lock holds the knob); ``now``: a monotonic
        clock's seconds for the windows' time (``ExploreWindows.step``); ``ceiling``: the ceiling now, which
        sets the exploring part's stream limit (``stream_limit``); ``full``: requests wait that the scheduler
        could not admit (a window yields: ``ExploreWindows.step``). The windows' clock runs on the
        batches the ceiling gates only: a drafting batch between them neither advances nor resets it."""
        if self.windows is None or not windowed(gated_by_ceiling, period):
            self.phase_now = None
            explore, settling = self.schedule.next(batch_size, period)
            return BatchPlan(explore, settling, None, False)
        phase = self.windows.step(holes_pending, period, now, full)
        self.phase_now = phase
        self.schedule.next(batch_size, 0)  # a run in a bin the ceiling drafts ends here
        if phase == EXPLORE:
            # a drafting stream: its turnover settles, then every drafted batch counts; above the stream's
            # limit gated with the extend (phase explore: knob_contract.extend_skippable keeps it), settling
            drafts = self.windows.drafts(batch_size, ceiling)
            counted = self.windows.stream(drafts, period)
            return BatchPlan(drafts, not counted, phase, self.windows.cut_now)
        # cold: a steady gated stream, counted; warm: gated with the extend, counted apart
        return BatchPlan(False, phase == WARM, phase, self.windows.cut_now)
