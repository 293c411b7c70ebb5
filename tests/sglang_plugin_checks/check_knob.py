"""set_internal_state / get_internal_state through the real Scheduler methods and SGLang's own controller.

Argument: the adaptive config path (written by the pytest side with control.sglang_config). Prints one JSON
object with a row per request: what was sent, the answer, and the state read back afterwards.
"""

from __future__ import annotations

import sys

import _harness

# Raw JSON values of spectower_spec_max_bs, as an HTTP client sends them (tests/test_sglang_plugin.py compares
# the simulator's answers with these).
HTTP_KNOB_VALUES = ("true", "false", "1.0", '"1"', "3", "null")


def main() -> None:
    config_path = sys.argv[1]
    logs = _harness.capture_logs()
    plugin, scheduler = _harness.start_scheduler(config_path)
    from sglang.srt.runtime_context import get_context

    initial = _harness.get_state(scheduler)
    rows = []
    requests = [
        {"spectower_spec_max_bs": 8},
        {"spectower_spec_max_bs": -1},
        {"spectower_spec_max_bs": 2.5},
        {"spectower_spec_max_bs": 4.0},
        {"spectower_spec_max_bs": True},
        {"spectower_unknown": 3},
        {"speculative_accept_threshold_single": 0.5},
        {"pp_max_micro_batch_size": 10_000},
        {"spectower_spec_max_bs": 0, "speculative_accept_threshold_acc": 0.7},
        {"spectower_spec_max_bs": 5, "no_such_sglang_key": 1},
        {"spectower_spec_max_bs": -3, "speculative_accept_threshold_single": 0.9},
        {"spectower_spec_max_bs": 100},
    ]
    for request in requests:
        log_before = len(get_context().overrides_log())
        updated = _harness.set_state(scheduler, dict(request))
        state = _harness.get_state(scheduler)
        rows.append(
            {
                "request": request,
                "updated": updated,
                "spectower": state.get("spectower"),
                "speculative_accept_threshold_single": state.get("speculative_accept_threshold_single"),
                "speculative_accept_threshold_acc": state.get("speculative_accept_threshold_acc"),
                "pp_max_micro_batch_size": state.get("pp_max_micro_batch_size"),
                "new_overrides": get_context().overrides_log()[log_before:],
            }
        )
    # Over HTTP the body first goes through SGLang's own request model (SetInternalStateReq's pydantic
    # schema, lax: JSON true reaches the scheduler as 1, "1" as 1): what a real server answers each raw body.
    from pydantic import TypeAdapter
    from sglang.srt.managers.io_struct import SetInternalStateReq

    http_rows = []
    for raw in HTTP_KNOB_VALUES:
        _harness.set_state(scheduler, {"spectower_spec_max_bs": 8})
        body = f'{{"server_args": {{"spectower_spec_max_bs": {raw}}}}}'
        try:
            coerced = dict(TypeAdapter(SetInternalStateReq).validate_json(body).server_args)
        except ValueError as exc:  # pydantic's ValidationError: the HTTP server's 400
            http_rows.append({"raw": raw, "status": 400, "error": str(exc).splitlines()[0]})
            continue
        updated = _harness.set_state(scheduler, coerced)
        knob = (_harness.get_state(scheduler).get("spectower") or {}).get("spec_max_bs")
        value = coerced["spectower_spec_max_bs"]
        http_rows.append({"raw": raw, "status": 200, "coerced": [value, type(value).__name__],
                          "updated": updated, "spec_max_bs": knob})  # fmt: skip
    _harness.emit(
        {
            "plugin_loaded": plugin is not None,
            "http_rows": http_rows,
            "initial_spectower": initial.get("spectower"),
            "initial_has_sglang_fields": all(
                k in initial
                for k in ("speculative_num_steps", "memory_usage", "effective_max_running_requests_per_dp")
            ),
            "max_running_requests": scheduler.max_running_requests,
            "rows": rows,
            "warnings": logs.messages(name_prefix="", level=30),
        }
    )


if __name__ == "__main__":
    main()
