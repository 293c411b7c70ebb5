"""An exploration window yields to a full server (plugin 0.4.12), inside SGLang's own classes: the knob
plugin's hook on the real (HookRegistry-wrapped) ``Scheduler.get_next_batch_to_run`` reads the requests its
waiting queue still holds once it chose the next batch, and the gate in the real ``AdaptiveSpeculativeParams``
(driven through the real ``AdaptiveController``) lets a due window wait while they wait, cuts an exploring
part short when they come, and begins the window again with room.

CONSTRUCTED (see _harness.py for the rest): ``get_next_batch_to_run``'s body, which needs a model and a KV
pool: it answers SGLang's own ``NextBatchPlan`` with no new batch (the running batch decodes), as SGLang does
when it cannot admit what waits; the check sets the waiting queue itself. Run with a 64-batch cycle
(``SPECTOWER_EXPLORE_CYCLE=100``: 94 cold batches, then the window) at the default share (an exploring part
of 4 batches), the knob a policy's 8, batches of 16 (gated by the ceiling, within the exploring part's stream
limit: they draft there).

The same hook notes an idle turn (nothing to run, nothing waiting, nothing running: plugin 0.4.13) to the
decode counters, which then leave the gap before the next step out of what its mode spent outside its span
(``EngineCounters.note_idle``); a turn with requests waiting is not idle, so its gap is counted.

Argument: the adaptive config path. Prints one JSON object: each turn's waiting requests, the gate's
``waiting`` after the hooked call, the steps the worker ran, the window's part and the counters' seconds
outside every span so far.
"""

from __future__ import annotations

import sys
from typing import Any

import _harness

BATCH = 16


def install_next_batch() -> None:
    """``Scheduler.get_next_batch_to_run``'s body, before load_plugins() wraps it: nothing new to run."""
    from sglang.srt.managers.schedule_batch import NextBatchPlan
    from sglang.srt.managers.scheduler import Scheduler

    def next_batch(self: Any, running_batch: Any = None, last_batch: Any = None, **kwargs: Any) -> Any:
        return NextBatchPlan(batch_to_run=None, running_batch=running_batch)

    Scheduler.get_next_batch_to_run = next_batch  # type: ignore[method-assign]


def main() -> None:
    config_path = sys.argv[1]
    install_next_batch()
    plugin, scheduler, controller, _params, worker = _harness.start_decoding(config_path)
    gate = plugin.gate_state()
    counters = plugin.engine_counters_state()
    clock = _harness.FakeClock()
    gate.clock = clock
    answers = {"policy_8": _harness.set_state(scheduler, {"spectower_writer": 2, "spectower_spec_max_bs": 8})}

    def turn(waiting: int) -> dict[str, Any]:
        scheduler.waiting_queue = [object() for _ in range(waiting)]
        scheduler.get_next_batch_to_run(running_batch=None, last_batch=None)
        noted = gate.waiting
        controller.activate_step_by_batch(BATCH)
        steps = worker.speculative_num_steps
        controller.on_verify_complete([2] * BATCH if steps > 0 else [0] * BATCH, batch_size=BATCH)
        clock.now += 0.01
        outside = sum(sum(values) for values in counters.outside.values())
        return {"waiting": waiting, "noted": noted, "steps": steps, "part": gate.explorer.phase_now,
                "outside_s": outside}  # fmt: skip

    # 94 cold batches with room bring the first window due; it waits while 5 requests wait and then for 25
    # batches in a row with room (a quarter of the cycle), the exploring part drafts, a queue after its third
    # batch ends it, and after 25 batches with room again the window begins anew and runs its 4 batches
    pattern = [0] * 94 + [5] * 3 + [0] * 27 + [5] + [0] * 29
    turns = [turn(waiting) for waiting in pattern]
    state = _harness.get_state(scheduler)["spectower"]
    _harness.emit({"answers": answers, "turns": turns, "window": state["explore"]["window"],
                   "plugin_version": state["plugin_version"]})  # fmt: skip


if __name__ == "__main__":
    main()
