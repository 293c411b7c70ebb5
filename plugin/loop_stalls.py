"""The scheduler's output stalls: each long gap between two of its batch results, and where its time went.

Why: under Azure's replay on the H200 every policy's server paused 0.56-1.35 s a few times, and those pauses
made every run's p99 TTFT (data/gpu-runs/h200-8b-pair-triton-replay-2026-12-04): the requests arriving in a
pause all got their first token at one moment, so the server's output stopped and resumed. The client sent
on time and the prompt tokens arriving before a pause were no more than usual; what the scheduler did during
one is not in SGLang's logs. A client sees output when the scheduler processes a batch's result (the tokens
go to the detokenizer there), so a stall is a long gap between two results; this times the four calls each
iteration of SGLang's event loop makes (``Scheduler.process_input_requests``, ``get_next_batch_to_run``,
``run_batch``, ``process_batch_result``, in both the normal and the overlap loop of SGLang 0.5.17 and 0.5.23)
and keeps each gap of at least ``threshold_s`` with its breakdown, so one run tells which it was: a long
prefill (in the overlap loop a batch's GPU time is waited for in its result's processing, so a long extend
shows as a long ``result`` of an EXTEND batch; in the normal loop as a long ``run``), the scheduling itself
(``schedule``: the radix cache, eviction, allocation), a flood of input (``input``), a garbage collection
(``gc``, this process's, from plugin/gc_pauses.py) or none of these (``other``: the loop's own code outside
the four calls, or waiting with requests queued and nothing run).

A gap runs from the end of one result to the end of the next. When the scheduler has nothing to do (no batch
to run, nothing waiting, nothing running) no output is owed: the next gap starts when a batch next runs.

Inside the scheduler a watch thread (plugin/stall_watch.py) samples the loop thread's Python stack while a gap
lasts past the threshold, so a stall also says where in the call its time went (``samples``), and whether the
scheduler held the GIL so long the watch could not run (``watch_late_s``).

The plugin reports ``report()`` in ``get_internal_state`` (``loop``). Standard library only (it runs inside
SGLang); the hooks never raise into SGLang's loop.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from . import gc_pauses, launcher_state, sglang_targets, stall_watch

logger = logging.getLogger(__name__)

# The scheduler's four calls each loop iteration: (module, class, method) per phase.
SCHEDULER = ("sglang.srt.managers.scheduler", "Scheduler")
PHASES: dict[str, str] = {
    "input": "process_input_requests",
    "schedule": "get_next_batch_to_run",
    "run": "run_batch",
    "result": "process_batch_result",
}
FREEZE_METHOD = "handle_freeze_gc"  # the scheduler's side of SGLang's /freeze_gc (0.5.17 and 0.5.23)
# A gap at least this long is kept: a decode step of the H200 pairs takes 5-45 ms and a long prefill chunk a
# few hundred, while the replays' pauses were 0.56-1.35 s; a quarter second is a stall a user notices.
DEFAULT_THRESHOLD_S = 0.25
THRESHOLD_ENV = "SPECTOWER_STALL_S"
DISABLE_ENV = "SPECTOWER_LOOP_STALLS"  # "0": not hooked
SAMPLES_KEPT = 16  # stack samples (and lateness entries) held for the newest gaps: <= 3 a stall
KEPT = 32  # the newest kept gaps (a replay showed 2-5 pauses per 4-minute run; a call runs up to 6)
BATCHES_KEPT = 4  # per gap, the batches that took the most time in it
# What ``input`` took, by what came in: on the H100 of 2026-12-05 every run after the first spent 3x its
# seconds in ``process_input_requests`` (14 s against 4.5 s a run) while every run took in the same requests,
# and the decode steps' output per second was the same to 0.3 %; so each call is filed under what it handled
# (``none`` for a turn with nothing received, the request class's name where all were one class, ``mixed``
# otherwise), which tells a slower empty turn from slower generate requests or slower control reads.
NO_INPUT, MIXED_INPUT, OTHER_INPUT = "none", "mixed", "other"
INPUT_KINDS_KEPT = 24  # request classes kept apart; past that, ``other`` (SGLang has a few dozen)
# ...and each batch's run and result by its forward mode (DECODE, EXTEND, MIXED, IDLE, ...), with an extend's
# new tokens: a prefill's GPU time, waited for in its result in the overlap loop, is where the draft model's
# pass over the prompts (skipped or not, plugin/gated_decode.py) shows; the decode steps' own counters
# (plugin/engine_counters.py) read the same for always off and learn on 2026-12-05's replays.
BATCH_MODES_KEPT = 8


def _capped_entry(table: dict[str, list[float]], key: str, kept: int, overflow: str,
                  width: int) -> list[float]:  # fmt: skip
    """``table[key]`` (``width`` zeros when new), or ``table[overflow]`` for a new key once ``kept`` keys are
    held: a few dozen names at most, however many kinds SGLang sends."""
    if key not in table and len(table) >= kept:
        key = overflow
    return table.setdefault(key, [0.0] * width)


def describe_batch(batch: Any) -> dict[str, Any]:
    """A batch as a stall shows it: its forward mode's name, its requests and, for an extend, its new tokens
    (``extend_num_tokens``; a result's copy of the batch keeps only ``extend_lens``, one per request)."""
    mode = getattr(getattr(batch, "forward_mode", None), "name", None)
    reqs = getattr(batch, "reqs", None)
    out: dict[str, Any] = {
        "mode": mode if isinstance(mode, str) else "?",
        "requests": len(reqs) if isinstance(reqs, list) else None,
        "tokens": None,
    }
    if out["mode"] in ("EXTEND", "MIXED"):
        tokens = getattr(batch, "extend_num_tokens", None)
        if not isinstance(tokens, int):
            lens = getattr(batch, "extend_lens", None)
            tokens = sum(x for x in lens if isinstance(x, int)) if isinstance(lens, list) else None
        out["tokens"] = tokens
    return out


class LoopStalls:
    """Times the scheduler loop's four calls; keeps the gaps between results of at least ``threshold_s``."""

    def __init__(
        self,
        threshold_s: float = DEFAULT_THRESHOLD_S,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
        gc_seconds: Callable[[], float] | None = None,
    ) -> None:
        self.threshold_s = threshold_s
        self._clock, self._wall = clock, wall
        # Cumulative seconds in this process's garbage collections (the knob plugin's gc_pauses), or None.
        self._gc_seconds = gc_seconds
        self.calls = dict.fromkeys(PHASES, 0)
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.longest_s = dict.fromkeys(PHASES, 0.0)
        # per kind of input (INPUT_KINDS_KEPT above): [calls, seconds, longest call, requests received]
        self.input_kinds: dict[str, list[float]] = {}
        # per forward mode (BATCH_MODES_KEPT above): [runs, run seconds, results, result seconds, new tokens]
        self.batch_modes: dict[str, list[float]] = {}
        self.gaps = 0  # every gap closed by a result
        self.stalls = 0  # those kept (>= threshold_s)
        self.stall_s = 0.0
        self.longest_stall_s = 0.0
        self.recent: deque[dict[str, Any]] = deque(maxlen=KEPT)
        self._idle = True  # nothing owed: the next run starts a gap
        self._gap_start: float | None = None
        # What the watch thread (plugin/stall_watch.py) reads and hands back: the call running now, the gap's
        # serial number, the stack samples and the watch's own lateness taken in it (by serial: the watch
        # runs on its own thread, so a sample may land just after the gap it was taken in has closed).
        self.phase_now: str | None = None
        self._serial = 0
        self._samples: deque[tuple[int, dict[str, Any]]] = deque(maxlen=SAMPLES_KEPT)
        self._late: dict[int, float] = {}
        self.watch: stall_watch.StallWatch | None = None  # the watch sampling this recorder's thread
        self._reset_gap()

    @classmethod
    def from_environment(cls, gc_seconds: Callable[[], float] | None = None) -> LoopStalls:
        """The threshold from ``SPECTOWER_STALL_S`` (seconds, > 0) when set and valid, else the default."""
        threshold = gc_pauses.positive_seconds_from_env(THRESHOLD_ENV, DEFAULT_THRESHOLD_S)
        return cls(threshold, gc_seconds=gc_seconds)

    def _reset_gap(self) -> None:
        self._serial += 1
        self._in_gap = dict.fromkeys(PHASES, 0.0)
        self._iterations = 0
        self._received = 0
        self._waiting_max = 0
        # by (mode, requests, tokens): a run and its result's copy are one entry, batches alike are pooled
        self._batches: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._gc_at_start = self._gc_now()

    def _gc_now(self) -> float:
        if self._gc_seconds is None:
            return 0.0
        try:
            return float(self._gc_seconds())
        except Exception:
            return 0.0

    def now(self) -> float:
        return self._clock()

    def enter(self, phase: str) -> float:
        """A call of the loop begins: it is what the scheduler is doing now; answers the time."""
        self.phase_now = phase
        return self._clock()

    # ---- the watch thread's side (plugin/stall_watch.py) ----------------------------------------------
    def gap_now(self, now: float) -> tuple[int, float, str | None] | None:
        """(serial, seconds so far, the call running) of the gap open at ``now``; None while idle."""
        start, serial, phase = self._gap_start, self._serial, self.phase_now
        if self._idle or start is None:
            return None
        return serial, now - start, phase

    def samples_taken(self, serial: int) -> int:
        return sum(1 for s, _ in list(self._samples) if s == serial)

    def add_sample(self, serial: int, sample: dict[str, Any]) -> None:
        self._samples.append((serial, sample))

    def note_late(self, serial: int, late_s: float) -> None:
        self._late[serial] = max(self._late.get(serial, 0.0), late_s)
        if len(self._late) > SAMPLES_KEPT:  # keep it small: only open gaps matter
            self._late.pop(next(iter(self._late), serial), None)  # the loop's thread may pop it first

    def _account(self, phase: str, started: float, ended: float) -> None:
        """A call of the loop ended: nothing runs now (for the watch), and its time counts."""
        self.phase_now = None
        took = ended - started
        self.calls[phase] += 1
        self.seconds[phase] += took
        self.longest_s[phase] = max(self.longest_s[phase], took)
        self._in_gap[phase] += took

    def input_done(self, started: float, received: int, kind: str = NO_INPUT) -> None:
        ended = self._clock()
        self._account("input", started, ended)
        self._received += received
        entry = _capped_entry(self.input_kinds, kind, INPUT_KINDS_KEPT, OTHER_INPUT, 4)
        took = ended - started
        entry[0] += 1
        entry[1] += took
        entry[2] = max(entry[2], took)
        entry[3] += received

    def schedule_done(self, started: float, has_batch: bool, waiting: int, running: int) -> None:
        self._account("schedule", started, self._clock())
        self._iterations += 1
        self._waiting_max = max(self._waiting_max, waiting)
        if sglang_targets.idle_turn(has_batch, waiting, running):
            self.idle()

    def idle(self) -> None:
        """Nothing to do: no output is owed until a batch next runs (a simulator's rank says so itself)."""
        self._idle = True

    def run_started(self, started: float) -> None:
        """A batch is about to run: after idling (or before the first result) the gap starts here."""
        if self._idle or self._gap_start is None:
            self._idle = False
            self._gap_start = started
            self._reset_gap()

    def run_done(self, started: float, batch: dict[str, Any]) -> None:
        ended = self._clock()
        self._account("run", started, ended)
        self._batch(batch)["run_s"] += ended - started
        entry = self._mode_entry(batch)
        entry[0] += 1
        entry[1] += ended - started
        entry[4] += batch.get("tokens") or 0

    def _mode_entry(self, batch: dict[str, Any]) -> list[float]:
        return _capped_entry(self.batch_modes, str(batch.get("mode") or "?"), BATCH_MODES_KEPT, "?", 5)

    def result_done(self, started: float, batch: dict[str, Any]) -> None:
        """A result processed: its tokens went out, so the gap since the last one closes here."""
        ended = self._clock()
        self._account("result", started, ended)
        self._batch(batch)["result_s"] += ended - started
        entry = self._mode_entry(batch)
        entry[2] += 1
        entry[3] += ended - started
        if self._gap_start is not None:
            self._close(ended - self._gap_start)
        self._gap_start = ended
        self._reset_gap()

    def _batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        # A batch's run and its result are one entry when they fall in one gap (the same mode, requests
        # and tokens: the result's copy of the run's batch); else each is its own.
        key = (batch.get("mode"), batch.get("requests"), batch.get("tokens"))
        entry = self._batches.get(key)
        if entry is None:
            entry = self._batches[key] = {**batch, "run_s": 0.0, "result_s": 0.0}
        return entry

    def _close(self, gap_s: float) -> None:
        self.gaps += 1
        if gap_s < self.threshold_s:
            return
        self.stalls += 1
        self.stall_s += gap_s
        self.longest_stall_s = max(self.longest_stall_s, gap_s)
        gc_s = max(0.0, self._gc_now() - self._gc_at_start)
        phases = {phase: round(s, 4) for phase, s in self._in_gap.items()}
        batches = sorted(self._batches.values(), key=lambda b: -(b["run_s"] + b["result_s"]))[:BATCHES_KEPT]
        serial = self._serial
        samples = [sample for s, sample in list(self._samples) if s == serial]
        self.recent.append({
            "at": round(self._wall(), 3),
            "seconds": round(gap_s, 4),
            "phases": phases,
            "gc_s": round(gc_s, 4),
            "other_s": round(max(0.0, gap_s - sum(self._in_gap.values())), 4),
            "iterations": self._iterations,
            "received": self._received,
            "waiting_max": self._waiting_max,
            "batches": [{**b, "run_s": round(b["run_s"], 4), "result_s": round(b["result_s"], 4)}
                        for b in batches],
            # what the scheduler's thread was doing (plugin/stall_watch.py): its stack after so long, and how
            # late the watch woke (it could not get the GIL) where it did
            "samples": samples,
            "watch_late_s": round(self._late.pop(serial, 0.0), 4),
        })  # fmt: skip

    def report(self) -> dict[str, Any]:
        """The ``loop`` block of the plugin's state: per phase its calls, seconds and longest call; the gaps
        between results, the stalls among them and the newest stalls with their breakdown (``at``: Unix
        seconds at the stall's end)."""
        return {
            "threshold_s": self.threshold_s,
            "phases": {
                p: {"calls": self.calls[p], "seconds": round(self.seconds[p], 6),
                    "longest_s": round(self.longest_s[p], 6)}
                for p in PHASES
            },
            "input_kinds": {
                kind: {"calls": int(e[0]), "seconds": round(e[1], 6), "longest_s": round(e[2], 6),
                       "requests": int(e[3])}
                for kind, e in self.input_kinds.items()
            },
            "batch_modes": {
                mode: {"runs": int(e[0]), "run_s": round(e[1], 6), "results": int(e[2]),
                       "result_s": round(e[3], 6), "tokens": int(e[4])}
                for mode, e in self.batch_modes.items()
            },
            "gaps": self.gaps,
            "stalls": self.stalls,
            "stall_seconds": round(self.stall_s, 6),
            "longest_stall_s": round(self.longest_stall_s, 6),
            "recent": list(self.recent),
            "watch": self.watch.report() if self.watch is not None else None,
        }


_STALLS: LoopStalls | None = None
_HOOKED = False


def hooked() -> bool:
    """Whether this process registered the loop hooks (what the knob plugin's state block shows)."""
    return _HOOKED


def _knob_gc_seconds() -> float:
    knob_gate = sys.modules.get("spectower.plugin.knob_gate")
    return float(knob_gate.gc_seconds()) if knob_gate is not None else 0.0


_WATCH: stall_watch.StallWatch | None = None  # this process's watch thread, started by register()


def stalls() -> LoopStalls:
    """This process's recorder (created on first use, so in the scheduler process, on its thread that calls
    the hooks); the process's watch thread (plugin/stall_watch.py), where register() started one, samples
    that thread's stack in a stall from then on."""
    global _STALLS
    if _STALLS is None:
        _STALLS = LoopStalls.from_environment(gc_seconds=_knob_gc_seconds)
        if _WATCH is not None:
            _WATCH.attach(_STALLS, threading.get_ident())
            _STALLS.watch = _WATCH
    return _STALLS


def _start_watch() -> None:
    """One watch thread in each process that registers the hooks: in SGLang's launcher (its HTTP server and
    tokenizer manager) it only logs when the process's Python was held (its wakes late); in a scheduler it
    also samples the loop's stack in a stall. ``SPECTOWER_STALL_STACKS=0``: none."""
    global _WATCH
    if _WATCH is not None or os.environ.get(stall_watch.DISABLE_ENV, "1") == "0":
        return
    try:
        _WATCH = stall_watch.StallWatch(None, threading.get_ident())
        _WATCH.start()
    except Exception:
        _warn_once("watch")


_WARNED: set[str] = set()


def _warn_once(key: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning("spectower loop stalls: recording error in %s; the scheduler runs on", key,
                       exc_info=True)  # fmt: skip


def input_kind(recv_reqs: Any) -> str:
    """What a ``process_input_requests`` call handled: ``none``, its requests' class name, or ``mixed``."""
    if not recv_reqs:
        return NO_INPUT
    try:
        names = {type(req).__name__ for req in recv_reqs}
    except TypeError:
        return OTHER_INPUT
    return names.pop() if len(names) == 1 else MIXED_INPUT


def hook_process_input_requests(original: Callable[..., Any], scheduler: Any, recv_reqs: Any, *args: Any,
                                **kwargs: Any) -> Any:  # fmt: skip
    recorder = stalls()
    started = recorder.enter("input")
    try:
        return original(scheduler, recv_reqs, *args, **kwargs)
    finally:
        try:
            recorder.input_done(started, sglang_targets.size(recv_reqs), input_kind(recv_reqs))
        except Exception:
            _warn_once("input")


def hook_get_next_batch_to_run(
    original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    recorder = stalls()
    started = recorder.enter("schedule")
    plan = original(scheduler, *args, **kwargs)
    try:
        recorder.schedule_done(started, *sglang_targets.loop_turn(plan, scheduler))
    except Exception:
        _warn_once("schedule")
    return plan


def hook_run_batch(
    original: Callable[..., Any], scheduler: Any, batch: Any, *args: Any, **kwargs: Any
) -> Any:
    recorder = stalls()
    started = recorder.enter("run")
    try:
        recorder.run_started(started)
        described = describe_batch(batch)
    except Exception:
        _warn_once("run")
        described = {"mode": "?", "requests": None, "tokens": None}
    try:
        return original(scheduler, batch, *args, **kwargs)
    finally:
        try:
            recorder.run_done(started, described)
        except Exception:
            _warn_once("run")


def hook_process_batch_result(original: Callable[..., Any], scheduler: Any, batch: Any, *args: Any,
                              **kwargs: Any) -> Any:  # fmt: skip
    recorder = stalls()
    started = recorder.enter("result")
    try:
        return original(scheduler, batch, *args, **kwargs)
    finally:
        try:
            recorder.result_done(started, describe_batch(batch))
        except Exception:
            _warn_once("result")


HOOKS: dict[str, Callable[..., Any]] = {
    "input": hook_process_input_requests,
    "schedule": hook_get_next_batch_to_run,
    "run": hook_run_batch,
    "result": hook_process_batch_result,
}


def missing_targets() -> list[str]:
    """The scheduler methods this SGLang lacks (0.5.17 and 0.5.23 have all four)."""
    return sglang_targets.missing_methods(*SCHEDULER, PHASES.values())


def register() -> None:
    """Entry point (``sglang.srt.plugins``): SGLang's ``load_plugins()`` calls it in each of its processes."""
    registry = sglang_targets.hook_registry("spectower loop stalls", DISABLE_ENV, logger, missing_targets)
    if registry is None:
        return
    HookRegistry, HookType = registry
    module_name, class_name = SCHEDULER
    for phase, method in PHASES.items():
        HookRegistry.register(f"{module_name}.{class_name}.{method}", HOOKS[phase], HookType.AROUND)
    # the scheduler's freeze (SGLang's /freeze_gc), after which its frozen objects are counted again: the
    # count walks every frozen object (gc_pauses.FrozenCount), so it is not taken on every /server_info read
    freeze = not sglang_targets.missing_methods(module_name, class_name, [FREEZE_METHOD])
    if freeze:
        HookRegistry.register(f"{module_name}.{class_name}.{FREEZE_METHOD}", gc_pauses.hook_freeze,
                              HookType.AROUND)  # fmt: skip
    global _HOOKED
    _HOOKED = True
    _start_watch()
    # the launcher's side of a stall (its collections, its Python held): plugin/launcher_state.py
    launcher = launcher_state.register(HookRegistry, HookType.AROUND)
    # SGLang configures logging after the plugins load: print the one line that says what was hooked.
    print(f"spectower loop stalls: AROUND hooks on {class_name}.{', '.join(PHASES.values())}"
          f"{', ' + FREEZE_METHOD if freeze else ''}"
          f"{', ' + '.'.join(launcher_state.TARGET[1:]) if launcher else ''} (pid {os.getpid()})",
          file=sys.stderr, flush=True)  # fmt: skip
