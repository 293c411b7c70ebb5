"""How much SGLang's runtime-context override log grows while the load hovers at the ceiling.

Every step switch goes through EAGLEWorkerV2.apply_runtime_state, which appends an
("adaptive_spec.restore", {...}) entry to get_context()'s override log, and nothing trims it. Drives the
real controller for BATCHES decode rounds, verify results included, with the ceiling at CEILING.

Arguments: config path, batches, then the patterns to run one after the other ("alternate": CEILING,
CEILING+1, ...; "noisy": uniform in [CEILING-3, CEILING+3], seeded). Hysteresis and exploration settings
come from the environment (SPECTOWER_GATE_MARGIN, SPECTOWER_GATE_MIN_DWELL, SPECTOWER_EXPLORE_SHARE), as in a
real server.
"""

from __future__ import annotations

import pickle
import random
import sys

import _harness

CEILING = 32
SEED = 7
# The exploration windows keep time (plugin/explore.py: a cold part lasts at least as long per batch as the
# last exploring part did; an exploring part ends after WINDOW_EXPLORE_MAX_S busy seconds). On the real clock
# their figures depended on how loaded the machine running the check was (on a 2-core machine under the full
# suite an exploring part ran out of time before it explored a batch), so the gate's clock here advances
# STEP_S a batch, a decode step on the H200 pairs, as a server's would.
STEP_S = 0.005


def main() -> None:
    config_path, batches, patterns = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    plugin, scheduler, controller, _params, worker = _harness.start_decoding(config_path)
    from sglang.srt.runtime_context import get_context

    gate = plugin.gate_state() if plugin is not None else None
    clock = _harness.FakeClock()
    if gate is not None:
        gate.clock = clock
    results = {}
    for pattern in patterns:
        # A fresh start per pattern: set the ceiling (the gate reopens) and let one batch at the ceiling
        # bring the worker back to its drafting step before measuring.
        _harness.set_state(scheduler, {"spectower_spec_max_bs": CEILING})
        controller.activate_step_by_batch(CEILING)
        rng = random.Random(SEED)
        start = len(get_context().overrides_log())
        switches_before = gate.switches if gate is not None else 0
        changes_before = (gate.step_changes, gate.band_changes) if gate is not None else (0, 0)
        explore_before = gate.explore_changes if gate is not None else 0
        drafted_rounds = 0
        for i in range(batches):
            size = CEILING + (i % 2) if pattern == "alternate" else rng.randint(CEILING - 3, CEILING + 3)
            clock.now += STEP_S
            controller.activate_step_by_batch(size)
            steps = worker.speculative_num_steps
            drafted_rounds += steps > 0
            controller.on_verify_complete([2] * size if steps > 0 else [0] * size, batch_size=size)
        grown = get_context().overrides_log()[start:]
        results[pattern] = {
            "log_growth": len(grown),
            "log_growth_bytes_pickled": len(pickle.dumps(grown)),
            "sources": sorted({source for source, _fields in grown}),
            "drafted_rounds": drafted_rounds,
            "gate_switches": (gate.switches if gate is not None else 0) - switches_before,
            "step_changes": (gate.step_changes if gate is not None else 0) - changes_before[0],
            "band_changes": (gate.band_changes if gate is not None else 0) - changes_before[1],
            "explore_changes": (gate.explore_changes if gate is not None else 0) - explore_before,
        }
    _harness.emit(
        {
            "plugin_loaded": plugin is not None,
            "batches": batches,
            "ceiling": CEILING,
            "patterns": results,
            "spectower": _harness.get_state(scheduler).get("spectower"),
        }
    )


if __name__ == "__main__":
    main()
