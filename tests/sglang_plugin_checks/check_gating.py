"""Per-batch gating at the ceiling: the real AdaptiveController asks the real (hooked)
AdaptiveSpeculativeParams for each batch's steps and switches the worker through
EAGLEWorkerV2.apply_runtime_state. The ceiling is set through the real Scheduler.set_internal_state.

Argument: the adaptive config path. Prints one JSON object with a trace of (phase, batch size, steps the
worker runs) and the plugin's counters as get_internal_state reports them.
"""

from __future__ import annotations

import sys

import _harness


def main() -> None:
    config_path = sys.argv[1]
    plugin, scheduler, controller, params, worker = _harness.start_decoding(config_path)

    trace = []

    def run(phase: str, sizes: list[int]) -> None:
        for size in sizes:
            controller.activate_step_by_batch(size)
            trace.append({"phase": phase, "bs": size, "steps": worker.speculative_num_steps})

    run("unset", [1, 8, 40, 48])
    answers = {"8": _harness.set_state(scheduler, {"spectower_spec_max_bs": 8})}
    run("ceiling8_below", [1, 4, 8])
    run("ceiling8_above", [9, 16])
    run("ceiling8_hover_at", [8] * 5)
    run("ceiling8_below_margin", [7] * 20)
    answers["0"] = _harness.set_state(scheduler, {"spectower_spec_max_bs": 0})
    run("ceiling0", [1, 2, 1])
    answers["100"] = _harness.set_state(scheduler, {"spectower_spec_max_bs": 100})
    run("ceiling100", [40, 48, 64])
    state = _harness.get_state(scheduler)
    _harness.emit(
        {
            "plugin_loaded": plugin is not None,
            "answers": answers,
            "trace": trace,
            "spectower": state.get("spectower"),
            "resolved_speculative_num_steps": state.get("speculative_num_steps"),
            "candidate_steps": params.candidate_steps,
        }
    )


if __name__ == "__main__":
    main()
