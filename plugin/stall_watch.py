"""What the scheduler's thread was doing during a stall: its Python stack, sampled by a watch thread.

Why: the loop-stall recorder (plugin/loop_stalls.py) says which of the scheduler loop's four calls a stall's
time went to, and a garbage collection's share, but not what inside that call took it: waiting for the GPU
(a stack ending in a CUDA synchronize), the radix cache's eviction, a pickle of a large input, the
detokenizer's socket. A watch thread wakes every ``POLL_S``; while a gap between two batch results has lasted
the stall threshold (then twice it, four times it: at most ``SAMPLES_PER_STALL``), it takes the scheduler
thread's stack (``sys._current_frames``) and hands it to the recorder, which keeps it with the stall when the
gap closes as one. A watch that wakes late by ``LATE_S`` or more could not get Python's interpreter lock
(GIL) in time: the scheduler held it (a collection, or long pure-Python work), which is kept too
(``watch_late_s``), since a thread holding the GIL cannot be sampled while it holds it. One such thread runs
in each process that registers the loop hooks: in SGLang's launcher, which serves HTTP and runs the tokenizer
manager, it has no loop to sample and only logs its late wakes (``LOG_LATE_S``), so a stall the client saw
but the scheduler did not can be found there.

Cost: a wake every 50 ms that reads three attributes; a stack is taken only inside a stall. Standard library
only (it runs inside SGLang); the thread never dies on an error (one warning, then it goes on).
``SPECTOWER_STALL_STACKS=0`` at launch turns it off.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loop_stalls import LoopStalls

logger = logging.getLogger(__name__)

DISABLE_ENV = "SPECTOWER_STALL_STACKS"  # "0": no watch thread
POLL_S = 0.05  # a wake every 50 ms: a quarter-second stall is seen within a fifth of its length
LATE_S = 0.1  # a wake this late: the watch could not get the GIL
LOG_LATE_S = 0.25  # ...and this late, a line in the server's log (a stall a user notices)
MAX_LATE_LOGGED = 1000  # lines a process logs at most
LATE_KEPT = 16  # the newest late wakes (>= LOG_LATE_S) kept with their time for the report
SAMPLES_PER_STALL = 3  # at the threshold, twice it, four times it
STACK_FRAMES = 8  # the innermost frames kept of each sample
_SITE_MARKERS = ("site-packages/", "dist-packages/")


def frame_text(frame: traceback.FrameSummary) -> str:
    """``sglang/srt/managers/scheduler.py:2104 process_batch_result``: the path from the package on."""
    path = frame.filename
    for marker in _SITE_MARKERS:
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = "/".join(path.rsplit("/", 2)[-2:])
    return f"{path}:{frame.lineno} {frame.name}"


def clock_text(ts: float, utc: bool = True) -> str:
    """``09:30:29.5``: a Unix time of day to the tenth of a second (UTC, or this machine's zone), as a stall
    and a late wake are told, so the two can be set side by side."""
    return time.strftime("%H:%M:%S", (time.gmtime if utc else time.localtime)(ts)) + f".{int(ts * 10) % 10}"


def stack_of(thread_ident: int, frames: int = STACK_FRAMES) -> list[str] | None:
    """The innermost ``frames`` of a thread's Python stack, innermost last; None when it is not running."""
    frame = sys._current_frames().get(thread_ident)
    if frame is None:
        return None
    return [frame_text(f) for f in traceback.extract_stack(frame)[-frames:]]


class StallWatch:
    """Samples the scheduler thread's stack during a stall and notes when the watch itself ran late; without a
    recorder (SGLang's launcher: its HTTP server and tokenizer manager), only logs its late wakes."""

    def __init__(
        self,
        recorder: LoopStalls | None,
        thread_ident: int,
        clock: Callable[[], float] = time.perf_counter,
        poll_s: float = POLL_S,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.recorder = recorder
        self.thread_ident = thread_ident
        self._clock = clock
        self._wall = wall
        self.poll_s = poll_s
        self.wakes = 0
        self.sampled = 0
        self.late_logged = 0
        # every wake LOG_LATE_S late or more: how many, their seconds, and the newest with their Unix time (a
        # launcher's report: plugin/launcher_state.py)
        self.held = 0
        self.held_s = 0.0
        self.recent_held: deque[dict[str, float]] = deque(maxlen=LATE_KEPT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def attach(self, recorder: LoopStalls, thread_ident: int) -> None:
        """From now on sample ``thread_ident``'s stack in the stalls ``recorder`` times (its clock too)."""
        self.thread_ident = thread_ident
        self._clock = recorder.now
        self.recorder = recorder

    def watch_once(self, now: float, late_s: float = 0.0) -> None:
        """One wake at ``now`` (the recorder's clock), ``late_s`` after it was due."""
        self.wakes += 1
        if late_s >= LOG_LATE_S:
            self._log_late(late_s)
        if self.recorder is None:
            return
        busy = self.recorder.gap_now(now)
        if busy is None:
            return
        serial, elapsed, phase = busy
        if late_s >= LATE_S:
            self.recorder.note_late(serial, late_s)
        taken = self.recorder.samples_taken(serial)
        if taken >= SAMPLES_PER_STALL or elapsed < self.recorder.threshold_s * (1 << taken):
            return
        stack = stack_of(self.thread_ident)
        if stack is not None:
            self.sampled += 1
            self.recorder.add_sample(serial, {"after_s": round(elapsed, 3), "phase": phase, "stack": stack})

    def _log_late(self, late_s: float) -> None:
        """One line per late wake (the first MAX_LATE_LOGGED), with its UTC time, for the server's log, so a
        replay's stall can be set against it afterwards; the newest are kept for the report too."""
        at = self._wall()
        self.held += 1
        self.held_s += late_s
        self.recent_held.append({"at": round(at, 3), "seconds": round(late_s, 4)})
        self.late_logged += 1
        if self.late_logged > MAX_LATE_LOGGED:
            return
        message = (f"spectower watch: pid {os.getpid()}: this process's Python was held {late_s:.2f} s "
                   f"(the GIL, a collection or the CPU), to {clock_text(at)} UTC")  # fmt: skip
        if logging.getLogger().handlers:
            logger.warning(message)
        else:
            print(message, file=sys.stderr, flush=True)

    def _run(self) -> None:
        due = self._clock() + self.poll_s
        while not self._stop.wait(max(0.0, due - self._clock())):
            now = self._clock()
            try:
                self.watch_once(now, now - due)
            except Exception:  # never let the watch die on one bad wake
                if not self._warned:
                    self._warned = True
                    logger.warning("spectower stall watch: a wake failed; it goes on", exc_info=True)
            due = now + self.poll_s

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="spectower-stall-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def report(self) -> dict[str, Any]:
        return {"poll_s": self.poll_s, "wakes": self.wakes, "sampled": self.sampled,
                "late_logged": self.late_logged, "held": self.held, "held_seconds": round(self.held_s, 4),
                "recent_held": list(self.recent_held)}  # fmt: skip
