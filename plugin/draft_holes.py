"""Which running requests have draft-KV holes, and what the batch being run does about them (the
gated-decode plugin's tracker, plugin/gated_decode.py, which says why: a batch the knob gates skips the draft
model's extend, a prefill may skip its pass over the prompts, and a drain holds drafting until the requests
that missed them have finished).

Runs INSIDE SGLang (imported by the gated-decode plugin): the standard library only. It asks the knob plugin
(plugin/knob_gate.py) in this process, through ``sys.modules``, whether a batch may skip.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

SKIP_ENV = "SPECTOWER_GATED_SKIP_EXTEND"
PREFILL_SKIP_ENV = "SPECTOWER_SKIP_DRAFT_PREFILL"
DRAIN_ENV = "SPECTOWER_DRAIN_MAX_STEPS"
DEFAULT_DRAIN_MAX_STEPS = 4096


def _ask_knob_plugin(question: str, without: bool, *args: Any) -> bool:
    """The knob plugin's answer to ``question`` (one of its functions, given ``args``) in this process;
    ``without`` where no knob plugin runs here; False where asking fails (never raised into SGLang's step)."""
    plugin = sys.modules.get("spectower.plugin.knob_gate")
    if plugin is None:
        return without
    try:
        return bool(getattr(plugin, question)(*args))
    except Exception:
        return False


def _knob_allows_skip() -> bool:
    """Whether a 0-step batch may skip its draft extend: the knob plugin says its ceiling gated the batch
    and nothing needs the draft warm now (``extend_skip_allowed``), or no knob plugin runs in this process
    (SGLang's own bands chose 0 steps; the drain covers their way back)."""
    return _ask_knob_plugin("extend_skip_allowed", without=True)


def _knob_allows_prefill_skip(next_batch_size: int | None) -> bool:
    """Whether a prefill batch may skip the draft's extend over its prompts, given the decode batch its
    requests join next (``None``: not known): only where the knob plugin runs in this process and says that
    batch will be gated with nothing needing the draft warm (``prefill_skip_allowed``)."""
    return _ask_knob_plugin("prefill_skip_allowed", False, next_batch_size)


class ExtendSkip:
    """Which running requests have draft-KV holes, and what the batch being run does about them.

    One per scheduler process (SGLang calls every hook on its scheduler thread). ``allowed`` says whether
    a 0-step batch may skip (injectable; ``_knob_allows_skip`` inside SGLang)."""

    def __init__(
        self,
        allowed: Callable[[], bool] = _knob_allows_skip,
        enabled: bool | None = None,
        drain_max_steps: int | None = None,
        prefill_allowed: Callable[[int | None], bool] = _knob_allows_prefill_skip,
    ) -> None:
        self.allowed = allowed
        self.prefill_allowed = prefill_allowed
        self.enabled = os.environ.get(SKIP_ENV, "1") != "0" if enabled is None else enabled
        self.prefill_enabled = self.enabled and os.environ.get(PREFILL_SKIP_ENV, "1") != "0"
        self.prefill_worker: Any = None  # the EAGLEWorkerV2 running the current prefill batch
        # requests still decoding beside the prefill batch the scheduler just chose (None: not known)
        self.running_beside_prefill: int | None = None
        self.prefills_skipped = 0
        if drain_max_steps is None:
            try:
                drain_max_steps = int(os.environ.get(DRAIN_ENV, DEFAULT_DRAIN_MAX_STEPS))
            except ValueError:
                drain_max_steps = DEFAULT_DRAIN_MAX_STEPS
        self.drain_max_steps = max(0, drain_max_steps)
        self.holed: set[Any] = set()
        self.worker: Any = None  # the EAGLEWorkerV2 running the current decode batch
        self.reqs: Sequence[Any] = ()  # the decode batch's requests (their ids read only when needed)
        self.skip_now = False
        self.draining_now = False
        self.drain_steps = 0
        self.batches_skipped = 0
        self.batches_drained = 0
        self.drains_cut_short = 0

    def begin_batch(self, worker: Any, reqs: Sequence[Any]) -> None:
        self.worker, self.reqs, self.skip_now, self.draining_now = worker, reqs, False, False
        if self.holed:
            self.holed.intersection_update(self._rids())  # a finished request leaves the batch for good

    def end_batch(self) -> None:
        self.worker, self.reqs, self.skip_now, self.draining_now = None, (), False, False

    def _rids(self) -> list[Any]:
        # Read per batch only while some request is holed or the batch skips: drafting batches never pay it.
        return [getattr(req, "rid", None) for req in self.reqs]

    def steps_for(self, wanted: int) -> int:
        """The steps this batch runs, given what SGLang's bands and the knob's gate want: 0 while draining."""
        self.draining_now = False
        if wanted > 0 and self.holed:
            if self.drain_steps < self.drain_max_steps:
                self.drain_steps += 1
                self.batches_drained += 1
                self.draining_now = True
                return 0
            self.drains_cut_short += 1  # drafts anyway: the requests still holed recover cold
            self.holed.clear()
        if not self.holed:
            self.drain_steps = 0
        return wanted

    def holes_pending(self) -> bool:
        """Whether a request of the batch being run still has holes (a window's warm part waits for none)."""
        return bool(self.holed)

    def forget_holes(self) -> None:
        """Stop waiting for the holed requests (a window's warm part ran out): they draft again and recover
        cold, as after a drain cut short."""
        if self.holed:
            self.drains_cut_short += 1
            self.holed.clear()
        self.drain_steps = 0

    def mark(self, steps: int) -> None:
        """The batch runs ``steps``: outside a drain, a 0-step batch skips its draft extend where allowed."""
        if steps == 0 and not self.draining_now and self.enabled and self.allowed():
            self.skip_now = True
            self.batches_skipped += 1
            self.holed.update(self._rids())

    def may_skip_prefill(self, new_requests: int) -> bool:
        """Whether the prefill batch being run (``new_requests`` requests) may skip the draft's extend over
        its prompts: the knob plugin judges the decode batch they join next, the requests running beside
        them and their own (not known where the scheduler's hook did not count them)."""
        if not self.prefill_enabled or self.prefill_worker is None:
            return False
        running = self.running_beside_prefill
        return self.prefill_allowed(None if running is None else running + new_requests)

    def prefill_skipped(self, reqs: Sequence[Any]) -> None:
        """The prefill batch skipped the draft's extend: its requests are holed (the drain waits for them
        once the knob goes up)."""
        self.holed.update(getattr(req, "rid", None) for req in reqs)
        self.prefills_skipped += 1

    def report(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "holed_requests": len(self.holed),
            "batches_skipped": self.batches_skipped,
            "batches_drained": self.batches_drained,
            "drains_cut_short": self.drains_cut_short,
            "prefills_skipped": self.prefills_skipped,
        }


_SKIP: ExtendSkip | None = None


def extend_skip() -> ExtendSkip:
    """This process's request-hole tracker (created on first use)."""
    global _SKIP
    if _SKIP is None:
        _SKIP = ExtendSkip()
    return _SKIP
