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
  gauge window are correlated, and a profile's ``noise_cv`` is its run-to-run spread).

Efficiency = tokens under the policy / tokens under the oracle that, at every instant, knows the profile
and picks the better of spec-on and spec-off for the current concurrency. "Off" is what the knob can do: the
profile's ``spec_off`` curve (the knob at 0, gated batches verified one token at a time), never a server
launched without speculation; where a profile has that curve too (``output_tok_s.plain``), the result
reports ``plain_tokens`` (a plain server under the same trace) beside the oracle's, so a knob that cannot
match a plain server shows as ``plain_vs_oracle`` > 1.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from spectower.control.policy import Observation, Policy, make_policy
from spectower.simulator.profile import Profile
from spectower.simulator.traces import Trace

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
    timeline: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def efficiency(self) -> float:
        return self.tokens / self.oracle_tokens if self.oracle_tokens > 0 else 1.0

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
            "flips": self.flips,
            "decisions": self.decisions,
            "spec_on_fraction": round(self.spec_on_fraction, 4),
            "final_max_bs": self.final_max_bs,
        }


@dataclass(frozen=True)
class _Tables:
    """The profile at every integer batch size 0..max_running_requests (the harness never asks more)."""

    on: tuple[float, ...]
    off: tuple[float, ...]  # the knob at 0 (spec_off), not a plain server
    plain: tuple[float, ...]
    accept: tuple[float, ...]

    @classmethod
    def of(cls, profile: Profile) -> _Tables:
        n = profile.max_running_requests  # bounded by profile.MAX_RUNNING_REQUESTS
        return cls(
            on=tuple(profile.output_tok_s(c, True) for c in range(n + 1)),
            off=tuple(profile.output_tok_s(c, False) for c in range(n + 1)),
            plain=tuple(profile.plain_output_tok_s(c) for c in range(n + 1)),
            accept=tuple(profile.accept_length_at(c) if c else 1.0 for c in range(n + 1)),
        )


def simulate(profile: Profile, trace: Trace, policy: Policy, duration_s: float | None = None, seed: int = 0,
             config: HarnessConfig | None = None, keep_timeline: bool = False) -> RunResult:
    """Replay ``trace`` for ``duration_s`` virtual seconds (default: the trace's length) under ``policy``."""
    cfg = config or HarnessConfig()
    cfg.validate()
    duration = trace.duration_s if duration_s is None else duration_s
    if not math.isfinite(duration) or duration <= 0:
        raise HarnessError(f"duration must be > 0 seconds, got {duration_s!r}")
    mrr = profile.max_running_requests
    tables = _Tables.of(profile)
    noise_cv = profile.noise_cv if cfg.noise_cv is None else cfg.noise_cv
    rng = random.Random(f"harness:{seed}")
    stale_rng = random.Random(f"stale:{seed}")  # its own stream: staleness does not reshuffle the noise

    tick = cfg.tick_s
    n_ticks = round(duration / tick)
    ticks_per_decision = max(1, round(cfg.decision_interval_s / tick))
    delay_ticks = math.ceil(cfg.knob_delay_s / tick - 1e-9)

    knob = mrr if cfg.initial_max_bs is None else cfg.initial_max_bs
    pending: list[tuple[int, int]] = []  # (tick at which it applies, value)
    tokens = oracle = plain = 0.0
    flips = decisions = 0
    busy_ticks = drafting_ticks = 0
    # gauge state: the window being accumulated, and the last published values
    win_steps = win_tokens = win_time = win_accept_steps = 0.0
    gauge_tok_s: float | None = None
    gauge_accept: float | None = None
    idle_s = 0.0
    # interval accumulators
    sum_running = sum_queued = sum_gauge = sum_accept = 0.0
    n_gauge = n_accept = 0
    timeline: list[dict[str, Any]] = []

    for i in range(n_ticks):
        while pending and pending[0][0] <= i:
            _, value = pending.pop(0)
            if value != knob:
                flips += 1
                knob = value
        t = i * tick
        conc = max(0, round(trace.concurrency_at(t)))
        running = min(conc, mrr)
        queued = conc - running
        drafting = running > 0 and running <= knob
        rate = (tables.on if drafting else tables.off)[running]
        best = max(tables.on[running], tables.off[running])
        tokens += rate * tick
        oracle += best * tick
        plain += tables.plain[running] * tick
        if running:
            busy_ticks += 1
            drafting_ticks += drafting
            idle_s = 0.0
            accept = tables.accept[running] if drafting else 1.0
            # one decode step makes `accept` tokens per request: step time = accept * running / rate
            steps = tick * rate / (accept * running)
            win_steps += steps
            win_tokens += rate * tick
            win_time += tick
            win_accept_steps += accept * steps
            if win_steps >= cfg.gauge_log_interval_steps:
                gauge_tok_s = win_tokens / win_time
                gauge_accept = win_accept_steps / win_steps
                win_steps = win_tokens = win_time = win_accept_steps = 0.0
        else:
            idle_s += tick
            if idle_s >= GAUGE_IDLE_DECAY_S and gauge_tok_s is not None:
                gauge_tok_s = 0.0
        sum_running += running
        sum_queued += queued
        if gauge_tok_s is not None:
            sum_gauge += gauge_tok_s
            n_gauge += 1
        if gauge_accept is not None:
            sum_accept += gauge_accept
            n_accept += 1

        if (i + 1) % ticks_per_decision == 0:
            n = ticks_per_decision
            tok_s = None
            if n_gauge:
                tok_s = max(0.0, sum_gauge / n_gauge * (1.0 + noise_cv * rng.gauss(0.0, 1.0)))
            acc = None
            if n_accept:
                acc = max(1.0, sum_accept / n_accept * (1.0 + noise_cv / 3 * rng.gauss(0.0, 1.0)))
            stale = cfg.stale_probability > 0 and stale_rng.random() < cfg.stale_probability
            if stale:  # what a runner hands over when the scrape failed: no fresh numbers
                tok_s = acc = None
            obs = Observation(
                ts=(i + 1) * tick,
                num_running_reqs=sum_running / n,
                num_queue_reqs=sum_queued / n,
                output_tok_s=tok_s,
                accept_length=acc,
                spec_max_bs=knob,
                max_running_requests=mrr,
                stale=stale,
            )
            decision = policy.decide(obs)
            decisions += 1
            if decision.max_bs is not None:
                if decision.max_bs < 0:
                    raise HarnessError(f"policy {policy.name} asked for a negative ceiling {decision.max_bs}")
                pending.append((i + 1 + delay_ticks, int(decision.max_bs)))
            if keep_timeline:
                timeline.append({"t": obs.ts, "running": obs.num_running_reqs, "queued": obs.num_queue_reqs,
                                 "tok_s": tok_s, "accept": acc, "knob": knob, "set": decision.max_bs,
                                 "reason": decision.reason})
            sum_running = sum_queued = sum_gauge = sum_accept = 0.0
            n_gauge = n_accept = 0

    return RunResult(
        policy=policy.name,
        profile=profile.name,
        trace=trace.name,
        seed=seed,
        duration_s=n_ticks * tick,
        tokens=tokens,
        oracle_tokens=oracle,
        plain_tokens=plain,
        flips=flips,
        decisions=decisions,
        spec_on_fraction=drafting_ticks / busy_ticks if busy_ticks else 0.0,
        final_max_bs=knob,
        timeline=timeline,
    )


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
        out["baselines"][spec] = {"efficiency": round(base.efficiency, 6), "flips": base.flips}
    return out
