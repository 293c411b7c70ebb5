"""Exploration: which decode batches run the other mode than the ceiling says, so that the engine counters
(control/engine_counters.py) measure drafted and gated steps at every load the server sees (issue #14).

Standard library only: the SGLang plugin's gate (control/sglang_plugin.py) and the simulator's ranks
(simulator/engine.py) use this one schedule, so both explore the same batches.

A share ``s`` of each batch-size bin's batches explores, in runs of ``RUN_LENGTH`` consecutive batches: a
bin's first run starts at its ``period``-th batch (``period = round(1 / s)``,
``knob_contract.explore_period``: as soon as single-batch exploration would have), the next ones every
``period x RUN_LENGTH`` batches after it, so a bin explores ``1 / period`` of its batches.

Why runs, not single batches: on the H200 (gpu/README.md, 2026-11-30 evening) single gated batches among
drafting ones served 4875 tok/s of step time at batch 33-64, where a gated stream at that load serves about
as much as a plain server (~7700): the first step after a mode switch pays for the switch, and with
single batches every explored step is such a first step, so the estimate favoured drafting (1.55 x where
the sweep measured 0.95 x). In a run, only the first explored batch and the first batch after the run
switch; they are marked ``settling`` and the counters keep them apart, so both modes' rates are the
rates of a steady stream. Runs also cut the entries a switch appends to SGLang's never-trimmed override log
by ``RUN_LENGTH``.
"""

from __future__ import annotations

from spectower.control.engine_counters import bin_of

# Batches per exploration run: the switch's first step (not counted) is one in 4; longer runs would leave a
# bin fewer runs, and the learn policy needs runs in 3 intervals of a bin before it trusts the bin.
RUN_LENGTH = 4


class ExploreSchedule:
    """Per process (one DP rank): counts batches per bin and says which explore. Not thread-safe by itself:
    its callers hold their own lock or run on SGLang's scheduler thread."""

    def __init__(self) -> None:
        self._bin_batches: dict[int, int] = {}
        self._left = 0  # batches still to explore in the current run
        self._last = False  # whether the previous batch explored

    def next(self, batch_size: int, period: int) -> tuple[bool, bool]:
        """(explore, settling) for the next decode batch; ``period`` 0 means exploring is off or paused
        (a lock holds the knob): nothing explores and a run under way ends.

        ``settling``: this batch switches into a run or is the first one after it (its step pays the switch).
        """
        if period <= 0:
            self._left = 0
            explore = False
        else:
            key = bin_of(batch_size)
            seen = self._bin_batches.get(key, 0) + 1
            self._bin_batches[key] = seen
            if self._left > 0:
                self._left -= 1
                explore = True
            elif seen % (period * RUN_LENGTH) == period:
                self._left = RUN_LENGTH - 1
                explore = True
            else:
                explore = False
        settling = explore != self._last
        self._last = explore
        return explore, settling
