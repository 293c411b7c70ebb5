"""The audit side of `bench sweep`: ONE row when it borrows the knob and ONE when it gives it back.

The per-slice moves are the run's own record (``SweepResult.knob_moves``), not control actions. The knob
logic itself (borrow / move / give back through the server's sweep lock) is collectors/bench/knob.py.
"""

from __future__ import annotations

from typing import Any

import httpx
from spectower.collectors.bench.knob import HttpKnob
from spectower.control import audit

SWEEP_REASON = "bench sweep"


def audited_sweep_knob(
    client: httpx.AsyncClient, admin_key: str | None, db: Any, actor: str, *, force: bool = False,
    reason: str = SWEEP_REASON,
) -> HttpKnob:  # fmt: skip
    """The sweep's knob, with the start and end of the borrow audited under ``actor`` (who ran the sweep)."""
    url = str(client.base_url).rstrip("/")
    actor = audit.validate_actor(actor)

    def on_borrow(event: dict[str, Any]) -> None:
        found = event["found"]
        if "failed" in event:
            old = found.value if found is not None else None
            audit.record_event(
                db, actor=actor, server_url=url, action="sweep-start", reason=reason, old_max_bs=old,
                confirmed=False, error=f"not applied: {event['failed']}"[:2000],
            )  # fmt: skip
            return
        note = f"borrowed with a sweep lock; found {found.describe()}"
        if event["forced"]:
            note += " (--force: " + "; ".join(event["problems"]) + ")"
        audit.record_event(
            db, actor=actor, server_url=url, action="sweep-start", reason=reason, old_max_bs=found.value,
            new_max_bs=found.value, confirmed=True, error=note,
        )  # fmt: skip

    def on_give_back(event: dict[str, Any]) -> None:
        found = event["found"]
        audit.record_event(
            db, actor=actor, server_url=url, action="sweep-end", reason=reason, confirmed=event["restored"],
            new_max_bs=found.value if found is not None else None,
            error=f"{event['summary']}; {event['moves']} knob moves in the run's record",
        )  # fmt: skip

    return HttpKnob(client, admin_key, force=force, on_borrow=on_borrow, on_give_back=on_give_back)
