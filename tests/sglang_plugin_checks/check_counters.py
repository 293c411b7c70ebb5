"""The decode counters (plugin/engine_counters.py) through SGLang's real classes: the real AdaptiveController
asks the real (hooked) AdaptiveSpeculativeParams for each batch's steps and feeds it the verify results;
get_internal_state publishes the counters. The counters' clock is replaced with a fake one (deterministic).

Argument: the adaptive config path. Prints one JSON object: the counters block after each phase.
"""

from __future__ import annotations

import gc
import os
import sys

import _harness


def main() -> None:
    config_path = sys.argv[1]
    os.environ["SPECTOWER_GC_LONG_S"] = "1e-9"  # read when the plugin's state is made: every collection long
    plugin, scheduler, controller, _params, worker = _harness.start_decoding(config_path)
    clock = _harness.FakeClock()
    plugin.engine_counters_state().clock = clock
    out: dict = {"plugin_loaded": plugin is not None, "phases": {}}

    def snap(phase: str) -> None:
        out["phases"][phase] = _harness.get_state(scheduler)["spectower"]["counters"]

    snap("start")
    # 1. No ceiling: a batch of 4 drafts (band 1 -> 3 steps), 5 ms, accepts 2 per request: 12 tokens.
    controller.activate_step_by_batch(4)
    out["steps_drafted"] = worker.speculative_num_steps
    clock.now += 0.005
    controller.on_verify_complete([2, 2, 2, 2], batch_size=4)
    clock.now += 1.0  # idle
    # 2. Overlap: two batches of 3 launched before the first verify; 2 ms + 7 ms, then 6 ms.
    controller.activate_step_by_batch(3)
    clock.now += 0.002
    controller.activate_step_by_batch(3)
    clock.now += 0.007
    controller.on_verify_complete([1, 0, 3], batch_size=3)
    clock.now += 0.006
    controller.on_verify_complete([0, 0, 0], batch_size=3)
    snap("drafted")
    # 3. Ceiling 8: a batch of 20 is gated (0 steps), 4 ms, one token per request.
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 8})
    clock.now += 1.0
    controller.activate_step_by_batch(20)
    out["steps_gated"] = worker.speculative_num_steps
    clock.now += 0.004
    controller.on_verify_complete([0] * 20, batch_size=20)
    # 4. A verify nobody launched: only "unmatched".
    controller.on_verify_complete([1] * 5, batch_size=5)
    snap("gated")
    # 5. A full collection in this (the scheduler's) process, timed by the plugin's gc callback; a threshold
    # of a nanosecond (SPECTOWER_GC_LONG_S, read when the plugin's state was made) keeps it as long.
    gc.collect(2)
    out["spectower"] = _harness.get_state(scheduler)["spectower"]
    _harness.emit(out)


if __name__ == "__main__":
    main()
