"""Score a speculation policy on a request trace open-loop, in virtual time (`sim evaluate --trace X.csv`).

The closed-loop harness (simulator/harness.py) holds a concurrency; here requests arrive at their trace
times (storage/request_traces.py's ``schedule``) whatever the server does, as in production. Each reaches
the scheduler ``first_token_latency_s`` after its arrival (what a request spends outside the GPU's work),
needs its prefill (its ``ContextTokens``, cut to the profile's ``context_length``, at ``prefill_tok_s``
seconds of the whole engine, faster where the plugin skips the draft's pass, in batches of what waits when
one begins, up to PREFILL_BATCH_TOKENS: open_loop_queue.py; the first token comes at its batch's end, half
a decode step later where one was in flight) and then
``GeneratedTokens - 1`` decode tokens. At most ``max_running_requests`` run; the rest wait in arrival
order. Time moves in ticks of ``OPEN_LOOP_TICK_S``, each split where a request arrives; in each part,
prefill goes first (SGLang schedules a waiting prefill before the next decode step) and the rest decodes
the running batch at the profile's rate for that batch size and mode (``harness._Tables``), each step
longer by what its requests' context costs (``open_loop_cost.step_extras``), shared equally among the
batch. The mode is the plugin's: its gate with hysteresis, the drain of requests whose draft KV has holes,
and the exploration windows of the batches the ceiling gates, run as the plugin runs them
(``open_loop_cost.WindowStreams``); the oracle has none of these. A slower mode grows the queue, and TTFT
and end-to-end latency with it. KV-cache capacity is not modelled (a batch is bounded by the request
count). Latencies count from the arrival itself. ``benchmarks/replay_fidelity.py`` compares all this with
a measured replay.

The policy sees what ``simulate`` gives it (``control.policy.Observation``: mean running and queued
requests, the throughput and accept-length gauges with the profile's noise, the knob, the engine
counters), by the same rules (``_Gauges`` mirrors ``simulate``'s). Every policy serves the same tokens once
the queue drains, so an open-loop run is scored by goodput (requests/s within the SLO) and latency; the
run continues after the last arrival until the queue drains (at most ``drain_limit_s``; what is left then
counts as failed).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..control.policy import Observation, Policy, make_policy
from ..plugin import knob_contract
from ..plugin.draft_holes import DEFAULT_DRAIN_MAX_STEPS
from ..plugin.explore import EXPLORE, WARM
from ..plugin.gate import gate_margin
from ..storage.request_traces import (
    DEFAULT_SLO,
    Arrival,
    RequestOutcome,
    RequestTrace,
    Slo,
    open_loop_figures,
    schedule,
)
from .fluid_counters import FluidCounters
from .harness import (
    BASELINES,
    GAUGE_IDLE_DECAY_S,
    HarnessConfig,
    HarnessError,
    _Knob,
    _Mode,
    _Tables,
    _TablesByShare,
    effective_share,
)
from .open_loop_cost import WindowStreams, count_stall, cut_prompt, step_extras, with_context
from .open_loop_queue import Queue, Request
from .profile import Profile

OPEN_LOOP_TICK_S = 0.05  # TTFT is scored against seconds: a tick is a small part of one
MIN_DRAIN_LIMIT_S = 600.0
ORACLE = "oracle"  # per tick, the faster of the two modes at the batch size now (a reference, not a policy)


class _Gauges:
    """SGLang's throughput and accept-length gauges and the runner's interval averages, by ``simulate``'s
    rules: a gauge publishes once per ``log_steps`` decode steps and an idle one decays to 0 after
    ``GAUGE_IDLE_DECAY_S``; the runner averages its polls over the decision interval and adds the noise."""

    def __init__(self, log_steps: int) -> None:
        self.log_steps = log_steps
        self.win = [0.0, 0.0, 0.0, 0.0]  # steps, tokens, seconds, accept x steps
        self.tok_s: float | None = None
        self.accept: float | None = None
        self.idle_s = 0.0
        self.sums = [0.0, 0.0, 0.0, 0.0]  # running, queued, gauge tok/s, gauge accept
        self.polls = [0, 0]  # tok/s polls, accept polls

    def busy(self, mode: _Mode, seconds: float, tick: float) -> None:
        self.idle_s = 0.0
        steps = mode.steps_s * seconds
        w = self.win
        w[0] += steps
        w[1] += mode.rate * seconds
        w[2] += tick
        w[3] += mode.accept * steps
        if w[0] >= self.log_steps:
            self.tok_s, self.accept = w[1] / w[2], w[3] / w[0]
            self.win = [0.0, 0.0, 0.0, 0.0]

    def idle(self, tick: float) -> None:
        self.idle_s += tick
        if self.idle_s >= GAUGE_IDLE_DECAY_S and self.tok_s is not None:
            self.tok_s = 0.0

    def poll(self, running: int, queued: int) -> None:
        self.sums[0] += running
        self.sums[1] += queued
        if self.tok_s is not None:
            self.sums[2] += self.tok_s
            self.polls[0] += 1
        if self.accept is not None:
            self.sums[3] += self.accept
            self.polls[1] += 1

    def interval(
        self, n: int, noise_cv: float, rng: random.Random
    ) -> tuple[float, float, float | None, float | None]:
        """(mean running, mean queued, tok/s, accept length) over the last ``n`` polls; starts anew."""
        tok_s = acc = None
        if self.polls[0]:
            tok_s = max(0.0, self.sums[2] / self.polls[0] * (1.0 + noise_cv * rng.gauss(0.0, 1.0)))
        if self.polls[1]:
            acc = max(1.0, self.sums[3] / self.polls[1] * (1.0 + noise_cv / 3 * rng.gauss(0.0, 1.0)))
        out = (self.sums[0] / n, self.sums[1] / n, tok_s, acc)
        self.sums, self.polls = [0.0, 0.0, 0.0, 0.0], [0, 0]
        return out


@dataclass
class OpenLoopResult:
    policy: str
    profile: str
    trace: str
    seed: int
    slo: Slo
    duration_s: float  # virtual time until the queue drained (or the drain limit)
    tokens: float
    flips: int
    decisions: int
    spec_on_fraction: float
    final_max_bs: int
    explore_share: float
    undrained: int  # requests still queued or running at the drain limit (scored as failed)
    outcomes: list[RequestOutcome] = field(default_factory=list, repr=False)
    peak_in_flight: int = 0  # the most requests queued or running at a tick's end (bench replay's figure)
    counters: dict[str, Any] = field(default_factory=dict, repr=False)  # the engine counters at the end
    prefill_batches: int = 0
    prefills_skipped: int = 0  # of them, the ones that skipped the draft's pass (profile.draft_prefill_share)

    @property
    def prefills_skipped_share(self) -> float:
        return self.prefills_skipped / self.prefill_batches if self.prefill_batches else 0.0

    def figures(self) -> dict[str, Any]:
        last = self.duration_s
        return open_loop_figures(self.outcomes, last, self.slo)

    def to_json(self) -> dict[str, Any]:
        figures = self.figures()
        return {
            "policy": self.policy,
            "profile": self.profile,
            "trace": self.trace,
            "seed": self.seed,
            "loop": "open",
            "duration_s": self.duration_s,
            "tokens": round(self.tokens, 1),
            "flips": self.flips,
            "changes_per_hour": round(self.flips * 3600.0 / max(self.duration_s, 1e-9), 3),
            "decisions": self.decisions,
            "spec_on_fraction": round(self.spec_on_fraction, 4),
            "final_max_bs": self.final_max_bs,
            "explore_share": self.explore_share,
            "undrained": self.undrained,
            "peak_in_flight": self.peak_in_flight,
            "prefill_batches": self.prefill_batches,
            "prefills_skipped": self.prefills_skipped,
            **figures,
        }


def _tick_mode(
    tables: _Tables,
    batch: int,
    knob: int,
    gated: tuple[_Mode, ...],
    speculative: bool,
    oracle_off: tuple[_Mode, ...] | None,
    extras: tuple[float, float] = (0.0, 0.0),
) -> tuple[_Mode, bool]:
    """The decode mode of a batch of ``batch`` under ceiling ``knob`` (the plugin's rule, as ``simulate``
    applies it; ``gated``: a batch the ceiling gates), or with ``oracle_off`` the faster of drafting and that
    gated table; and whether it drafts. ``extras``: what the batch's context adds to a drafted and a gated
    step (open_loop_cost.step_extras), seconds."""
    if oracle_off is not None:
        on, off = with_context(tables.on[batch], *extras), with_context(oracle_off[batch], *extras)
        drafting = speculative and on.rate >= off.rate
        return (on if drafting else off), drafting
    drafting = batch > 0 and batch <= knob and speculative
    if drafting:
        return with_context(tables.on[batch], *extras), True
    return with_context(gated[batch], *extras), False


class _Server:
    """The open-loop server in virtual time: its queue, the knob's gate (or the oracle's choice), and what
    it reports (the gauges and the engine counters)."""

    def __init__(self, profile: Profile, cfg: HarnessConfig, oracle: bool, seed: int, tick_s: float,
                 window_start: int = 0, keep_extend_within: float = 0.0) -> None:  # fmt: skip
        mrr = profile.max_running_requests
        # a what-if, not the plugin's rule (benchmarks/drain_whatif.py): a batch the ceiling gates at up to
        # this many times the ceiling keeps the draft extend, so a burst leaves no holed requests to drain
        self.keep_extend_within = keep_extend_within
        self.profile = profile
        self.share = cfg.effective_explore_share if profile.speculative else 0.0
        # the tables at the share the server runs now (a policy may set it: Decision.explore_share)
        self.by_share = _TablesByShare(profile)
        self.oracle_off: tuple[_Mode, ...] | None = None
        if oracle:  # the closed-loop oracle's off: what a batch the ceiling gates serves (harness.py)
            self.oracle_off = self.by_share.at(cfg.explore_share)[1]
        self.noise_cv = profile.noise_cv if cfg.noise_cv is None else cfg.noise_cv
        self.counters = FluidCounters(mrr, self.noise_cv, random.Random(f"counters:{seed}"),
                                      random.Random(f"extend:{seed}"))  # fmt: skip
        self.gauges = _Gauges(cfg.gauge_log_interval_steps)
        self.queue = Queue(mrr, profile)
        # whether a prefill may skip the draft's pass (the config, a speculative server, not the oracle), and
        # the last decode batch's window part (the plugin's rule reads it)
        self.skip_draft_prefill = cfg.skip_draft_prefill and profile.speculative and not oracle
        self.last_window_phase: str | None = None
        start = mrr if cfg.initial_max_bs is None else cfg.initial_max_bs
        self.knob = _Knob(start, cfg.explore_share)
        self.delay_ticks = math.ceil(cfg.knob_delay_s / tick_s - 1e-9)
        self.busy_s = 0.0  # seconds a batch decoded
        self.peak_in_flight = 0
        self.gate_ceiling, self.gate_closed = self.knob.value, False  # plugin/gate.py's hysteresis
        self.drain_steps = 0.0  # steps the current drain has held (plugin/gated_decode.py)
        self.stall_s = 0.0  # prefill seconds with no decode step in flight, for the next step's time
        self.step_s = 0.0  # the last decode step's length
        # the windows of the batches the ceiling gates (plugin/explore.py)
        self.streams = WindowStreams(window_start)
        # the segment's batches: the exploration share's period where they run in a window (0: not in one);
        # whether they count in the decode counters
        self.window_period, self.counted = 0, True
        # the share of the segment's gated steps that keep the draft extend (None: not known, the oracle)
        self.extend_kept: float | None = None
        self.drafting_s = 0.0  # of them, in drafted steps

    def tick(self, now: float, tick_s: float, arrivals: deque[Request]) -> None:
        """The tick from ``now``, split where a request arrives (it joins the queue then, so its prefill
        starts when it comes, not at the next tick); the gauges are polled once, at its end."""
        t, end = now, now + tick_s
        while True:
            while arrivals and arrivals[0].ready_t <= t:
                self.queue.waiting.append(arrivals.popleft())
            stop = min(end, arrivals[0].ready_t) if arrivals else end
            self._segment(t, stop - t)
            if stop >= end:
                break
            t = stop
        self.gauges.poll(self.queue.running, len(self.queue.waiting))
        self.peak_in_flight = max(self.peak_in_flight, self.queue.running + len(self.queue.waiting))

    def _segment(self, now: float, seconds: float) -> None:
        """Admit, prefill, then decode for what is left; the gauges and counters follow."""
        queue, gauges = self.queue, self.gauges
        queue.admit()
        in_flight = len(queue.decoding)  # the batch whose step a prefill runs beside (overlap scheduling)
        tables, gated = self.by_share.at(self.knob.share)
        # half the decode step in flight (the last one's length), on average, before a prefill runs
        wait = 0.5 * self.step_s if in_flight else 0.0
        left = queue.prefill(now, seconds, wait, self._prefill_skips if self.skip_draft_prefill else None)
        batch = len(queue.decoding)
        if batch:
            extras = step_extras(self.profile, batch, queue.context)
            mode = self._decode_mode(tables, gated, batch, extras, left)
            self.step_s = 1.0 / mode.steps_s if mode.steps_s > 0 else 0.0
            # a prefill with no step in flight (an idle server) lands in the step launched after it; a
            # window's warm part and turnover are settling: in no bin, but in the extend block (steady gated)
            kept, stall = self.extend_kept, seconds - left + self.stall_s
            count_stall(self.counters, in_flight or batch, mode, stall, kept, self.counted)
            if self.counted:
                self.counters.add(batch, mode, left)
            if kept is not None:
                self.counters.add_extend(batch, mode, left, kept)
            self.stall_s = 0.0
            queue.decode(now + seconds - left, left, mode.rate)
            steps, holes = mode.steps_s * left, lambda: queue.holed > 0
            # requests still waiting once admitted: the server is full (max_running_requests), a window yields
            full = bool(queue.waiting)
            if self.window_period and self.streams.advance(steps, self.window_period, holes, now, batch,
                                                           self.knob.value, full):  # fmt: skip
                queue.forget_holes()
            gauges.busy(mode, left, seconds)
            self.busy_s += left
            self.drafting_s += mode.drafted_time * left
        elif queue.running:
            gauges.busy(tables.off[0], 0.0, seconds)  # prefilling only: busy, no decode step
            self.stall_s += seconds - left
        else:
            gauges.idle(seconds)

    def _decode_mode(self, tables: _Tables, gated: tuple[_Mode, ...], batch: int, extras: tuple[float, float],
                     seconds: float) -> _Mode:  # fmt: skip
        """The plugin's gate (plugin/gate.py, its hysteresis: it closes above the ceiling and reopens at the
        ceiling less its margin) and the gated-decode plugin's drain (plugin/gated_decode.py): a batch the
        ceiling gates skips the draft's extend (in an exploration window's cold part, most of it, or with
        nothing exploring), leaving holes in its requests' draft KV; where the gate would draft again while
        a holed request is in the batch, the batch stays gated with the extend until those have finished (at
        most DEFAULT_DRAIN_MAX_STEPS steps). Under open-loop traffic near the ceiling that is most batches.
        The oracle (a reference) has neither. Sets ``extend_kept`` for the counters' extend block."""
        knob = self.knob.value
        self.window_period, self.counted, self.extend_kept = 0, True, None
        self.last_window_phase = None  # the branches of a window's gated batches below say which part
        if self.oracle_off is not None or not self.profile.speculative:
            speculative = self.profile.speculative
            return _tick_mode(tables, batch, knob, gated, speculative, self.oracle_off, extras)[0]
        self.gate_ceiling, self.gate_closed = knob, self._gate_closes(batch)
        if self.gate_closed and knob > 0 and batch <= self.keep_extend_within * knob:
            self.extend_kept = 1.0  # the what-if's band above the ceiling: gated, the extend kept, no holes
            return with_context(self.by_share.at(0.0)[0].off[batch], *extras)
        if self.gate_closed:
            period = knob_contract.explore_period(effective_share(self.knob.share))
            self.extend_kept = 0.0  # skipped where nothing explores and in the cold part; kept below
            if period <= 0:  # nothing explores (a lock, or no share): every such batch skips the extend
                self.queue.mark_holed()
                return with_context(gated[batch], *extras)
            self.window_period, self.counted = period, self.streams.counted(period)
            self.last_window_phase = self.streams.phase
            pure = self.by_share.at(0.0)[0]  # each part runs one mode: the window is the exploration
            if self.streams.phase == EXPLORE:  # the drafting stream, up to its limit (explore.stream_limit)
                if self.streams.drafts(batch, knob):
                    return with_context(pure.on[batch], *extras)
                self.counted = False  # above it: gated with the extend, settling (as the warm part below)
            if self.streams.phase in (WARM, EXPLORE):  # the extend runs (warm: until the holes are gone)
                self.extend_kept = 1.0
                return with_context(pure.off[batch], *extras)
            self.queue.mark_holed()
            return with_context(pure.off_cold[batch], *extras)
        self.extend_kept = 1.0  # the drain, and a drafting bin's explored gated batches, keep the extend
        if self.queue.holed and self.drain_steps < DEFAULT_DRAIN_MAX_STEPS:
            # gated with the extend running, every batch: the drain drafts none, explored or not
            mode = with_context(self.by_share.at(0.0)[0].off[batch], *extras)
            self.drain_steps += mode.steps_s * seconds
            return mode
        if self.queue.holed:
            self.queue.forget_holes()
        self.drain_steps = 0.0
        return with_context(tables.on[batch], *extras)

    def _prefill_skips(self, new_requests: int, t: float) -> bool:
        """Whether a prefill of ``new_requests`` beginning at ``t`` skips the draft's pass: the plugin's one
        rule (knob_contract.prefill_skippable) on the decode batch its requests join next, those decoding
        now and its own (the simulator has no locks: its knob is always the policy's)."""
        period = knob_contract.explore_period(effective_share(self.knob.share))
        gated = self._gate_closes(len(self.queue.decoding) + new_requests)  # Gate.next_batch_gated's judgment
        return knob_contract.prefill_skippable(self.knob.value, gated, period, knob_contract.OWNER_FREE,
                                               self.last_window_phase)  # fmt: skip

    def _gate_closes(self, batch: int) -> bool:
        """Whether the gate closes on ``batch`` (plugin/gate.py's hysteresis, changing nothing): above the
        ceiling, or still closed down to the ceiling less its margin; a new ceiling judges afresh. What
        ``_decode_mode`` applies, and the prefill asks of the batch its requests join next."""
        knob = self.knob.value
        closed = self.gate_closed and knob == self.gate_ceiling
        return batch > knob or (closed and batch > knob - gate_margin(knob))

    def observe(self, ts: float, polls: int, rng: random.Random, stale: bool) -> Observation:
        """What a runner hands the policy at ``ts`` (``simulate``'s Observation, by the same rules)."""
        running, queued, tok_s, acc = self.gauges.interval(polls, self.noise_cv, rng)
        if stale:  # what a runner hands over when the scrape failed: no fresh numbers
            tok_s = acc = None
        speculative = self.profile.speculative
        return Observation(
            ts=ts, num_running_reqs=running, num_queue_reqs=queued, output_tok_s=tok_s, accept_length=acc,
            spec_max_bs=self.knob.value, max_running_requests=self.profile.max_running_requests,
            stale=stale, counters=None if stale or not speculative else self.counters.snapshot(),
            explore_share=None if stale else self.knob.share,
        )  # fmt: skip


def simulate_open_loop(profile: Profile, arrivals: list[Arrival], policy: Policy | None, *, trace_name: str,
                       seed: int = 0, slo: Slo = DEFAULT_SLO, config: HarnessConfig | None = None,
                       tick_s: float = OPEN_LOOP_TICK_S, drain_limit_s: float | None = None,
                       window_start: int = 0, keep_extend_within: float = 0.0) -> OpenLoopResult:  # fmt: skip
    """Replay ``arrivals`` open-loop under ``policy`` (None: the per-tick oracle) until the queue drains.
    ``window_start``: gated batches the exploration windows counted before (open_loop_cost.WindowStreams).
    ``keep_extend_within``: a what-if (``_Server``), 0 for the plugin's rule."""
    cfg = config or HarnessConfig()
    cfg.validate()
    if not arrivals:
        raise HarnessError("the trace has no arrivals to replay")
    server = _Server(profile, cfg, policy is None, seed, tick_s, window_start, keep_extend_within)
    rng, stale_rng = random.Random(f"harness:{seed}"), random.Random(f"stale:{seed}")
    requests = []
    for a in arrivals:
        prompt = cut_prompt(profile, a.input_tokens, a.output_tokens)
        requests.append(Request(a, float(prompt), prompt, ready_t=a.t_s + profile.first_token_latency_s))
    pending = deque(requests)
    per_decision = max(1, round(cfg.decision_interval_s / tick_s))
    last = arrivals[-1].t_s
    stop_at = last + (drain_limit_s if drain_limit_s is not None else max(MIN_DRAIN_LIMIT_S, 10 * last))
    decisions = i = 0
    while i * tick_s <= stop_at and (pending or not server.queue.empty):
        server.knob.apply_due(i)
        server.tick(i * tick_s, tick_s, pending)
        i += 1
        if i % per_decision == 0 and policy is not None:
            decisions += 1
            stale = cfg.stale_probability > 0 and stale_rng.random() < cfg.stale_probability
            obs = server.observe(i * tick_s, per_decision, rng, stale)
            server.knob.request(i + server.delay_ticks, policy.decide(obs), policy.name)
    busy = server.busy_s
    return OpenLoopResult(
        policy=policy.name if policy is not None else ORACLE, profile=profile.name, trace=trace_name,
        seed=seed, slo=slo, duration_s=i * tick_s, tokens=server.queue.tokens, flips=server.knob.flips,
        decisions=decisions, spec_on_fraction=server.drafting_s / busy if busy else 0.0,
        final_max_bs=server.knob.value, explore_share=server.share,
        undrained=sum(1 for r in requests if r.done_t is None), outcomes=[r.outcome() for r in requests],
        peak_in_flight=server.peak_in_flight, counters=server.counters.snapshot(),
        prefill_batches=server.queue.prefill_batches, prefills_skipped=server.queue.prefills_skipped,
    )  # fmt: skip


def evaluate_open_loop(
    profile: Profile,
    trace: RequestTrace,
    policy_spec: str,
    *,
    speedup: float = 1.0,
    rate_scale: float = 1.0,
    duration_s: float | None = None,
    seed: int = 0,
    slo: Slo = DEFAULT_SLO,
    baselines: tuple[str, ...] = BASELINES,
    config: HarnessConfig | None = None,
    policy_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The policy's open-loop figures, each baseline's and the per-tick oracle's under the same arrivals."""
    arrivals = schedule(trace, speedup, rate_scale, seed, duration_s)
    mrr = profile.max_running_requests
    kwargs: dict[str, Any] = {"trace_name": trace.name, "seed": seed, "slo": slo, "config": config}
    result = simulate_open_loop(
        profile, arrivals, make_policy(policy_spec, mrr, **(policy_options or {})), **kwargs
    )
    out = result.to_json()
    out.update(crossover=profile.crossover(), speedup=speedup, rate_scale=rate_scale, arrivals=len(arrivals))
    runs = {
        spec: (
            result
            if spec == policy_spec
            else simulate_open_loop(profile, arrivals, make_policy(spec, mrr), **kwargs)
        )
        for spec in baselines
    }
    runs[ORACLE] = simulate_open_loop(profile, arrivals, None, **kwargs)
    out["baselines"] = {}
    for spec, run in runs.items():
        fig = run.figures()
        out["baselines"][spec] = {
            key: fig[key] for key in ("goodput_rps", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s")
        }
        out["baselines"][spec].update(tokens=round(run.tokens, 1), flips=run.flips, undrained=run.undrained)
    best = max((b["goodput_rps"] for name, b in out["baselines"].items() if name != ORACLE), default=0.0)
    best = max(best, out["goodput_rps"])
    out["goodput_vs_best_baseline"] = round(out["goodput_rps"] / best, 6) if best > 0 else None
    return out
