"""The knob's gate: per decode batch, whether EAGLE drafts, given the live ceiling, its hysteresis and
exploration (which batches run the other mode: ``plugin/explore.py``). Standard library only: it runs inside
SGLang's scheduler processes, where ``plugin/knob_gate.py`` hooks it in; that module's docstring says what
the ceiling, the margin and the dwell mean.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from . import knob_contract
from .explore import EXPLORE_CYCLE_ENV, RUN_LENGTH, WINDOW_CYCLE_BATCHES, BatchPlan, Explorer, cycle_of

# 0.3.2: the seq-lens mirror counts gated batches SGLang resolved; 0.4.0: every batch the ceiling gates may
# skip the draft extend, exploration among them in windows (explore.window in the report), the lock's request;
# 0.4.1: a window's exploring part is a drafting stream whose first half (the turnover) is not counted;
# 0.4.2: the stream drafts only batches up to its limit (explore.stream_limit: twice the ceiling, at least 8),
# larger ones run gated with the extend, settling (explore.window.over_limit in the report);
# 0.4.3: the limit doubles after each exploring part whose largest batch was above it, and comes back down to
# what the last part's largest batch needs (explore.next_doublings; explore.window.limit, .doublings in the
# report); 0.4.4: an exploring part ends after explore.WINDOW_EXPLORE_MAX_S busy seconds, counting its second
# half in time (explore.window.timed_out in the report), and an escalated limit drafts twice the last part's
# largest batch (explore.next_doublings); 0.4.5: the scheduler's long garbage collections (gc in the report,
# plugin/gc_pauses.py); 0.4.6: the counters' extend block, steady gated steps by whether the draft extend ran
# (what it costs on this server's traffic: control/kept_extend.py), and a drained batch's verify result is
# dropped before SGLang's acceptance EMA (``Gate.mark_gated``, knob_gate.mark_drained); 0.4.7: the scheduler's
# output stalls, each long gap between two batch results with where its time went (loop in the report,
# plugin/loop_stalls.py, its own entry point); 0.4.8: the launcher's side, its long collections and its Python
# held, and each process's frozen objects (launcher in the report, plugin/launcher_state.py); 0.4.9: under an
# operator's off the draft model's prefill over each prompt is skipped too (prefills_skipped in the report's
# gated_decode, plugin/gated_decode.py); 0.4.10: so is it wherever the decode batch the prompts join next will
# be gated with nothing needing the draft warm (a policy's gated load, an exploration window's cold part:
# knob_contract.prefill_skippable, Gate.next_batch_gated; a hook on Scheduler.get_next_batch_to_run counts who
# decodes beside the prefill); 0.4.11: the loop's input time by what each call took in, and its batches' run
# and result time by forward mode (loop.input_kinds and loop.batch_modes, plugin/loop_stalls.py), and the gc
# blocks' frozen objects counted only after a freeze (each count walked ~1M objects: 70-100 ms of the
# scheduler per /server_info read after /freeze_gc; plugin/gc_pauses.py FrozenCount); 0.4.12: an exploration
# window yields to a full server (requests waiting that the scheduler could not admit: a hook on
# Scheduler.get_next_batch_to_run reads its waiting queue, Gate.waiting; plugin/explore.py
# WINDOW_WAIT_MAX_CYCLES), full_waited, yielded and forced in the report's explore.window; 0.4.13: the
# counters' ``outside`` block, the seconds outside every step's span per mode and bin (idle turns left out),
# which learn adds to the step time (plugin/engine_counters.py), and each step's tokens counted at what its
# requests kept (plugin/kept_tokens.py: a finished request's dropped step, the last step's overshoot); 0.4.14:
# the counters' ``prefilled`` block, the steps per mode and bin that carried a prefill's time (the first step
# launched after the scheduler chose an EXTEND or MIXED batch: knob_gate's get_next_batch_to_run hook,
# EngineCounters.note_prefill), so a mode's prefill-free step time can be read apart; 0.4.15: the counters'
# ``slots`` block, the batch sizes of each mode's counted steps per bin (a cell's mean batch and its accept
# per request), and ``mix``, the request mix of each exploring part (plugin/part_mix.py: its first batch's
# requests and what each accepted during the part, their arithmetic and harmonic means per bin); 0.4.16: a
# share above the default brings the windows more often (plugin/explore.py WINDOW_BASE_PERIOD), which learn's
# thin share asks for while the load sits in a bin the ceiling gates that is too thin to decide
PLUGIN_VERSION = "0.4.16"

ENV_GATE_MARGIN = "SPECTOWER_GATE_MARGIN"
ENV_GATE_MIN_DWELL = "SPECTOWER_GATE_MIN_DWELL"
ENV_EXPLORE_SHARE = knob_contract.EXPLORE_ENV
DEFAULT_GATE_MARGIN_FRACTION = 0.10
DEFAULT_GATE_MIN_DWELL = 16
# Verify results arrive after the next batch was launched (overlap scheduling): remember this many recent
# gate decisions to match each verify result with the decision for its own batch.
DEFAULT_DECISION_MEMORY = 8
# The plan before the first decode batch: nothing explored, nothing settling, no window.
NO_BATCH_YET = BatchPlan(explore=False, settling=False, phase=None, forget_holes=False)

logger = logging.getLogger(__name__)


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        logger.warning("spectower: ignoring %s=%r (must be a non-negative integer)", name, raw)
        return None
    return value


def _env_explore_share() -> float:
    """The launch-time exploration share: ``SPECTOWER_EXPLORE_SHARE`` when valid, else the default."""
    raw = os.environ.get(ENV_EXPLORE_SHARE)
    if raw is None or raw.strip() == "":
        return knob_contract.DEFAULT_EXPLORE_SHARE
    try:
        return knob_contract.explore_share_of(float(raw), ENV_EXPLORE_SHARE)
    except (ValueError, knob_contract.ContractError) as exc:
        logger.warning("spectower: ignoring %s=%r (%s); exploring %g", ENV_EXPLORE_SHARE, raw,
                       exc, knob_contract.DEFAULT_EXPLORE_SHARE)  # fmt: skip
        return knob_contract.DEFAULT_EXPLORE_SHARE


def _env_explore_cycle() -> int:
    try:
        return cycle_of(os.environ.get(EXPLORE_CYCLE_ENV))
    except ValueError as exc:
        logger.warning("spectower: ignoring %s; exploring in windows of %d batches", exc,
                       WINDOW_CYCLE_BATCHES)  # fmt: skip
        return WINDOW_CYCLE_BATCHES


def gate_margin(ceiling: int | None, override: int | None = None) -> int:
    """How far under ``ceiling`` a closed gate's batch must fall before it drafts again: ``override``, else
    DEFAULT_GATE_MARGIN_FRACTION of the ceiling (at least 1), always below the ceiling; 0 for no ceiling or
    one of at most 1. The simulator's open loop (simulator/open_loop.py) reopens its gate by the same."""
    if ceiling is None or ceiling <= 1:
        return 0
    wanted = override if override is not None else max(1, round(ceiling * DEFAULT_GATE_MARGIN_FRACTION))
    return min(wanted, ceiling - 1)


class Gate:
    """The per-process gate: the ceiling, the hysteresis state and the counters. Pure logic, no sglang."""

    def __init__(
        self,
        margin: int | None = None,
        min_dwell: int = DEFAULT_GATE_MIN_DWELL,
        explore_share: float = 0.0,
        explore_cycle: int = WINDOW_CYCLE_BATCHES,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.ceiling: int | None = None  # None: unlimited until the first set
        self.margin_override = margin
        self.min_dwell = min_dwell
        self.closed = False
        self.closed_batches = 0  # gated batches since the gate last closed
        self.batches_drafted = 0
        self.batches_gated = 0
        self.verifies_dropped = 0
        self.switches = 0
        # Exploration (module docstring): runs, one batch in `explore_period` of a bin (plugin/explore.py).
        self.explore_share = 0.0
        self.explore_period = 0
        self.set_explore_share(explore_share)
        # which batches explore: runs, and windows among the batches the ceiling gates (plugin/explore.py)
        self.explorer = Explorer(explore_cycle)
        # the windows' time (plugin/explore.py): a window's parts in seconds too; None counts batches only
        self.clock = clock
        # requests the scheduler left waiting when it formed the batch about to run (the knob plugin's hook
        # on Scheduler.get_next_batch_to_run): at a decode batch they could not be admitted: a full server
        self.waiting = 0
        # The last decide()'s batch: the explorer's plan for it (explored: count() attributes its step change;
        # settling: counted apart; forget_holes: a window's warm part was cut short), and whether the
        # ceiling gated it (not exploration).
        self.plan = NO_BATCH_YET
        self.gated_by_ceiling_now = False
        self.batches_explored = 0
        self.explore_changes = 0  # step changes to or from an explored batch (override-log entries)
        self._last_explored = False
        # Where step changes come from (each one SGLang applies appends to its override log): changes of
        # the bands' own answer (SGLang's batch-size bands and acceptance EMA) vs of the answer returned.
        self.band_changes = 0
        self.step_changes = 0
        self._last_band_steps: int | None = None
        self._last_steps: int | None = None
        self._decisions: collections.deque[tuple[int, bool]] = collections.deque(
            maxlen=DEFAULT_DECISION_MEMORY
        )
        self._lock = threading.Lock()

    def margin(self) -> int:
        return gate_margin(self.ceiling, self.margin_override)

    def set_explore_share(self, share: float) -> None:
        """A new exploration share (validated by the caller: 0 .. knob_contract.MAX_EXPLORE_SHARE)."""
        self.explore_share = float(share)
        self.explore_period = knob_contract.explore_period(self.explore_share)

    def set_ceiling(self, value: int) -> None:
        with self._lock:
            self.ceiling = value
            # A new ceiling is an operator decision: judge the next batch afresh, without the old dwell.
            self.closed = False
            self.closed_batches = 0

    def _judge(self, batch_size: int) -> tuple[bool, int]:
        """What the hysteresis says for this batch: (closed, closed_batches after it); changes nothing."""
        ceiling = self.ceiling
        if ceiling is None:
            return False, self.closed_batches
        if not self.closed:
            closed = batch_size > ceiling
            return closed, 0 if closed else self.closed_batches
        dwelt = self.closed_batches + 1
        return not (batch_size <= ceiling - self.margin() and dwelt >= self.min_dwell), dwelt

    def decide(self, batch_size: int, may_explore: bool = True,
               holes_pending: Callable[[], bool] = lambda: False) -> bool:  # fmt: skip
        """True when this batch must not draft. Closes at once above the ceiling, reopens with hysteresis;
        the batches the ``Explorer`` picks (runs; windows where the ceiling gates; while ``may_explore``) run
        the other mode instead, leaving the hysteresis state as it was. ``holes_pending``: whether a request
        of this batch still has draft-KV holes (the gated-decode plugin knows; a window's warm part waits)."""
        closed, dwelt = self._judge(batch_size)
        period = self.explore_period if may_explore else 0
        # the ceiling sets the exploring part's stream limit; None (unlimited) gates nothing: never read
        ceiling = self.ceiling if self.ceiling is not None else 0
        now = self.clock() if self.clock is not None else None
        self.plan = self.explorer.next(batch_size, closed, period, holes_pending, now, ceiling=ceiling,
                                       full=self.waiting > 0)  # fmt: skip
        self.gated_by_ceiling_now = closed and not self.plan.explore
        if self.plan.explore:
            self._decisions.append((batch_size, not closed))
            return not closed
        if closed != self.closed:
            self.switches += 1
        self.closed, self.closed_batches = closed, dwelt
        self._decisions.append((batch_size, closed))
        return closed

    def next_batch_gated(self, batch_size: int | None) -> bool:
        """Whether a decode batch of ``batch_size`` requests formed next would be gated by the ceiling, judged
        with the hysteresis as it stands (the gated-decode plugin asks before a prefill: the requests still
        running beside it and its own). At a ceiling of 0 any batch is; with no ceiling none; ``None`` (the
        size is not known): False."""
        ceiling = self.ceiling
        if ceiling is None:
            return False
        if ceiling == 0:
            return True
        return batch_size is not None and self._judge(batch_size)[0]

    def mark_gated(self, batch_size: int) -> None:
        """The batch just decided runs 0 steps after all (the gated-decode plugin's drain): its verify result
        is the gate's, dropped before SGLang's acceptance EMA as a gated batch's is (``verify_was_gated``)."""
        if self._decisions and self._decisions[-1][0] == batch_size:
            self._decisions[-1] = (batch_size, True)

    def count(self, gated: bool, steps: int, explored: bool = False) -> None:
        """Count one decode batch: ``gated`` by the gate (or by exploration), the bands' ``steps``."""
        if gated:
            self.batches_gated += 1
        elif steps > 0:
            self.batches_drafted += 1
        final = 0 if gated else steps
        # An explored batch the bands put at 0 anyway ran as it would have: no exploration happened.
        explored = explored and (gated or steps > 0)
        self.batches_explored += explored
        if self._last_band_steps is not None and steps != self._last_band_steps:
            self.band_changes += 1
        if self._last_steps is not None and final != self._last_steps:
            self.step_changes += 1
            self.explore_changes += explored or self._last_explored
        self._last_band_steps, self._last_steps = steps, final
        self._last_explored = explored

    def verify_was_gated(self, batch_size: int, num_correct: list[int]) -> bool:
        """Whether a verify result belongs to a batch this gate forced to 0 steps.

        Matches the oldest remembered decision for the same batch size (results arrive in launch order, at
        most a batch or two late); decisions that never got a verify are dropped on the way. Without a
        match, a result is the gate's when the gate is closed now and no draft was accepted.
        """
        while self._decisions:
            size, gated = self._decisions.popleft()
            if size == batch_size:
                return gated
        return self.closed and not any(num_correct)

    def report(self, unlimited_as: int) -> dict[str, Any]:
        return {
            "plugin_version": PLUGIN_VERSION,
            "spec_max_bs": unlimited_as if self.ceiling is None else self.ceiling,
            "batches_drafted": self.batches_drafted,
            "batches_gated": self.batches_gated,
            "gate": {
                "closed": self.closed,
                "margin": self.margin(),
                "min_dwell": self.min_dwell,
                "switches": self.switches,
                "band_changes": self.band_changes,
                "step_changes": self.step_changes,
                "verifies_dropped": self.verifies_dropped,
                "ceiling_set": self.ceiling is not None,
                "explore_changes": self.explore_changes,
            },
        }

    def explore_report(self, active: bool) -> dict[str, Any]:
        """The ``explore`` block (the simulator reports the same): the share, every how many batches of a
        bin one is explored (in runs of ``run``), how many were, and whether exploring is on now (no lock
        holds the knob)."""
        return {
            "share": self.explore_share,
            "period": self.explore_period,
            "run": RUN_LENGTH,
            "batches": self.batches_explored,
            "active": active and self.explore_period > 0,
            "window": self.explorer.window_report(),
        }

    @classmethod
    def from_environment(cls) -> Gate:
        """The gate SGLang's process launches with: its margin, dwell, share and cycle from the environment
        (``SPECTOWER_GATE_MARGIN``, ``SPECTOWER_GATE_MIN_DWELL``, ``SPECTOWER_EXPLORE_SHARE``,
        ``SPECTOWER_EXPLORE_CYCLE``), a bad value logged and the default used."""
        dwell = _env_int(ENV_GATE_MIN_DWELL)
        return cls(
            margin=_env_int(ENV_GATE_MARGIN),
            min_dwell=DEFAULT_GATE_MIN_DWELL if dwell is None else dwell,
            explore_share=_env_explore_share(),
            explore_cycle=_env_explore_cycle(),
            clock=time.monotonic,  # inside SGLang the windows keep time (plugin/explore.py)
        )
