"""Exploration in the real (hooked) AdaptiveSpeculativeParams: with the default share (2 %, the
environment leaves SPECTOWER_EXPLORE_SHARE unset) a run of 4 batches from a bin's 50th runs the other mode
than the ceiling says; an operator's manual off holds it (no exploration); after the release the share set
through the real Scheduler.set_internal_state (``spectower_explore_share``) applies. Verify results go
through the real controller, so the counters, the EMA guard and SGLang's override log see it all.

Argument: the adaptive config path. Prints one JSON object: the steps the worker ran per phase, the answers
of each set, the override-log growth, and the plugin's state block at the end.
"""

from __future__ import annotations

import sys

import _harness


def main() -> None:
    config_path = sys.argv[1]
    plugin, scheduler, controller, _params, worker = _harness.start_decoding(config_path)
    from sglang.srt.runtime_context import get_context

    gate = plugin.gate_state() if plugin is not None else None

    def run(size: int, batches: int) -> list[int]:
        steps_seen = []
        for _ in range(batches):
            controller.activate_step_by_batch(size)
            steps = worker.speculative_num_steps
            steps_seen.append(steps)
            controller.on_verify_complete([2] * size if steps > 0 else [0] * size, batch_size=size)
        return steps_seen

    out: dict = {"plugin_loaded": plugin is not None, "answers": {}, "phases": {}}
    answers, phases = out["answers"], out["phases"]
    answers["ceiling8"] = _harness.set_state(scheduler, {"spectower_spec_max_bs": 8})
    out["initial_explore"] = _harness.get_state(scheduler)["spectower"]["explore"]
    start = len(get_context().overrides_log())
    switches = gate.switches if gate is not None else 0
    changes = (gate.step_changes, gate.explore_changes) if gate is not None else (0, 0)
    phases["below"] = run(4, 100)  # bin 4 drafts: its 50th-53rd batches are gated
    phases["above"] = run(16, 100)  # bin 16 is gated: its 50th-53rd batches draft
    out["log_growth"] = len(get_context().overrides_log()) - start
    out["gate_switches"] = (gate.switches if gate is not None else 0) - switches
    out["step_changes"] = (gate.step_changes if gate is not None else 0) - changes[0]
    out["explore_changes"] = (gate.explore_changes if gate is not None else 0) - changes[1]
    answers["manual_off"] = _harness.set_state(scheduler, {"spectower_writer": 1, "spectower_spec_max_bs": 0})
    out["held_explore"] = _harness.get_state(scheduler)["spectower"]["explore"]
    phases["held_off"] = run(4, 100)  # off means off: nothing explored
    answers["policy_share_while_locked"] = _harness.set_state(
        scheduler, {"spectower_writer": 2, "spectower_explore_share": 0.05}
    )
    answers["release"] = _harness.set_state(scheduler, {"spectower_writer": 1, "spectower_release": 1})
    answers["share_0.1"] = _harness.set_state(scheduler, {"spectower_explore_share": 0.1})
    answers["share_0.5"] = _harness.set_state(scheduler, {"spectower_explore_share": 0.5})
    # bin 4 counted to 100 before the hold; at share 0.1 its runs start at 130, 170, ...: positions 30-33
    phases["after_release"] = run(4, 40)
    out["spectower"] = _harness.get_state(scheduler).get("spectower")
    _harness.emit(out)


if __name__ == "__main__":
    main()
