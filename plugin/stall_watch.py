"""What the scheduler's thread was doing during a stall: its Python stack, sampled by a watch thread.

Why: the loop-stall recorder (plugin/loop_stalls.py) says which of the scheduler loop's four calls a stall's
time went to, and a garbage collection's share, but not what inside that call took it: waiting for the GPU
(a stack ending in a CUDA synchronize), the radix cache's eviction, a pickle of a large input, the
detokenizer's socket. A watch thread wakes every ``POLL_S``; while a gap between two batch results has lasted
the stall threshold (then twice it, four times it: at most ``SAMPLES_PER_STALL``), it takes the scheduler
thread's stack (``sys._current_frames``) and hands it to the recorder, which keeps it with the stall when the
gap closes as one. A watch that wakes late by ``LATE_S`` or more could not get Python's interpreter lock
(GIL) in time: the scheduler held it (a collection, or long pure-Python work), which is kept too
(``watch_late_s``), since a thread holding the GIL cannot be sampled while it holds it.

Cost: a wake every 50 ms that reads three attributes; a stack is taken only inside a stall. Standard library
only (it runs inside SGLang); the thread never dies on an error (one warning, then it goes on).
``SPECTOWER_STALL_STACKS=0`` at launch turns it off.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loop_stalls import LoopStalls

logger = logging.getLogger(__name__)

DISABLE_ENV = "SPECTOWER_STALL_STACKS"  # "0": no watch thread
POLL_S = 0.05  # a wake every 50 ms: a quarter-second stall is seen within a fifth of its length
LATE_S = 0.1  # a wake this late: the watch could not get the GIL
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


def stack_of(thread_ident: int, frames: int = STACK_FRAMES) -> list[str] | None:
    """The innermost ``frames`` of a thread's Python stack, innermost last; None when it is not running."""
    frame = sys._current_frames().get(thread_ident)
    if frame is None:
        return None
    return [frame_text(f) for f in traceback.extract_stack(frame)[-frames:]]


class StallWatch:
    """Samples the scheduler thread's stack during a stall and notes when the watch itself ran late."""

    def __init__(
        self,
        recorder: LoopStalls,
        thread_ident: int,
        clock: Callable[[], float] = time.perf_counter,
        poll_s: float = POLL_S,
    ) -> None:
        self.recorder = recorder
        self.thread_ident = thread_ident
        self._clock = clock
        self.poll_s = poll_s
        self.wakes = 0
        self.sampled = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def watch_once(self, now: float, late_s: float = 0.0) -> None:
        """One wake at ``now`` (the recorder's clock), ``late_s`` after it was due."""
        self.wakes += 1
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
        return {"poll_s": self.poll_s, "wakes": self.wakes, "sampled": self.sampled}
