"""The live policy loop behind ``spectower control auto``.

Every interval: build an ``Observation`` from what the collector stored for the server (EngineSamples,
summed over DP ranks) plus the knob's read-back and the engine's decode counters (both from the same
``/server_info`` read; the counters summed over DP ranks), ask the policy, and move the knob through
``control.audit.apply_knob`` (actor ``policy:<mode>``, writer class policy) only when the decision changes
it. Safety rails that hold whatever the policy says: stale metrics or an unreachable server hold; while the
server reports a lock (a manual set, or a sweep) the loop is paused, and the server itself refuses a
policy write that races a new lock; no more than ``max_flips_per_hour`` sets per rolling hour. A decision's
exploration share (``Decision.explore_share``: learn quieting exploring where its estimate is decisive) is
written alone after the ceiling (``audit.apply_explore_share``: read back, audited as action ``explore``);
never while a lock holds (exploring is paused on the server then anyway). The policy's state is persisted
after every decision and reloaded on start. On stop the server keeps its last ceiling.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..collectors.sglang.counters import read_counters
from ..plugin.engine_counters import sum_ranks
from ..storage import queries
from ..storage.database import Database
from ..storage.models import EngineSample
from . import audit
from .knob import KnobClient, explore_share_of
from .knob_state import KnobError, KnobState, SetResult, ensure_ready
from .policy import Decision, Observation, Policy
from .policy.learn import DEFAULT_MAX_FLIPS_PER_HOUR as LEARN_MAX_FLIPS_PER_HOUR

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
DEFAULT_STALE_AFTER_S = 30.0  # a few missed scrapes at the collector's default 1-5 s cadence
# A rail for every policy, and what `control auto` hands learn as its own limit: the README's "at most 12
# changes an hour" (it was 60, which raised learn's limit to 60 in the demo and every default run).
DEFAULT_MAX_FLIPS_PER_HOUR = LEARN_MAX_FLIPS_PER_HOUR
FLIP_WINDOW_S = 3600.0
START_NOTE_CHARS = 700  # of the start note kept in the auto-start row (a reason: 1000; the CLI prints it all)

Clock = Callable[[], float]
Say = Callable[[str], None]


class RunnerConfigError(ValueError):
    """A bad runner option; the message names the flag."""


@dataclass(frozen=True)
class RunnerConfig:
    interval_s: float = DEFAULT_INTERVAL_S
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    max_flips_per_hour: int = DEFAULT_MAX_FLIPS_PER_HOUR

    def __post_init__(self) -> None:
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):
            raise RunnerConfigError(f"--interval must be a positive duration, got {self.interval_s}")
        if not (math.isfinite(self.stale_after_s) and self.stale_after_s > 0):
            raise RunnerConfigError(f"--stale-after must be a positive duration, got {self.stale_after_s}")
        if isinstance(self.max_flips_per_hour, bool) or self.max_flips_per_hour < 1:
            raise RunnerConfigError(f"--max-flips-per-hour must be >= 1, got {self.max_flips_per_hour}")


@dataclass(frozen=True)
class StepOutcome:
    """What one iteration did: ``set``, ``hold``, ``explore`` (the exploration share alone), ``paused``,
    ``rate-limited`` or ``error``."""

    ts: float
    action: str
    reason: str
    observation: Observation | None = None
    decision: Decision | None = None
    result: SetResult | None = None


def engine_counters_of(knob: KnobState) -> tuple[dict[str, Any] | None, str | None]:
    """The server's decode counters summed over DP ranks, from the /server_info the knob read came from,
    and why they are missing (None when every rank with the plugin published a valid block).

    A rank left out would make the sum fall (read as a restart) and come back later as a jump, so a partial
    sum is no sum: the policy then holds."""
    read = read_counters(knob.info.info)
    plugin_ranks = sum(1 for rank in knob.ranks if rank.plugin)
    if read.warnings:
        return None, read.warnings[0]
    if not read.blocks:
        return None, "the server publishes no engine counters"
    if len(read.blocks) != plugin_ranks:
        return None, f"engine counters from {len(read.blocks)} of {plugin_ranks} DP ranks"
    return sum_ranks(read.blocks), None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def observe_storage(
    db: Database, server_url: str, now: float, interval_s: float, stale_after_s: float
) -> tuple[dict[str, float | None], str | None]:
    """Aggregate the collector's samples for ``server_url``: per rank, the mean over the last interval
    (or the rank's latest sample when none fell in it), then summed over ranks (accept length averaged).

    Returns (metrics, why_stale); why_stale is None when the data is fresh enough to act on.
    """
    # the collector stores the URL as it was given: with or without a trailing slash
    recent = queries.recent_engine_samples(db, [server_url, server_url + "/"], since=now - stale_after_s)
    if not recent.server_ids:
        return {}, f"no samples: the collector has not recorded {server_url} (run `spectower collect`)"
    if recent.latest_ts is None:
        return {}, f"no samples yet for {server_url}"
    age = now - recent.latest_ts
    if age > stale_after_s:
        return {}, f"metrics stale: newest sample is {age:.0f} s old (--stale-after {stale_after_s:g} s)"
    by_rank: dict[int, list[EngineSample]] = {}
    for row in recent.rows:
        by_rank.setdefault(row.dp_rank, []).append(row)
    running = queued = 0.0
    tok_s: list[float] = []
    accept: list[float] = []
    have_running = False
    for samples in by_rank.values():
        window = [s for s in samples if s.ts >= now - interval_s] or samples[-1:]
        r = _mean([s.num_running_reqs for s in window if s.num_running_reqs is not None])
        q = _mean([s.num_queue_reqs for s in window if s.num_queue_reqs is not None])
        t = _mean([s.output_tok_s for s in window if s.output_tok_s is not None])
        a = _mean([s.spec_accept_length for s in window if s.spec_accept_length is not None])
        if r is not None:
            running += r
            have_running = True
        queued += q or 0.0
        if t is not None:
            tok_s.append(t)
        if a is not None:
            accept.append(a)
    if not have_running:
        return {}, "metrics incomplete: no num_running_reqs in the recent samples"
    metrics: dict[str, float | None] = {
        "num_running_reqs": running,
        "num_queue_reqs": queued,
        "output_tok_s": sum(tok_s) if tok_s else None,
        "accept_length": _mean(accept),
    }
    return metrics, None


class PolicyRunner:
    """Drives one server's knob with one policy. ``step()`` is one iteration; ``run()`` loops."""

    def __init__(
        self,
        db: Database,
        client: KnobClient,
        policy: Policy,
        *,
        mode: str,
        config: RunnerConfig | None = None,
        clock: Clock = time.time,
        say: Say | None = None,
        start_note: str | None = None,
    ) -> None:
        self.db = db
        self.start_note = start_note  # e.g. the warm start's line: kept with the auto-start audit row
        self.client = client
        self.policy = policy
        self.server_url = client.base_url
        self.actor = audit.validate_actor(f"policy:{mode}")
        self.config = config or RunnerConfig()
        self.clock = clock
        self._say = say
        self._last_said: tuple[str, str] | None = None
        # Until the server answers, the policy's own figure (from `auto`'s start-up read or the database).
        initial = getattr(policy, "max_running_requests", None)
        self.max_running_requests: int | None = initial if isinstance(initial, int) else None
        self.last_knob: KnobState | None = None
        self._counter_problems: set[str] = set()  # each said once in the log
        self._restored: bool | None = None  # restore()'s answer, once it ran

    # -- reporting

    def say(self, outcome: StepOutcome) -> None:
        """Report an outcome once (repeats of the same hold are not re-printed every interval)."""
        key = (outcome.action, outcome.reason)
        if key == self._last_said and outcome.action != "set":
            return
        self._last_said = key
        stamp = time.strftime("%H:%M:%S", time.localtime(outcome.ts))
        # the policies' holds say "hold: ..." themselves: the action is not said twice
        said = outcome.reason if outcome.reason.startswith(f"{outcome.action}:") else \
            f"{outcome.action}: {outcome.reason}"
        line = f"{stamp} {said}"
        log.info(line)
        if self._say is not None:
            self._say(line)
        try:  # the console's "policy says" (storage: policy_state.said): the loop goes on without it
            queries.save_policy_said(self.db, self.server_url, said=said, ts=outcome.ts)
        except Exception:
            log.exception("could not store what the policy said")

    # -- state

    def load_state(self) -> bool:
        """Restore the policy's persisted estimates if they were written by the same policy."""
        state = audit.get_policy_state(self.db, self.server_url)
        if state is None or state.mode != self.policy.name or not state.state_json:
            return False
        try:
            saved = json.loads(state.state_json)
            if not isinstance(saved, dict) or not saved:
                return False
            self.policy.load_state(saved)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("ignoring unusable saved state for %s: %s", self.server_url, exc)
            return False
        return True

    def restore(self) -> bool:
        """``load_state`` once: ``start`` calls it, and a caller that must know before the loop starts whether
        the policy restored its estimates (`control auto`: whether a warm start will be used) may call it
        first."""
        if self._restored is None:
            self._restored = self.load_state()
        return self._restored

    def save_state(self) -> None:
        blob = json.dumps(self.policy.state(), sort_keys=True)
        queries.save_policy_state(self.db, self.server_url, mode=self.policy.name, state_json=blob,
                                  ts=self.clock())  # fmt: skip

    def flips_in_last_hour(self, now: float) -> int:
        return queries.count_control_events(self.db, server_url=self.server_url, actor=self.actor,
                                            action="set", after=now - FLIP_WINDOW_S)  # fmt: skip

    # -- one iteration

    def observe(self, now: float) -> tuple[Observation, str | None]:
        why_stale: str | None = None
        knob: KnobState | None = None
        self.last_knob = None
        try:
            knob = self.client.read()
            ensure_ready(knob)
            self.last_knob = knob
        except KnobError as exc:  # unreachable, or the knob cannot work there: hold and say why
            why_stale = f"knob not usable: {exc}"
        if knob is not None and why_stale is None and not knob.ownership_supported:
            why_stale = (
                f"knob not usable by a policy: the plugin {knob.plugin_version or '?'} predates server-side "
                "locks, so a manual set could not hold against this policy; upgrade the plugin"
            )
        if knob is not None and knob.max_running_requests:
            self.max_running_requests = knob.max_running_requests
        counters: dict[str, Any] | None = None
        if knob is not None and why_stale is None:
            counters, problem = engine_counters_of(knob)
            if problem is not None and problem not in self._counter_problems:
                self._counter_problems.add(problem)
                log.warning("%s: no engine counters for the policy: %s", self.server_url, problem)
        metrics, storage_stale = observe_storage(
            self.db, self.server_url, now, self.config.interval_s, self.config.stale_after_s
        )
        why_stale = why_stale or storage_stale
        obs = Observation(
            ts=now,
            num_running_reqs=float(metrics.get("num_running_reqs") or 0.0),
            num_queue_reqs=float(metrics.get("num_queue_reqs") or 0.0),
            output_tok_s=metrics.get("output_tok_s"),
            accept_length=metrics.get("accept_length"),
            spec_max_bs=knob.spec_max_bs if knob is not None and knob.plugin_installed else None,
            max_running_requests=self.max_running_requests or 0,
            stale=why_stale is not None,
            counters=counters,
            explore_share=explore_share_of(knob) if knob is not None and why_stale is None else None,
        )
        return obs, why_stale

    def _paused_reason(self, knob: KnobState) -> str:
        lock = knob.lock or {}
        expires = lock.get("expires_at")
        until = (
            "until released"
            if not isinstance(expires, int | float)
            else "until " + time.strftime("%H:%M:%S", time.localtime(float(expires)))
        )
        return (
            f"the server's {knob.owner} lock holds the knob {until}; the policy writes neither the ceiling "
            f"nor the exploration share (exploring is paused on the server while it holds) "
            f"(`spectower control release --server {self.server_url}`)"
        )

    def step(self) -> StepOutcome:
        now = self.clock()
        obs, why_stale = self.observe(now)
        knob = self.last_knob
        if knob is not None and knob.locked:  # the server says who holds the knob: not us, now
            return StepOutcome(now, "paused", self._paused_reason(knob), obs)
        decision = self.policy.decide(obs)
        self.save_state()
        if why_stale is not None:  # hold whatever the policy said: never act on stale data
            return StepOutcome(now, "hold", why_stale, obs, decision)
        outcome = self._apply_ceiling(now, obs, decision)
        if decision.explore_share is None:
            return outcome
        if outcome.action in ("paused", "error"):  # a lock won the race, or the server failed: not now
            why = f"{outcome.reason}; explore share {decision.explore_share:g} not written"
            return StepOutcome(now, outcome.action, why, obs, decision, outcome.result)
        return self._apply_share(now, outcome, decision.explore_share)

    def _apply_ceiling(self, now: float, obs: Observation, decision: Decision) -> StepOutcome:
        """Move the knob as the decision says (or hold), with the rails; audited by ``apply_knob``."""
        if decision.max_bs is None:
            return StepOutcome(now, "hold", decision.reason, obs, decision)
        if decision.max_bs == obs.spec_max_bs:
            return StepOutcome(now, "hold", f"knob already at {decision.max_bs}", obs, decision)
        flips = self.flips_in_last_hour(now)
        if flips >= self.config.max_flips_per_hour:
            return StepOutcome(
                now, "rate-limited",
                f"wanted {obs.spec_max_bs} -> {decision.max_bs} ({decision.reason}) but {flips} sets in the "
                f"last hour reached --max-flips-per-hour {self.config.max_flips_per_hour}",
                obs, decision,
            )  # fmt: skip
        try:
            result = audit.apply_knob(self.db, self.client, decision.max_bs, decision.reason, self.actor,
                                      writer="policy", clock=self.clock)  # fmt: skip
        except audit.PolicyPaused as exc:  # a lock was taken while this step decided: the server refused
            hint = f"`spectower control release --server {self.server_url}`"
            return StepOutcome(now, "paused", f"{exc} ({hint})", obs, decision)
        except KnobError as exc:  # audited by apply_knob; the loop keeps going
            return StepOutcome(now, "error", f"set {decision.max_bs} failed: {exc}", obs, decision)
        state = "confirmed" if result.confirmed else f"{result.outcome.upper()} ({result.error or '?'})"
        reason = f"{result.old_max_bs} -> {result.requested} {state}: {decision.reason}"
        return StepOutcome(now, "set", reason, obs, decision, result)

    def _apply_share(self, now: float, outcome: StepOutcome, share: float) -> StepOutcome:
        """Write the decision's exploration share alone after the ceiling's outcome (audited as ``explore``);
        a lock that came meanwhile pauses it, a failure is this step's error, never a crash."""
        obs, decision = outcome.observation, outcome.decision
        assert decision is not None
        prior = f"{outcome.reason}; " if outcome.action != "hold" else ""  # a set made, or rate-limited
        try:
            result = audit.apply_explore_share(self.db, self.client, share, decision.reason, self.actor,
                                               clock=self.clock)  # fmt: skip
        except audit.PolicyPaused as exc:
            hint = f"`spectower control release --server {self.server_url}`"
            why = f"{prior}explore share {share:g} not written: {exc} ({hint})"
            return StepOutcome(now, "paused", why, obs, decision, outcome.result)
        except KnobError as exc:  # audited by apply_explore_share; the loop keeps going
            why = f"{prior}explore share {share:g} failed: {exc}"
            return StepOutcome(now, "error", why, obs, decision, outcome.result)
        seen = explore_share_of(result.after) if result.after is not None else None
        old = obs.explore_share if obs is not None else None
        state = "confirmed" if result.confirmed else f"{result.outcome.upper()} ({result.error or '?'})"
        text = (f"explore share {'?' if old is None else f'{old:g}'} -> {share:g} {state}, read back "
                f"{'?' if seen is None else f'{seen:g}'}")  # fmt: skip
        if prior:
            return StepOutcome(now, outcome.action, prior + text, obs, decision, outcome.result)
        return StepOutcome(now, "explore", f"{text}: {decision.reason}", obs, decision, result)

    # -- the loop

    def start(self) -> None:
        restored = self.restore()
        audit.record_event(
            self.db, actor=self.actor, server_url=self.server_url, action="auto-start",
            reason=(f"policy {self.policy.name} started: interval {self.config.interval_s:g} s, stale after "
                    f"{self.config.stale_after_s:g} s, max {self.config.max_flips_per_hour} flips/h"
                    + ("; restored saved state" if restored else "")
                    + (f"; {self.start_note[:START_NOTE_CHARS]}" if self.start_note else "")),
            confirmed=True, ts=self.clock(),
        )  # fmt: skip

    def stop(self, why: str) -> None:
        try:
            self.save_state()
        finally:
            audit.record_event(
                self.db, actor=self.actor, server_url=self.server_url, action="auto-stop",
                reason=f"policy {self.policy.name} stopped ({why}); the server keeps its last ceiling",
                confirmed=True, ts=self.clock(),
            )  # fmt: skip

    def run(self, stop: threading.Event, *, max_steps: int | None = None) -> None:
        """Loop until ``stop`` is set (a signal handler sets it); each step is reported via ``say``."""
        self.start()
        steps = 0
        why = "stopped"
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    outcome = self.step()
                except Exception as exc:  # a database hiccup must not end the loop
                    log.exception("policy step failed")
                    outcome = StepOutcome(self.clock(), "error", f"{type(exc).__name__}: {exc}")
                self.say(outcome)
                steps += 1
                if max_steps is not None and steps >= max_steps:
                    why = f"after {steps} steps"
                    break
                stop.wait(max(0.0, self.config.interval_s - (time.monotonic() - started)))
            else:
                why = "signal"
        finally:
            self.stop(why)
