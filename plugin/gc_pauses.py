"""Python's garbage collections in the process the plugin runs in (SGLang's scheduler), the long ones kept.

Why: under Azure's replay on the H200 every policy's server paused 0.56-1.35 s a few times, each pause a
stretch of arrivals whose TTFT fell one for one with their arrival time, and those pauses made the runs' p99
TTFT (data/gpu-runs/h200-8b-pair-triton-replay-2026-12-04). A full collection over the objects of a
scheduler holding tens of requests with prompts of thousands of tokens is one candidate. SGLang logs its
tokenizer manager's long collections (``--gc-warning-threshold-secs``) but not the scheduler's; this counts
the scheduler's, through ``gc.callbacks``, and the plugin reports them in ``get_internal_state`` (``gc``), so
a stall can be matched to a collection by its wall-clock time.

Standard library only (it runs inside SGLang). The callback never raises: an exception in a ``gc`` callback
would be printed on every collection and could hide the scheduler's own errors.
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

# A collection longer than this is kept and counted as long: a decode step of the H200 pairs takes 5-45 ms,
# so 50 ms is a step or more lost.
DEFAULT_THRESHOLD_S = 0.05
THRESHOLD_ENV = "SPECTOWER_GC_LONG_S"
# The newest long collections kept with their time (the report lists them): a few per replay were seen.
KEPT = 16


def positive_seconds_from_env(name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` when set to a finite number > 0, else ``default``.

    A plugin runs inside SGLang's processes, where a bad setting must not stop a launch: it falls back."""
    raw = os.environ.get(name)
    try:
        value = float(raw) if raw is not None else default
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


class GcPauses:
    """Times every collection of this process; keeps the long ones (at least ``threshold_s``)."""

    def __init__(
        self,
        threshold_s: float = DEFAULT_THRESHOLD_S,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.threshold_s = threshold_s
        self._clock, self._wall = clock, wall
        self._started: float | None = None
        self.collections = 0
        self.seconds = 0.0  # every collection's time
        self.long = 0
        self.long_s = 0.0
        self.longest_s = 0.0
        # the newest long ones: at (Unix seconds), generation, seconds
        self.recent: deque[dict[str, Any]] = deque(maxlen=KEPT)

    @classmethod
    def from_environment(cls) -> GcPauses:
        """The threshold from ``SPECTOWER_GC_LONG_S`` (seconds, > 0) when set and valid, else the default."""
        return cls(positive_seconds_from_env(THRESHOLD_ENV, DEFAULT_THRESHOLD_S))

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks``' signature: ``phase`` "start" or "stop", ``info`` with the ``generation``."""
        try:
            if phase == "start":
                self._started = self._clock()
                return
            if phase != "stop" or self._started is None:
                return
            took = self._clock() - self._started
            self._started = None
            self.collections += 1
            self.seconds += took
            if took >= self.threshold_s:
                self.long += 1
                self.long_s += took
                self.longest_s = max(self.longest_s, took)
                generation = info.get("generation") if isinstance(info, dict) else None
                self.recent.append({"at": round(self._wall(), 3), "generation": generation,
                                    "seconds": round(took, 4)})  # fmt: skip
        except Exception:  # a gc callback must never raise (the module's docstring)
            self._started = None

    def report(self) -> dict[str, Any]:
        """The ``gc`` block of the plugin's state: every collection's count and time, the long ones', and the
        newest long ones with their wall-clock time (Unix seconds)."""
        return {
            "threshold_s": self.threshold_s,
            "collections": self.collections,
            "seconds": round(self.seconds, 6),
            "long": self.long,
            "long_seconds": round(self.long_s, 6),
            "longest_s": round(self.longest_s, 6),
            "recent_long": list(self.recent),
            # objects moved out of the collector's scans by gc.freeze() (SGLang's /freeze_gc): 0 until then;
            # the read-back of a freeze, and why a process's full collections stopped taking long
            "frozen": FROZEN.count(),
        }


class FrozenCount:
    """``gc.get_freeze_count()``, read only where it may have changed.

    Why: CPython counts the frozen objects by walking their whole list, and after SGLang's ``/freeze_gc`` a
    scheduler holds about a million of them, scattered in memory: each count took 70-100 ms of the
    scheduler's thread on the H100 of 2026-12-05 (``loop.input_kinds``: every ``GetInternalStateReq`` 70-100
    ms, 93 of them in a 150-s replay under learn, which reads ``/server_info`` every 2 s: 7 % of the loop's
    time, in which no batch was launched), and as much again in the launcher. So the count is read while it is
    0 (an empty list costs nothing) and after each freeze (``freeze_happened``, which the plugin's hooks on
    SGLang's freeze handlers call); in between the last count stands. A freeze SGLang makes past those hooks
    after the first one reads as the count before it, until the next hooked freeze.
    """

    def __init__(self, count: Callable[[], int] = gc.get_freeze_count) -> None:
        self._count = count
        self._last: int | None = None

    def count(self) -> int:
        if not self._last:  # never read, or nothing frozen yet: cheap, and the first freeze shows
            self._last = self._count()
        return self._last

    def freeze_happened(self) -> None:
        """A freeze ran in this process: the next read counts again (once)."""
        self._last = None


FROZEN = FrozenCount()  # this process's: the scheduler's gc block and the launcher's read it


def hook_freeze(original: Callable[..., Any], owner: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND hook on a synchronous freeze handler (the scheduler's ``handle_freeze_gc``)."""
    try:
        return original(owner, *args, **kwargs)
    finally:
        FROZEN.freeze_happened()


def hook_freeze_async(original: Callable[..., Any], owner: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND hook on an async freeze (the launcher's ``TokenizerManager.freeze_gc``): HookRegistry's wrapper
    is synchronous, so this hands back a coroutine that awaits SGLang's and then marks the freeze."""

    async def frozen() -> Any:
        try:
            return await original(owner, *args, **kwargs)
        finally:
            FROZEN.freeze_happened()

    return frozen()


def install(pauses: GcPauses) -> None:
    """Time this process's collections with ``pauses`` (once: a second install of the same one is a no-op)."""
    if pauses.callback not in gc.callbacks:
        gc.callbacks.append(pauses.callback)


def uninstall(pauses: GcPauses) -> None:
    """Stop timing with ``pauses`` (tests; the plugin keeps it for the process's life)."""
    while pauses.callback in gc.callbacks:
        gc.callbacks.remove(pauses.callback)
