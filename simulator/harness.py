"""Score a speculation policy on a load trace against a performance profile, in virtual time.

The policy sees only what a real server exposes (``control.policy.Observation``): mean running and queued
requests over the interval, a measured throughput with the profile's ``noise_cv`` and SGLang's gauge lag,
the accept length (1.0 when nothing was drafted), and the knob's read-back. Never the profile.

Effects the real server has that the harness reproduces:
- the running batch is ``min(concurrency, max_running_requests)``; the rest queues;
- the knob gates per batch: a batch drafts while it is <= the ceiling; a new ceiling takes effect
  ``knob_delay_s`` after the decision (the HTTP set, then the next decode step);
- SGLang refreshes its throughput / accept-length gauges once every ``gauge_log_interval_steps`` decode
  steps (40 by default), so a gauge describes the last finished window, not this instant; an idle server's
  throughput gauge decays to 0 after 30 s;
- the accept-length gauge averages over every decode step of its window, a 0-step (gated) batch counting
  1.0, as SGLang's metrics reporter does (accept tokens / forward count, whether or not a batch drafted);
- optionally, a share of intervals arrive stale (``stale_probability``), as when a scrape fails;
- the runner polls the gauges every tick and averages them over the decision interval; that average then
  carries noise with the profile's coefficient of variation (pessimistic on purpose: real polls of one
  gauge window are correlated, and a profile's ``noise_cv`` is its run-to-run spread);
- the gate explores (``explore_share``, the SGLang plugin's default 2 %): that share of the decode steps
  at every batch size runs the other mode than the ceiling says, so tokens, gauges and counters all
  include it;
- the engine counters (plugin/engine_counters.py) as the plugin publishes them, one rank: per
  power-of-two batch-size bin and mode, cumulative steps, tokens and step time, the step time with
  per-step noise of the profile's ``noise_cv`` (so an interval of n steps carries ``noise_cv / sqrt(n)``),
  and their ``extend`` block (gated steps by whether the draft extend ran, each kind at its own curve);
  each Observation carries a snapshot (``Observation.counters``); a bin the ceiling gates drafts in the
  exploring windows, and its drafting reaches the counters once a window (simulator/fluid_counters.py).

Efficiency = tokens under the policy / tokens under the oracle that, at every instant, knows the profile
and picks the better of spec-on and spec-off for the current concurrency. "Off" is what the knob can do: the
profile's ``spec_off`` curve (the knob at 0, gated batches verified one token at a time), never a server
launched without speculation; where a profile has that curve too (``output_tok_s.plain``), the result
reports ``plain_tokens`` (a plain server under the same trace) beside the oracle's, so a knob that cannot
match a plain server shows as ``plain_vs_oracle`` > 1. The oracle is charged the exploration share too
(its best mode still explores the other one), since no ceiling can avoid it; ``explore_cost`` is what
exploring costs that oracle (1 - its tokens / the tokens of an oracle that never explores).

Because that oracle explores, a server that never drafts (the knob at 0 locked: the draft's extend skipped,
nothing explored, the profile's cold ``spec_off`` curve) can beat it where drafting loses: by 0.5-1 % at
32-64 requests on the GLM-5 profile, by 10 % at 64 on the H200 triton one (its warm off). So the result
also carries ``never_draft_tokens`` and ``best_tokens`` (per tick the better of the oracle and never
drafting: the best achievable), and ``efficiency_vs_best`` against it.

A policy may set the share (``Decision.explore_share``: learn quiets it where its estimate is decisive): it
lands with the ceiling's delay and reads back (``Observation.explore_share``); the oracle keeps the configured
share. ``policy_explore_cost``: 1 - the policy's tokens / those of its ceilings with nothing explored.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from ..control.policy import Decision, Observation, Policy, make_policy
from ..plugin import explore, knob_contract
from .fluid_counters import FluidCounters
from .fluid_windows import FluidWindows
from .profile import Profile
from .traces import Trace

DEFAULT_DECISION_INTERVAL_S = 5.0
DEFAULT_TICK_S = 0.5
DEFAULT_KNOB_DELAY_S = 0.5
DEFAULT_GAUGE_LOG_INTERVAL_STEPS = 40  # SGLang's --decode-log-interval
GAUGE_IDLE_DECAY_S = 30.0
BASELINES = ("always-on", "always-off", "threshold:30", "sglang-default")


class HarnessError(ValueError):
    """Bad harness input; the message names it."""


@dataclass(frozen=True)
class HarnessConfig:
    decision_interval_s: float = DEFAULT_DECISION_INTERVAL_S
    tick_s: float = DEFAULT_TICK_S
    knob_delay_s: float = DEFAULT_KNOB_DELAY_S
    gauge_log_interval_steps: int = DEFAULT_GAUGE_LOG_INTERVAL_STEPS
    noise_cv: float | None = None  # None: the profile's
    initial_max_bs: int | None = None  # None: max_running_requests (a server launched with spec on)
    stale_probability: float = 0.0  # share of intervals whose metrics are stale (scrape failed, ...)
    explore_share: float = knob_contract.DEFAULT_EXPLORE_SHARE  # the gate's exploration (0 = none)
    # Open loop: whether a prefill skips the draft's pass where the plugin's rule allows it (plugin 0.4.10 on;
    # False: SPECTOWER_SKIP_DRAFT_PREFILL=0, or a run on an older plugin); the profile's draft_prefill_share
    # says what it saves.
    skip_draft_prefill: bool = True

    def validate(self) -> None:
        for key in ("decision_interval_s", "tick_s"):
            value = getattr(self, key)
            if not math.isfinite(value) or value <= 0:
                raise HarnessError(f"{key} must be > 0, got {value!r}")
        if self.decision_interval_s < self.tick_s:
            raise HarnessError("decision_interval_s must be >= tick_s")
        if not math.isfinite(self.knob_delay_s) or self.knob_delay_s < 0:
            raise HarnessError(f"knob_delay_s must be >= 0, got {self.knob_delay_s!r}")
        if self.gauge_log_interval_steps < 1:
            raise HarnessError("gauge_log_interval_steps must be >= 1")
        if self.noise_cv is not None and not 0 <= self.noise_cv <= 0.5:
            raise HarnessError(f"noise_cv must be between 0 and 0.5, got {self.noise_cv!r}")
        if self.initial_max_bs is not None and self.initial_max_bs < 0:
            raise HarnessError("initial_max_bs must be >= 0")
        if not 0 <= self.stale_probability < 1:
            raise HarnessError(f"stale_probability must be in [0, 1), got {self.stale_probability!r}")
        try:
            knob_contract.explore_share_of(self.explore_share, "explore_share")
        except knob_contract.ContractError as exc:
            raise HarnessError(str(exc)) from None

    @property
    def effective_explore_share(self) -> float:
        """The share the gate really explores: one batch in ``round(1 / explore_share)`` per bin."""
        return effective_share(self.explore_share)


def effective_share(share: float) -> float:
    """The share the gate really explores: one batch in ``round(1 / share)`` per bin."""
    period = knob_contract.explore_period(share)
    return 1.0 / period if period else 0.0


@dataclass
class RunResult:
    policy: str
    profile: str
    trace: str
    seed: int
    duration_s: float
    tokens: float
    oracle_tokens: float
    plain_tokens: float  # a server without speculation (the profile's plain curve) under the same trace
    flips: int  # knob changes that took effect
    decisions: int
    spec_on_fraction: float  # share of busy time spent drafting
    final_max_bs: int
    explore_share: float = 0.0  # the share the gate explored (effective: 1 / round(1 / configured))
    pure_oracle_tokens: float = 0.0  # the oracle without exploration
    never_draft_tokens: float = 0.0  # the knob at 0 locked: extend skipped, no exploration (cold spec_off)
    best_tokens: float = 0.0  # per tick the better of the oracle and never drafting: the best achievable
    unexplored_tokens: float = 0.0  # the policy's ceilings with nothing explored (extend skipped when gated)
    timeline: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def efficiency(self) -> float:
        return self.tokens / self.oracle_tokens if self.oracle_tokens > 0 else 1.0

    @property
    def efficiency_vs_best(self) -> float:
        """Tokens / the best achievable (per tick the better of the oracle and a server that never drafts)."""
        return self.tokens / self.best_tokens if self.best_tokens > 0 else 1.0

    @property
    def explore_cost(self) -> float:
        """What exploring costs the oracle: 1 - its tokens / an oracle's that never explores."""
        pure = self.pure_oracle_tokens
        return 1.0 - self.oracle_tokens / pure if pure > 0 else 0.0

    @property
    def policy_explore_cost(self) -> float:
        """What exploring cost the policy's server: 1 - its tokens / the same ceilings' with none explored."""
        bare = self.unexplored_tokens
        return 1.0 - self.tokens / bare if bare > 0 else 0.0

    @property
    def changes_per_hour(self) -> float:
        return self.flips * 3600.0 / self.duration_s if self.duration_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "profile": self.profile,
            "trace": self.trace,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "efficiency": round(self.efficiency, 6),
            "tokens": round(self.tokens, 1),
            "oracle_tokens": round(self.oracle_tokens, 1),
            "plain_tokens": round(self.plain_tokens, 1),
            "never_draft_tokens": round(self.never_draft_tokens, 1),
            "best_tokens": round(self.best_tokens, 1),
            "efficiency_vs_best": round(self.efficiency_vs_best, 6),
            "flips": self.flips,
            "changes_per_hour": round(self.changes_per_hour, 3),
            "decisions": self.decisions,
            "spec_on_fraction": round(self.spec_on_fraction, 4),
            "final_max_bs": self.final_max_bs,
            "explore_share": self.explore_share,
            "explore_cost": round(self.explore_cost, 6),
            "policy_explore_cost": round(self.policy_explore_cost, 6),
        }


@dataclass(frozen=True)
class _Mode:
    """What one tick at one batch size does when the ceiling says draft (or gate), exploration included."""

    rate: float  # aggregate output tok/s
    accept: float  # tokens per request per decode step (the accept-length gauge)
    steps_s: float  # decode steps per second
    drafted_steps_s: float  # of them drafted
    gated_steps_s: float
    drafted_time: float  # share of the time spent in drafted steps
    drafted_tok_share: float  # share of the tokens made by drafted steps


def _mode(batch: int, on: float, off: float, accept: float, drafting: bool, share: float) -> _Mode:
    """One decode step drafted makes ``batch * accept`` tokens in ``batch * accept / on`` seconds; gated,
    ``batch`` tokens in ``batch / off``. A share ``share`` of the steps runs the other mode."""
    if batch <= 0:
        return _Mode(0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    tok_d, tok_g = batch * accept, float(batch)
    t_d, t_g = tok_d / on, tok_g / off
    p_d = 1.0 - share if drafting else share  # share of steps drafted
    p_g = 1.0 - p_d
    step_time = p_d * t_d + p_g * t_g
    tokens = p_d * tok_d + p_g * tok_g
    steps_s = 1.0 / step_time
    return _Mode(rate=tokens / step_time, accept=tokens / (batch * 1.0), steps_s=steps_s,
                 drafted_steps_s=p_d * steps_s, gated_steps_s=p_g * steps_s,
                 drafted_time=p_d * t_d / step_time, drafted_tok_share=p_d * tok_d / tokens)


@dataclass(frozen=True)
class _Tables:
    """The profile at every integer batch size 0..max_running_requests (the harness never asks more), for
    the ceiling saying draft (``on``) or gate (``off``), with the exploration share."""

    on: tuple[_Mode, ...]
    # Gated while the draft's KV extend runs (a ceiling > 0, or exploring): the profile's spec_off_warm curve
    # where it has one, else spec_off.
    off: tuple[_Mode, ...]
    # The knob at 0 with no exploration: the plugin skips the extend (spec_off, as a sweep measures it).
    off_cold: tuple[_Mode, ...]
    # Gated by the ceiling while exploring: windows (plugin/explore.py) keep the extend in a few % of them.
    off_windowed: tuple[_Mode, ...]
    # ...at a batch above the exploring stream's limit (explore.stream_limit, with the doublings that
    # simulator/fluid_windows.py keeps): the exploring part runs it gated with the extend, as the warm part
    # does, so nothing drafts and both parts keep the extend.
    off_windowed_over: tuple[_Mode, ...]
    pure_best: tuple[float, ...]  # the better mode's rate without exploration (off: the extend skipped)
    never_draft: tuple[float, ...]  # the knob at 0 locked: the extend skipped, nothing explored
    plain: tuple[float, ...]
    # the share of the gated steps that keep the extend: off_windowed's per batch, off_windowed_over's; and
    # the warm curve they run at (never_draft is the cold one), for the counters' extend block
    kept_windowed: tuple[float, ...] = ()
    kept_over: float = 0.0
    warm: tuple[float, ...] = ()
    window_batches: int = 0  # a window's gated batches at this share (explore.window_batches)

    @classmethod
    def of(cls, profile: Profile, share: float) -> _Tables:
        n = profile.max_running_requests  # bounded by profile.MAX_RUNNING_REQUESTS
        on_rate = [profile.output_tok_s(c, True) for c in range(n + 1)]
        off_rate = [profile.output_tok_s(c, False) for c in range(n + 1)]
        warm_rate = [profile.output_tok_s(c, False, draft_warm=True) for c in range(n + 1)]
        accept = [profile.accept_length_at(c) if c else 1.0 for c in range(n + 1)]
        if not profile.speculative:  # no drafting, no gate: nothing to explore
            share = 0.0
        period = knob_contract.explore_period(share)
        # the batches the ceiling gates, windowed: a share drafts (the exploring part), a share keeps the
        # extend (the warm part), the rest is cold; a gated step's time: the warm and cold ones in proportion
        in_window = explore.window_explore_share(period=period) if period else 0.0
        kept = explore.kept_extend_share(period=period) / (1.0 - in_window)
        # the cold part keeps time: where a drafted step costs k gated ones, the window's parts are a smaller
        # share of the batches (explore.timed_share), the same share of the time
        cost = [a * o / d if d > 0 and o > 0 else 1.0
                for a, o, d in zip(accept, off_rate, on_rate, strict=True)]  # fmt: skip
        in_window_at = [explore.timed_share(in_window, k) for k in cost]
        kept_at = [explore.timed_share(kept, k) for k in cost]
        windowed_rate = [_kept_mix(k, w, o) for k, w, o in zip(kept_at, warm_rate, off_rate, strict=True)]
        kept_over = kept * (1.0 - in_window) + in_window  # no drafting: the parts' batches are gated steps
        over_rate = [_kept_mix(kept_over, w, o) for w, o in zip(warm_rate, off_rate, strict=True)]
        return cls(
            on=tuple(_mode(c, on_rate[c], warm_rate[c], accept[c], True, share) for c in range(n + 1)),
            off=tuple(_mode(c, on_rate[c], warm_rate[c], accept[c], False, share) for c in range(n + 1)),
            off_cold=tuple(_mode(c, on_rate[c], off_rate[c], accept[c], False, share) for c in range(n + 1)),
            off_windowed=tuple(_mode(c, on_rate[c], windowed_rate[c], accept[c], False, in_window_at[c])
                               for c in range(n + 1)),
            off_windowed_over=tuple(_mode(c, on_rate[c], over_rate[c], accept[c], False, 0.0)
                                    for c in range(n + 1)),
            pure_best=tuple(max(a, b) for a, b in zip(on_rate, off_rate, strict=True)),
            never_draft=tuple(off_rate),
            plain=tuple(profile.plain_output_tok_s(c) for c in range(n + 1)),
            kept_windowed=tuple(kept_at), kept_over=kept_over, warm=tuple(warm_rate),
            window_batches=explore.window_batches(period=period) if period else 0,
        )


    def gated_by_ceiling(self, period: int) -> tuple[_Mode, ...]:
        """A batch the ceiling gates, no lock: the extend skipped (nothing explores), or kept in windows."""
        if knob_contract.extend_skippable(True, period, knob_contract.OWNER_FREE):
            return self.off_cold
        return self.off_windowed if explore.windowed(True, period) else self.off

    def gated_mode(self, gated: tuple[_Mode, ...], batch: int, windows: FluidWindows, ceiling: int
                   ) -> tuple[_Mode, float]:  # fmt: skip
        """A batch of ``batch`` the ceiling gates (``gated``: ``gated_by_ceiling``'s table): in windows,
        above the exploring stream's limit (plugin/explore.py, with its doublings after parts above it:
        simulator/fluid_windows.py) nothing of it drafts. Counts the batches into ``windows``. With the
        share of its gated steps that keep the draft extend (the cold table's: none)."""
        if gated is not self.off_windowed:
            return gated[batch], 0.0 if gated is self.off_cold else 1.0
        within = windows.drafts(batch, ceiling)
        mode = gated[batch] if within else self.off_windowed_over[batch]
        windows.add(mode.steps_s * windows.tick_s, batch, ceiling, self.window_batches)
        return mode, self.kept_windowed[batch] if within else self.kept_over

    def kept_time(self, kept: float, batch: int) -> float:
        """The kept steps' share of the gated time where a share ``kept`` of the gated steps at ``batch``
        keep the extend (``_kept_mix``'s split: each kind at its own curve, warm and cold)."""
        warm, cold = self.warm[batch], self.never_draft[batch]
        if kept <= 0.0 or kept >= 1.0 or warm <= 0 or cold <= 0:
            return kept
        return kept / warm * _kept_mix(kept, warm, cold)  # the kept steps' time per token of the mix's


def _kept_mix(kept: float, warm: float, cold: float) -> float:
    """The rate of gated steps of which a share ``kept`` run the draft extend (``warm`` tok/s) and the rest
    skip it (``cold``): each step's time in proportion, so the harmonic mix."""
    return 1.0 / (kept / warm + (1.0 - kept) / cold) if warm > 0 and cold > 0 else cold


class _TablesByShare:
    """The tables (and the batch a ceiling gates) at each exploration share set, ``_Tables.of`` once each."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._cache: dict[float, tuple[_Tables, tuple[_Mode, ...]]] = {}

    def at(self, share: float) -> tuple[_Tables, tuple[_Mode, ...]]:
        """(tables, gated by the ceiling) at ``share`` as set (the gate explores its effective share)."""
        found = self._cache.get(share)
        if found is None:
            effective = effective_share(share) if self.profile.speculative else 0.0
            tables = _Tables.of(self.profile, effective)
            gated = tables.gated_by_ceiling(knob_contract.explore_period(effective))
            found = self._cache[share] = (tables, gated)
        return found


@dataclass(slots=True)
class _Totals:
    """Tokens over the run: under the policy, and what each reference (oracle, never drafting, the best of
    both, a plain server) would have made under the same load."""

    tokens: float = 0.0
    oracle: float = 0.0
    pure_oracle: float = 0.0
    plain: float = 0.0
    never_draft: float = 0.0
    best: float = 0.0
    unexplored: float = 0.0
    busy_ticks: int = 0
    drafting_time: float = 0.0

    def add(self, tables: _Tables, oracle_off: tuple[_Mode, ...], running: int, mode: _Mode,
            tick: float, bare: _Mode) -> None:
        self.tokens += mode.rate * tick
        self.unexplored += bare.rate * tick
        oracle_rate = max(tables.on[running].rate, oracle_off[running].rate)
        self.oracle += oracle_rate * tick
        self.never_draft += tables.never_draft[running] * tick
        self.best += max(oracle_rate, tables.never_draft[running]) * tick
        self.pure_oracle += tables.pure_best[running] * tick
        self.plain += tables.plain[running] * tick
        if running:
            self.busy_ticks += 1
            self.drafting_time += mode.drafted_time


@dataclass(slots=True)
class _Gauges:
    """SGLang's throughput and accept-length gauges: the last finished window of ``log_interval_steps``
    decode steps; the throughput decays to 0 after ``GAUGE_IDLE_DECAY_S`` idle."""

    log_interval_steps: int
    tok_s: float | None = None
    accept: float | None = None
    _steps: float = 0.0
    _tokens: float = 0.0
    _time: float = 0.0
    _accept_steps: float = 0.0
    _idle_s: float = 0.0

    def busy(self, mode: _Mode, tick: float) -> None:
        self._idle_s = 0.0
        steps = mode.steps_s * tick
        self._steps += steps
        self._tokens += mode.rate * tick
        self._time += tick
        self._accept_steps += mode.accept * steps
        if self._steps >= self.log_interval_steps:
            self.tok_s = self._tokens / self._time
            self.accept = self._accept_steps / self._steps
            self._steps = self._tokens = self._time = self._accept_steps = 0.0

    def idle(self, tick: float) -> None:
        self._idle_s += tick
        if self._idle_s >= GAUGE_IDLE_DECAY_S and self.tok_s is not None:
            self.tok_s = 0.0


@dataclass(slots=True)
class _Interval:
    """What a runner polling every tick averages over one decision interval."""

    running: float = 0.0
    queued: float = 0.0
    gauge_sum: float = 0.0
    accept_sum: float = 0.0
    n_gauge: int = 0
    n_accept: int = 0

    def add(self, running: int, queued: int, gauges: _Gauges) -> None:
        self.running += running
        self.queued += queued
        if gauges.tok_s is not None:
            self.gauge_sum += gauges.tok_s
            self.n_gauge += 1
        if gauges.accept is not None:
            self.accept_sum += gauges.accept
            self.n_accept += 1

    def noisy_gauges(self, noise_cv: float, rng: random.Random) -> tuple[float | None, float | None]:
        """The interval's mean throughput and accept length with the profile's noise (None: no gauge yet)."""
        tok_s = acc = None
        if self.n_gauge:
            tok_s = max(0.0, self.gauge_sum / self.n_gauge * (1.0 + noise_cv * rng.gauss(0.0, 1.0)))
        if self.n_accept:
            acc = max(1.0, self.accept_sum / self.n_accept * (1.0 + noise_cv / 3 * rng.gauss(0.0, 1.0)))
        return tok_s, acc


@dataclass
class _Runner:
    """What the runner hands the policy at each decision: the interval's gauges with noise, the counters,
    and now and then (``stale_probability``) nothing fresh, as when a scrape failed."""

    max_running_requests: int
    speculative: bool
    noise_cv: float
    stale_probability: float
    ticks_per_decision: int
    counters: FluidCounters
    rng: random.Random
    stale_rng: random.Random  # its own stream: staleness does not reshuffle the noise

    def observe(self, interval: _Interval, ts: float, knob: int, share: float) -> Observation:
        tok_s, acc = interval.noisy_gauges(self.noise_cv, self.rng)
        stale = self.stale_probability > 0 and self.stale_rng.random() < self.stale_probability
        if stale:  # what a runner hands over when the scrape failed: no fresh numbers
            tok_s = acc = None
        n = self.ticks_per_decision
        return Observation(
            ts=ts,
            num_running_reqs=interval.running / n,
            num_queue_reqs=interval.queued / n,
            output_tok_s=tok_s,
            accept_length=acc,
            spec_max_bs=knob,
            max_running_requests=self.max_running_requests,
            stale=stale,
            counters=None if stale or not self.speculative else self.counters.snapshot(),
            explore_share=None if stale else share,
        )


@dataclass(slots=True)
class _Knob:
    """The ceiling and exploration share the server applies: a policy's set lands ``knob_delay_s`` after its
    decision."""

    value: int
    share: float  # as set (the server's read-back); the gate explores its effective share
    flips: int = 0
    # (tick at which it applies, ceiling, share; None: unchanged)
    pending: list[tuple[int, int | None, float | None]] = field(default_factory=list)

    def request(self, at_tick: int, decision: Decision, policy: str) -> None:
        if decision.max_bs is not None and decision.max_bs < 0:
            raise HarnessError(f"policy {policy} asked for a negative ceiling {decision.max_bs}")
        share = decision.explore_share
        if share is not None and not 0 <= share <= knob_contract.MAX_EXPLORE_SHARE:
            raise HarnessError(f"policy {policy} asked for an exploration share {share} outside 0..0.2")
        if decision.max_bs is not None or share is not None:
            self.pending.append((at_tick, None if decision.max_bs is None else int(decision.max_bs), share))

    def apply_due(self, tick_index: int) -> None:
        while self.pending and self.pending[0][0] <= tick_index:
            _, value, share = self.pending.pop(0)
            self.share = self.share if share is None else share
            if value is not None and value != self.value:
                self.flips += 1
                self.value = value


def simulate(profile: Profile, trace: Trace, policy: Policy, duration_s: float | None = None, seed: int = 0,
             config: HarnessConfig | None = None, keep_timeline: bool = False) -> RunResult:
    """Replay ``trace`` for ``duration_s`` virtual seconds (default: the trace's length) under ``policy``."""
    cfg = config or HarnessConfig()
    cfg.validate()
    duration = trace.duration_s if duration_s is None else duration_s
    if not math.isfinite(duration) or duration <= 0:
        raise HarnessError(f"duration must be > 0 seconds, got {duration_s!r}")
    mrr = profile.max_running_requests
    noise_cv = profile.noise_cv if cfg.noise_cv is None else cfg.noise_cv
    tick = cfg.tick_s
    n_ticks = round(duration / tick)
    ticks_per_decision = max(1, round(cfg.decision_interval_s / tick))
    delay_ticks = math.ceil(cfg.knob_delay_s / tick - 1e-9)
    # The counters' noise has its own stream too: the gauges' noise stays what it was before counters.
    counters = FluidCounters(mrr, noise_cv, random.Random(f"counters:{seed}"),
                             random.Random(f"extend:{seed}"))  # fmt: skip
    runner = _Runner(mrr, profile.speculative, noise_cv, cfg.stale_probability, ticks_per_decision, counters,
                     random.Random(f"harness:{seed}"), random.Random(f"stale:{seed}"))  # fmt: skip
    knob = _Knob(mrr if cfg.initial_max_bs is None else cfg.initial_max_bs, cfg.explore_share)
    totals, gauges, interval = _Totals(), _Gauges(cfg.gauge_log_interval_steps), _Interval()
    timeline: list[dict[str, Any]] = []
    # gated by the ceiling: the extend skipped where nothing explores (the plugin's rule, once), else outside
    # the exploration windows; the oracle's off likewise, at the configured share whatever the policy sets
    by_share = _TablesByShare(profile)
    oracle, oracle_off = by_share.at(cfg.explore_share)
    bare, bare_off = by_share.at(0.0)  # the same ceilings with nothing explored
    windows = FluidWindows(tick_s=tick)  # the stream limit's doublings (plugin 0.4.3)
    for i in range(n_ticks):
        knob.apply_due(i)
        tables, gated_off = by_share.at(knob.share)
        conc = max(0, round(trace.concurrency_at(i * tick)))
        running = min(conc, mrr)
        drafting = running > 0 and running <= knob.value and profile.speculative
        # a drafting bin's gated steps (explored) keep the extend; a gated one's as its table says
        windows_before = windows.windows
        mode, kept = ((tables.on[running], 1.0) if drafting
                      else tables.gated_mode(gated_off, running, windows, knob.value))  # fmt: skip
        totals.add(oracle, oracle_off, running, mode, tick, (bare.on if drafting else bare_off)[running])
        if running:
            # a gated bin's explored drafting reaches the counters once a window, as the plugin's does
            counters.add(running, mode, tick, hold_drafted=not drafting and gated_off is tables.off_windowed)
            if windows.windows != windows_before:  # a window closed this tick
                counters.release_held()
            if profile.speculative:  # without speculation no step has an extend to run or skip
                counters.add_extend(running, mode, tick, kept, tables.kept_time(kept, running))
            gauges.busy(mode, tick)
        else:
            gauges.idle(tick)
        interval.add(running, conc - running, gauges)
        if (i + 1) % ticks_per_decision:
            continue
        obs = runner.observe(interval, (i + 1) * tick, knob.value, knob.share)
        interval = _Interval()
        decision = policy.decide(obs)
        knob.request(i + 1 + delay_ticks, decision, policy.name)
        if keep_timeline:
            timeline.append({"t": obs.ts, "running": obs.num_running_reqs, "queued": obs.num_queue_reqs,
                             "tok_s": obs.output_tok_s, "accept": obs.accept_length, "knob": knob.value,
                             "set": decision.max_bs, "share": knob.share,
                             "reason": decision.reason})  # fmt: skip
    return RunResult(
        policy=policy.name, profile=profile.name, trace=trace.name, seed=seed, duration_s=n_ticks * tick,
        tokens=totals.tokens, oracle_tokens=totals.oracle, plain_tokens=totals.plain, flips=knob.flips,
        decisions=n_ticks // ticks_per_decision,
        spec_on_fraction=totals.drafting_time / totals.busy_ticks if totals.busy_ticks else 0.0,
        final_max_bs=knob.value, explore_share=cfg.effective_explore_share if profile.speculative else 0.0,
        pure_oracle_tokens=totals.pure_oracle, never_draft_tokens=totals.never_draft, best_tokens=totals.best,
        unexplored_tokens=totals.unexplored, timeline=timeline,
    )  # fmt: skip


def evaluate(profile: Profile, trace: Trace, policy_spec: str, duration_s: float | None = None, seed: int = 0,
             baselines: tuple[str, ...] = BASELINES, config: HarnessConfig | None = None,
             policy_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The policy's result plus each baseline's efficiency under the same trace, seed and noise."""
    mrr = profile.max_running_requests
    policy = make_policy(policy_spec, mrr, **(policy_options or {}))
    result = simulate(profile, trace, policy, duration_s, seed, config)
    out = result.to_json()
    out["crossover"] = profile.crossover()
    out["spec_pays_at_1"] = profile.speedup(profile.concurrency[0]) >= 1.0  # tells a None crossover apart
    out["has_plain_curve"] = profile.plain_tok_s is not None
    oracle = result.oracle_tokens
    out["plain_vs_oracle"] = round(result.plain_tokens / oracle, 6) if oracle else None
    out["baselines"] = {}
    for spec in baselines:
        base = result if spec == policy_spec else simulate(profile, trace, make_policy(spec, mrr), duration_s,
                                                           seed, config)
        out["baselines"][spec] = {"efficiency": round(base.efficiency, 6), "flips": base.flips,
                                  "efficiency_vs_best": round(base.efficiency_vs_best, 6),
                                  "changes_per_hour": round(base.changes_per_hour, 3)}
    return out
