"""The knob's ownership contract (contract_scenario.STEPS) through the real Scheduler methods.

Argument: the adaptive config path. Prints one JSON object: the rows of contract_scenario.run and any
mismatches with the expectations.
"""

from __future__ import annotations

import sys

import _harness
import contract_scenario


def main() -> None:
    config_path = sys.argv[1]
    logs = _harness.capture_logs()
    plugin, scheduler = _harness.start_scheduler(config_path)

    def get_spectower() -> dict:
        return dict(_harness.get_state(scheduler).get("spectower") or {})

    rows = contract_scenario.run(lambda request: _harness.set_state(scheduler, request), get_spectower)
    _harness.emit(
        {
            "plugin_loaded": plugin is not None,
            "rows": rows,
            "mismatches": contract_scenario.mismatches(rows),
            "warnings": logs.messages(name_prefix="", level=30),
        }
    )


if __name__ == "__main__":
    main()
