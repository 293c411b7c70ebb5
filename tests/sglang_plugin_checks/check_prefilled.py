"""The decode counters mark the steps that carried a prefill (plugin 0.4.14), inside SGLang's own classes: the
knob plugin's hook on the real (HookRegistry-wrapped) ``Scheduler.get_next_batch_to_run`` tells a prefill
batch by SGLang's own ``ForwardMode`` on a ``ScheduleBatch`` in its own ``NextBatchPlan``
(``sglang_targets.prefill_turn``) and notes it to the counters (``EngineCounters.note_prefill``); the real
AdaptiveController asks the real (hooked) AdaptiveSpeculativeParams for each decode batch's steps (the step
begins) and feeds it the verify results (the step ends).

CONSTRUCTED (see _harness.py for the rest): ``get_next_batch_to_run``'s body, which needs a model and a KV
pool: it answers SGLang's own ``NextBatchPlan`` with the batch the check chose; the ``ScheduleBatch`` objects
(``object.__new__`` plus the ``forward_mode`` the scheduler sets: ``prepare_for_extend`` EXTEND,
``mix_with_running`` MIXED, ``prepare_for_decode`` DECODE, ``prepare_for_idle`` IDLE). The counters' clock is
a fake one.

The loop is the overlap scheduler's: each turn chooses a batch (a decode batch is launched: its step begins)
and then processes the result of the batch launched the turn before (a decode result ends its step). A prefill
chosen while decode step D1 is in flight lands in D2's span: D2 is the prefilled step, not D1.

Argument: the adaptive config path. Prints one JSON object: the rule's answer per forward mode, each decode
step's end with the counters' prefilled steps so far, and the published counters.
"""

from __future__ import annotations

import sys
from typing import Any

import _harness

BATCH = 16


def install_next_batch() -> None:
    """``Scheduler.get_next_batch_to_run``'s body, before load_plugins() wraps it: the check's choice."""
    from sglang.srt.managers.schedule_batch import NextBatchPlan
    from sglang.srt.managers.scheduler import Scheduler

    def next_batch(self: Any, running_batch: Any = None, last_batch: Any = None, **kwargs: Any) -> Any:
        return NextBatchPlan(batch_to_run=self._next_batch, running_batch=running_batch)

    Scheduler.get_next_batch_to_run = next_batch  # type: ignore[method-assign]


def schedule_batch(mode_name: str | None) -> Any:
    """A ``ScheduleBatch`` with SGLang's ``ForwardMode.<mode_name>`` (None: no batch to run)."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    if mode_name is None:
        return None
    batch = object.__new__(ScheduleBatch)
    batch.forward_mode = ForwardMode[mode_name]
    batch.reqs = []
    return batch


def rule_answers(scheduler: Any) -> dict[str, bool]:
    """``sglang_targets.prefill_turn`` on SGLang's own plan and batch per forward mode, and on an older
    SGLang's answer (the batch itself)."""
    from sglang.srt.managers.schedule_batch import NextBatchPlan
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from spectower.plugin import sglang_targets

    running = schedule_batch("DECODE")
    answers = {name: sglang_targets.prefill_turn(NextBatchPlan(batch_to_run=schedule_batch(name),
                                                               running_batch=running), scheduler)
               for name in ForwardMode.__members__}  # fmt: skip
    answers["no batch"] = sglang_targets.prefill_turn(NextBatchPlan(batch_to_run=None, running_batch=running),
                                                      scheduler)  # fmt: skip
    answers["EXTEND, the batch itself"] = sglang_targets.prefill_turn(schedule_batch("EXTEND"), scheduler)
    return answers


def main() -> None:
    config_path = sys.argv[1]
    install_next_batch()
    plugin, scheduler, controller, _params, _worker = _harness.start_decoding(config_path)
    counters = plugin.engine_counters_state()
    clock = _harness.FakeClock()
    counters.clock = clock
    scheduler.waiting_queue = []
    in_flight: list[str] = []  # the decode batch launched last turn, whose result this turn processes
    ends: list[dict[str, Any]] = []

    def turn(mode_name: str | None) -> None:
        """One turn of the overlap loop: choose (and launch) a batch, then process last turn's result."""
        scheduler._next_batch = schedule_batch(mode_name)
        scheduler.get_next_batch_to_run(running_batch=schedule_batch("DECODE"), last_batch=None)
        if mode_name == "DECODE":
            controller.activate_step_by_batch(BATCH)  # its step begins
        clock.now += 0.010
        if in_flight and in_flight.pop() == "DECODE":
            controller.on_verify_complete([2] * BATCH, batch_size=BATCH)  # its step ends
            i = counters.bin_index(BATCH)
            steps = sum(counters.steps[mode][i] for mode in ("drafted", "gated"))
            prefilled = sum(counters.prefilled[mode]["steps"][i] for mode in ("drafted", "gated"))
            ends.append({"steps": steps, "prefilled": prefilled})
        in_flight.append(mode_name or "none")

    # D1 in flight when the prefill is chosen: D2 carries it; two prefills (EXTEND, then MIXED) before one
    # step make one prefilled step; a plain stream after them: none
    for mode_name in ("DECODE", "DECODE", "EXTEND", "DECODE", "DECODE", "MIXED", "EXTEND", "DECODE",
                      "DECODE", "DECODE", "IDLE", "DECODE", "DECODE"):  # fmt: skip
        turn(mode_name)
    state = _harness.get_state(scheduler)["spectower"]
    _harness.emit({"plugin_loaded": plugin is not None, "rule": rule_answers(scheduler), "ends": ends,
                   "counters": state["counters"], "plugin_version": state["plugin_version"]})  # fmt: skip


if __name__ == "__main__":
    main()
