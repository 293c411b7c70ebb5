"""Gated batches do not feed the band's acceptance EMA (nor its update counter), with the real
AdaptiveController / AdaptiveSpeculativeParams / AdaptiveStepSlot; also the verify-result lag of overlap
scheduling (a batch's verify arrives after the next batch was launched).

Argument: the adaptive config path. Run with SPECTOWER_GATE_MIN_DWELL=0 so the gate may reopen at once.
"""

from __future__ import annotations

import sys

import _harness

# After warm-up (10) SGLang's band re-decides every 5 verifies; fed zeros it alternates 0 and 3 steps: at 55
# the unhooked twin has just dropped to 0.
GATED_ROUNDS = 55


def slot_state(params, band: int) -> dict:
    slot = params._slots[band]
    return {"ema": slot.ema_accept_len, "count": slot._batch_count, "steps": slot.current_steps}


def main() -> None:
    config_path = sys.argv[1]
    plugin, scheduler, controller, params, worker = _harness.start_decoding(config_path)
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    out: dict = {"plugin_loaded": plugin is not None}
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 4})

    # 1. Gated batches of 8 (band 8), GATED_ROUNDS verifies of all-zero accepts: the band must not move.
    before = slot_state(params, 8)
    for _ in range(GATED_ROUNDS):
        controller.activate_step_by_batch(8)
        controller.on_verify_complete([0] * 8, batch_size=8)
    out["gated"] = {
        "before": before,
        "after": slot_state(params, 8),
        "worker_steps": worker.speculative_num_steps,
    }

    # 2. The same zeros into an unhooked twin (SGLang's original method): what the gate prevents.
    twin = AdaptiveSpeculativeParams(initial_steps=_harness.N_STEPS, cfg_path=config_path)
    original = AdaptiveSpeculativeParams.on_verify_complete.__wrapped__
    twin_before = slot_state(twin, 8)
    for _ in range(GATED_ROUNDS):
        original(twin, [0] * 8, 8)
    out["unhooked_twin"] = {"before": twin_before, "after": slot_state(twin, 8)}

    # 3. Below the ceiling the band learns as usual.
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 100})
    before = slot_state(params, 8)
    for _ in range(3):
        controller.activate_step_by_batch(8)
        controller.on_verify_complete([1] * 8, batch_size=8)
    out["drafted"] = {"before": before, "after": slot_state(params, 8)}

    # 4. Overlap lag, both orders: launch two batches, then their verifies arrive oldest first.
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 8})
    lag = []
    for first, second in ((4, 12), (12, 4)):
        b1, b12 = slot_state(params, 1), slot_state(params, 8)
        controller.activate_step_by_batch(first)
        steps_first = worker.speculative_num_steps
        controller.activate_step_by_batch(second)
        steps_second = worker.speculative_num_steps
        for size, steps in ((first, steps_first), (second, steps_second)):
            accepted = [2] * size if steps > 0 else [0] * size
            controller.on_verify_complete(accepted, batch_size=size)
        lag.append(
            {
                "order": [first, second],
                "steps": [steps_first, steps_second],
                "band1": [b1, slot_state(params, 1)],
                "band8": [b12, slot_state(params, 8)],
            }
        )
    out["lag"] = lag
    out["spectower"] = _harness.get_state(scheduler).get("spectower")
    _harness.emit(out)


if __name__ == "__main__":
    main()
